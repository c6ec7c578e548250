// File: router/runtime/access_log.h
// Optional JSON access log: one line per request. Thread-safe (spdlog logger with its own lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/mutex.h"

namespace spdlog {
class logger;
}

namespace kvgate::router {

/// One request, as written to the access log.
struct AccessRecord {
  std::string_view request_id;
  std::string_view method;
  std::string_view path;
  std::string_view api;  // chat, completions, messages, responses, other
  std::string_view model;
  std::string_view worker;   // empty when the gateway answered itself
  std::string_view api_key;  // the key's name (auth.api_keys), empty without one
  int status = 0;
  uint64_t bytes_sent = 0;   // response body bytes relayed to the client
  double ttfb_seconds = -1;  // -1 when no worker answered
  double e2e_seconds = 0;
  uint32_t attempts = 0;
  int64_t cached_tokens = -1;    // from the response's usage, -1 when absent
  int64_t prompt_tokens = -1;    // likewise (each API's own counts, docs/agent-apis.md)
  std::string_view response_id;  // a stored OpenAI response's id ("" none)
  // The client's W3C trace context (forwarded to the worker as it is): a valid one is logged as
  // trace_id and span_id, so a request's line joins its trace.
  std::string_view traceparent;
};

class AccessLog {
 public:
  AccessLog();
  ~AccessLog();

  /// Opens `path` ("-" for stdout) for appending; replaces any previous sink.
  absl::Status Open(const std::string& path);
  /// Opens the same path again (SIGUSR1, after logrotate moved the file away); stdout and a
  /// closed log are left as they are.
  absl::Status Reopen();
  void Close();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  void Write(const AccessRecord& record);

  /// The JSON line for `record` (exposed for tests).
  static std::string Format(const AccessRecord& record);

 private:
  mutable common::Mutex mu_;  // guards logger_ (swapped by reloads)
  std::shared_ptr<spdlog::logger> logger_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);  // what Open opened
  std::atomic<bool> enabled_{false};
};

}  // namespace kvgate::router
