// File: sim/cli.h
// kvgate-sim's command line (docs/simulator.md lists every flag). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sim/kv_events.h"
#include "sim/pd_protocol.h"
#include "sim/profile.h"

namespace kvgate::sim {

/// Fault injection, per simulated server. Rates are probabilities per completion request, drawn
/// deterministically from (seed, worker, request number).
struct FaultOptions {
  double error_rate = 0;        // Answer 500 with an OpenAI error body.
  double hang_rate = 0;         // Read the request, never answer.
  double close_rate = 0;        // Close the connection mid-stream (after half the tokens).
  double drop_events_rate = 0;  // KV-event batches not sent live (still kept for replay).
  uint64_t crash_after = 0;     // Non-zero: the process exits (code 3) on completion request N+1.
  double slow_start_s = 0;  // Real seconds after start during which /health and requests get 503.
};

/// --convert-quirk (tests): the agent API whose conversion to chat kvgate-sim changes on purpose.
enum class ConvertQuirk { kNone, kMessages, kResponses };

/// Everything kvgate-sim runs with. A value type; thread-compatible.
struct SimOptions {
  std::string host = "127.0.0.1";
  uint16_t base_port = 8000;  // Worker i listens on base_port + i (0: ephemeral ports).
  uint32_t workers = 1;
  uint32_t dp_size = 1;
  double time_scale = 1.0;  // Real seconds per simulated second.
  std::string model = "sim-model";
  std::string profile_path;  // A built-in profile's name or a file; empty: llama3-8b-h100.
  Profile profile;
  uint64_t seed = 0;
  uint32_t default_max_tokens = 16;

  // KV events (off when kv_events_endpoint is empty). Worker i, DP rank r publishes on
  // OffsetEndpoint(endpoint, i * dp_size + r); the replay endpoint is offset the same way.
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  std::string kv_events_topic;
  EventEncoding kv_events_encoding = EventEncoding::kArray;
  bool kv_events_bind = false;
  bool kv_events_remote = false;  // Bound event sockets beyond loopback allowed.
  size_t kv_events_buffer_steps = 10000;

  std::string store;               // kvgate-store master address; empty: no external KV store.
  std::string store_credentials;   // See StoreClientOptions::credentials_file.
  bool engine_ttft_usage = false;  // usage carries kv_engine_ttft_s (EngineTtftField)

  // P/D disaggregation (sim/pd_agent.h): a prefill or decode worker has a side channel
  // (bootstrap server) on bootstrap_port + i (0: ephemeral). Times are simulated seconds.
  PdRole role = PdRole::kMixed;
  PdProtocol pd_protocol = PdProtocol::kVllmNixl;
  uint16_t bootstrap_port = 0;
  double pd_abort_timeout_s = 480;  // A prefill frees KV nobody pulled (VLLM_NIXL_ABORT_...).
  double pd_wait_timeout_s = 60;  // A decode waits this long for its prefill's KV, then recomputes.

  // The agents' APIs (sim/agent_api.h). Each worker keeps its own store of responses
  // (/v1/responses `store`), least recently used first out; 0 turns the store off (vLLM without
  // VLLM_ENABLE_RESPONSES_API_STORE).
  size_t responses_store_entries = 4096;
  ConvertQuirk convert_quirk = ConvertQuirk::kNone;

  FaultOptions faults;
  std::string log_level = "info";
  bool help = false;
};

/// Parses argv (flags as `--name value` or `--name=value`), loads --profile and applies the
/// profile overrides (--num-gpu-blocks ...). @return kInvalidArgument naming the bad flag.
absl::StatusOr<SimOptions> ParseSimCli(int argc, const char* const* argv);

/// The --help text.
std::string SimUsage();

}  // namespace kvgate::sim
