// File: tests/support/redis_server.h
// A real Redis (Debian's redis-server) on loopback for tests: no persistence, optional
// password, killed on destruction; Stop() and Start() again on the same port stand for an
// outage. Used by the replica-sync tests. Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tests/support/child_process.h"

namespace kvgate::testing {

/// The redis-server binary, or "" when it is not installed.
std::string FindRedis();

class RedisServer {
 public:
  /// Starts redis-server (on a free port the first time, the same port after Stop()) and
  /// waits until it answers PING.
  bool Start(const std::string& binary, const std::string& password = "");
  /// Kills it (SIGKILL): its state is gone, as after a crash.
  void Stop();
  uint16_t port() const { return port_; }
  /// "redis://127.0.0.1:PORT".
  std::string Url() const;

 private:
  std::unique_ptr<ChildProcess> process_;
  uint16_t port_ = 0;
};

}  // namespace kvgate::testing
