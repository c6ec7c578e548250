// File: tests/fakes/scripted_upstream.h
// A worker that answers with exact bytes: for each request it reads (head and Content-Length
// body), a responder returns the response as pieces to write one by one with a pause between
// them, so tests control framing (chunk extensions, trailers, HTTP/1.0 close-delimited
// bodies, malformed chunk sizes) and how bytes are split on the wire. Also raw client
// helpers. Thread-safe: one thread per connection.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvgate::testing {

struct Script {
  std::vector<std::string> pieces;
  std::chrono::milliseconds gap{0};  // pause before every piece after the first
  bool close_after = false;          // close the connection after the last piece
};

class ScriptedUpstream {
 public:
  using Responder = std::function<Script(const std::string& request)>;
  explicit ScriptedUpstream(Responder responder);
  ~ScriptedUpstream();

  uint16_t port() const { return port_; }
  std::string url() const;
  /// Every request received (head and body), in order.
  std::vector<std::string> requests() const;

 private:
  void AcceptLoop();
  void Serve(int fd);

  Responder responder_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable common::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

/// Sends `bytes` on a new connection to `port` and returns everything the server sends until
/// it closes the connection or `timeout` passes (`*closed` says which).
std::string RawExchange(uint16_t port, const std::string& bytes,
                        std::chrono::milliseconds timeout = std::chrono::seconds(5),
                        bool* closed = nullptr);

}  // namespace kvgate::testing
