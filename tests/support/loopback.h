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

/// A loopback TCP port that was free a moment ago and has no listener; 0 if none could be had.
/// Another socket may take it meanwhile (a gateway binding port 0 in the same test can get the
/// same port): for a worker that must stay dead, use DeadPort.
uint16_t FreePort();

/// A loopback TCP port held bound, without a listener, for this object's life: a connection to
/// it is refused, and no other socket can take it (a "dead worker"). port() is 0 if none could
/// be had.
class DeadPort {
 public:
  DeadPort();
  ~DeadPort();
  DeadPort(const DeadPort&) = delete;
  DeadPort& operator=(const DeadPort&) = delete;
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace kvgate::testing
