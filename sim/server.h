// File: sim/server.h
// The kvgate-sim process: `workers` independent simulated vLLM servers, each an HTTP port in
// front of `dp_size` Engines, all on one io_context run by one thread. Each engine steps in
// simulated time on an Asio timer scaled by time_scale and publishes its KV events.
// Endpoints per server: POST /v1/chat/completions, /v1/completions, /reset_prefix_cache;
// the agents' APIs (sim/agent_api.h): POST /v1/messages, /v1/messages/count_tokens,
// /v1/responses, GET and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, GET
// /v1/responses/{id}/input_items; GET /v1/models, /health, /metrics, /debug/blocks (the cached
// hash sets, for tests). Each server is a SimServer (worker_server.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sim/cli.h"

namespace kvgate::sim {

/// Where one engine publishes.
struct EventEndpoints {
  uint32_t worker = 0;
  uint32_t rank = 0;
  std::string endpoint;
  std::string replay_endpoint;
};

/// Thread-compatible: call Start/Run/StartThread/Stop from one controlling thread (the io thread
/// runs everything else); the getters are valid after Start().
class SimProcess {
 public:
  explicit SimProcess(SimOptions options);
  ~SimProcess();
  SimProcess(const SimProcess&) = delete;
  SimProcess& operator=(const SimProcess&) = delete;

  /// Binds every HTTP port and event socket.
  /// @return kUnavailable when a port cannot be bound, kInvalidArgument for a bad endpoint.
  absl::Status Start();
  /// Serves on the calling thread until Stop().
  void Run();
  /// Serves on a new thread (tests).
  void StartThread();
  /// Stops serving and joins the thread started by StartThread().
  void Stop();

  /// Bound HTTP ports, one per worker.
  std::vector<uint16_t> ports() const;
  /// P/D side-channel (bootstrap) ports, one per worker; empty for --role mixed.
  std::vector<uint16_t> bootstrap_ports() const;
  std::vector<EventEndpoints> event_endpoints() const;
  /// One line of totals (requests, steps, tokens, simulated vs real time, worst lag).
  std::string Summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::sim
