// File: tests/support/loopback.h
// TCP sockets on 127.0.0.1 for fakes and tests that speak raw bytes: a listener on a port the
// kernel picks, a connection to a port, a port nothing listens on. Stateless; thread-safe.
#pragma once

#include <cstdint>

namespace kvgate::testing {

/// A listening socket (close-on-exec) on 127.0.0.1 at a port the kernel picked, written to
/// `*port`; -1 when it cannot listen.
int ListenLoopback(uint16_t* port, int backlog = 128);

/// A socket (close-on-exec) connected to 127.0.0.1:`port`; -1 (nothing left open) on failure.
int ConnectLoopback(uint16_t port);

/// A loopback TCP port that was free a moment ago and has no listener (a "dead worker"); 0 if
/// none could be had.
uint16_t FreePort();

}  // namespace kvgate::testing
