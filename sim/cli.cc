#include "sim/cli.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <tuple>
#include <vector>

#include "common/logging.h"
#include "common/strings.h"
#include "kvevents/endpoints.h"

namespace kvgate::sim {
namespace {

absl::Status Bad(std::string_view flag, std::string_view why) {
  return absl::InvalidArgumentError(common::StrCat("--", flag, ": ", why));
}

}  // namespace

std::string SimUsage() {
  return R"(kvgate-sim: a simulated vLLM engine (OpenAI API, vLLM metrics, vLLM KV events).

Usage: kvgate-sim [flags]
  --host HOST                      listen address (default 127.0.0.1)
  --port P | --base-port P         first HTTP port; worker i uses P+i; 0 = ephemeral (default 8000)
  --workers N                      independent simulated servers in this process (default 1)
  --dp-size N                      data-parallel engines behind each port (default 1)
  --time-scale S                   real seconds per simulated second (default 1; 0.05 = 20x)
  --model NAME                     served model name (default sim-model)
  --profile NAME|FILE              engine profile: a built-in one (llama3-8b-h100, the default;
                                   hybrid: gpt-oss-like, gemma3-like, qwen3-next-like) or a
                                   YAML file
  --seed N                         output and fault seed (default 0)
  --default-max-tokens N           output length when the request has none (default 16)
  --num-gpu-blocks N, --num-cpu-blocks N, --max-num-seqs N, --max-num-batched-tokens N,
  --max-model-len N                override the profile (--num-gpu-blocks sets the full-attention
                                   group's pool and scales a hybrid profile's other group alike)
  --kv-events-endpoint EP          ZMQ PUB endpoint (vLLM rule: bind if '*', '::', ipc://,
                                   inproc://, else connect); worker i rank r uses port +i*dp+r
  --kv-events-replay-endpoint EP   ZMQ ROUTER endpoint for replay (always bound)
  --kv-events-topic T              first frame of every message (default empty)
  --kv-events-encoding array|map   event encoding (default array = vLLM <= 0.23)
  --kv-events-bind                 bind the PUB endpoint even without '*'
  --kv-events-remote               allow bound event sockets beyond loopback (events carry
                                   token ids, decodable to prompt text; vLLM binds tcp://*)
  --kv-events-buffer-steps N       batches kept for replay (default 10000)
  --store HOST:PORT                kvgate-store master: every engine looks up, loads and saves
                                   blocks there (MooncakeStoreConnector-style; see the profile's
                                   kv_bytes_per_token, store_bandwidth_bytes_per_s)
  --store-credentials FILE         the store's credentials file (default: the one a local
                                   kvgate-store made, $KVGATE_STORE_CREDENTIALS; "none")
  --engine-ttft-usage              usage also carries kv_engine_ttft_s: arrival to first token
                                   by the engine's clock, in real seconds (a replay tells
                                   routing from this testbed's hops and late steps)
  --role prefill|decode|mixed      P/D disaggregation role (default mixed)
  --pd-protocol P                  vllm-nixl|vllm-mooncake|vllm-p2p-nccl|sglang-bootstrap
                                   (default vllm-nixl)
  --bootstrap-port N               P/D side channel (bootstrap server) of worker 0; worker i
                                   uses N+i; 0 = ephemeral (default 0)
  --pd-abort-timeout-s S           a prefill frees KV nobody pulled after S simulated seconds
                                   (default 480, as VLLM_NIXL_ABORT_REQUEST_TIMEOUT)
  --pd-wait-timeout-s S            a decode waits S simulated seconds for its prefill's KV, then
                                   recomputes (default 60)
  --responses-store-entries N      /v1/responses kept per worker for previous_response_id and
                                   GET /v1/responses/{id}, least recently used out (default
                                   4096; 0 = no store, as vLLM without
                                   VLLM_ENABLE_RESPONSES_API_STORE)
  --convert-quirk messages|responses
                                   tests only: convert that API's requests to chat differently
                                   from kvgate (a system message is prepended), so a gateway's
                                   precise-mode probe of that API fails while the others agree
  --fault-error-rate P             fraction of requests answered 500
  --fault-hang-rate P              fraction of requests never answered
  --fault-close-rate P             fraction of requests cut mid-stream
  --fault-drop-events-rate P       fraction of KV-event batches not sent live (kept for
                                   replay), as a PUB past its high-water mark drops them
  --crash-after N                  exit(3) on completion request N+1
  --slow-start S                   /health and requests answer 503 for S real seconds
  --log-level LEVEL                trace|debug|info|warn|error|off (default info)
  --help
  --version                        print the version and git commit
Per-request header x-sim-fault: error|hang|close-mid forces a fault.
Prints "port=P worker=I" per worker, "bootstrap port=P worker=I" per prefill/decode worker and
"kv_events worker=I rank=R endpoint=E replay=R" per engine on stdout, then "ready".
)";
}

absl::StatusOr<SimOptions> ParseSimCli(int argc, const char* const* argv) {
  SimOptions o;
  std::optional<uint64_t> gpu_blocks, cpu_blocks, max_seqs, max_batched, max_len;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    if (!flag.starts_with("--")) return absl::InvalidArgumentError("unexpected argument " + flag);
    flag = flag.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = flag.find('='); eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "help") {
      o.help = true;
      continue;
    }
    if (flag == "kv-events-bind") {
      o.kv_events_bind = true;
      continue;
    }
    if (flag == "kv-events-remote") {
      o.kv_events_remote = true;
      continue;
    }
    if (flag == "engine-ttft-usage") {
      o.engine_ttft_usage = true;
      continue;
    }
    static constexpr std::string_view kValueFlags[] = {"host",
                                                       "port",
                                                       "base-port",
                                                       "workers",
                                                       "dp-size",
                                                       "time-scale",
                                                       "model",
                                                       "profile",
                                                       "seed",
                                                       "default-max-tokens",
                                                       "num-gpu-blocks",
                                                       "num-cpu-blocks",
                                                       "max-num-seqs",
                                                       "max-num-batched-tokens",
                                                       "max-model-len",
                                                       "kv-events-endpoint",
                                                       "kv-events-replay-endpoint",
                                                       "kv-events-topic",
                                                       "kv-events-encoding",
                                                       "kv-events-buffer-steps",
                                                       "store",
                                                       "store-credentials",
                                                       "role",
                                                       "pd-protocol",
                                                       "bootstrap-port",
                                                       "pd-abort-timeout-s",
                                                       "pd-wait-timeout-s",
                                                       "responses-store-entries",
                                                       "convert-quirk",
                                                       "fault-error-rate",
                                                       "fault-hang-rate",
                                                       "fault-close-rate",
                                                       "fault-drop-events-rate",
                                                       "crash-after",
                                                       "slow-start",
                                                       "log-level"};
    if (std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) == std::end(kValueFlags)) {
      return absl::InvalidArgumentError("unknown flag --" + flag);
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Bad(flag, "missing value");
    }
    uint64_t u = 0;
    double d = 0;
    auto uint_of = [&](uint64_t max) -> absl::Status {
      if (!common::ParseUint64(value, &u) || u > max) return Bad(flag, "expected an integer");
      return absl::OkStatus();
    };
    auto double_of = [&](double lo, double hi) -> absl::Status {
      if (!common::ParseDouble(value, &d) || !(d >= lo && d <= hi)) {
        return Bad(flag, common::StrCat("expected a number in [", lo, ", ", hi, "]"));
      }
      return absl::OkStatus();
    };
#define SIM_UINT(max)                   \
  if (auto s = uint_of(max); !s.ok()) { \
    return s;                           \
  }
#define SIM_DOUBLE(lo, hi)                   \
  if (auto s = double_of(lo, hi); !s.ok()) { \
    return s;                                \
  }
    if (flag == "host") {
      o.host = value;
    } else if (flag == "port" || flag == "base-port") {
      SIM_UINT(65535);
      o.base_port = static_cast<uint16_t>(u);
    } else if (flag == "workers") {
      SIM_UINT(4096);
      if (u == 0) return Bad(flag, "must be >= 1");
      o.workers = static_cast<uint32_t>(u);
    } else if (flag == "dp-size") {
      SIM_UINT(1024);
      if (u == 0) return Bad(flag, "must be >= 1");
      o.dp_size = static_cast<uint32_t>(u);
    } else if (flag == "time-scale") {
      SIM_DOUBLE(1e-6, 1e6);
      o.time_scale = d;
    } else if (flag == "model") {
      o.model = value;
    } else if (flag == "profile") {
      o.profile_path = value;
    } else if (flag == "seed") {
      SIM_UINT(UINT64_MAX);
      o.seed = u;
    } else if (flag == "default-max-tokens") {
      SIM_UINT(1u << 24);
      if (u == 0) return Bad(flag, "must be >= 1");
      o.default_max_tokens = static_cast<uint32_t>(u);
    } else if (flag == "num-gpu-blocks") {
      SIM_UINT(1u << 30);
      gpu_blocks = u;
    } else if (flag == "num-cpu-blocks") {
      SIM_UINT(1u << 30);
      cpu_blocks = u;
    } else if (flag == "max-num-seqs") {
      SIM_UINT(1u << 20);
      max_seqs = u;
    } else if (flag == "max-num-batched-tokens") {
      SIM_UINT(1u << 30);
      max_batched = u;
    } else if (flag == "max-model-len") {
      SIM_UINT(1u << 30);
      max_len = u;
    } else if (flag == "kv-events-endpoint") {
      o.kv_events_endpoint = value;
    } else if (flag == "kv-events-replay-endpoint") {
      o.kv_events_replay_endpoint = value;
    } else if (flag == "kv-events-topic") {
      o.kv_events_topic = value;
    } else if (flag == "store") {
      o.store = value;
    } else if (flag == "store-credentials") {
      o.store_credentials = value;
    } else if (flag == "role") {
      auto r = ParsePdRole(value);
      if (!r.ok()) return Bad(flag, "expected prefill, decode or mixed");
      o.role = *r;
    } else if (flag == "pd-protocol") {
      auto p = ParsePdProtocol(value);
      if (!p.ok()) {
        return Bad(flag, "expected vllm-nixl, vllm-mooncake, vllm-p2p-nccl or sglang-bootstrap");
      }
      o.pd_protocol = *p;
    } else if (flag == "bootstrap-port") {
      SIM_UINT(65535);
      o.bootstrap_port = static_cast<uint16_t>(u);
    } else if (flag == "pd-abort-timeout-s") {
      SIM_DOUBLE(1e-6, 1e9);
      o.pd_abort_timeout_s = d;
    } else if (flag == "pd-wait-timeout-s") {
      SIM_DOUBLE(0, 1e9);
      o.pd_wait_timeout_s = d;
    } else if (flag == "responses-store-entries") {
      SIM_UINT(1u << 24);
      o.responses_store_entries = u;
    } else if (flag == "convert-quirk") {
      if (value == "messages") {
        o.convert_quirk = ConvertQuirk::kMessages;
      } else if (value == "responses") {
        o.convert_quirk = ConvertQuirk::kResponses;
      } else if (value == "none") {
        o.convert_quirk = ConvertQuirk::kNone;
      } else {
        return Bad(flag, "expected messages, responses or none");
      }
    } else if (flag == "kv-events-encoding") {
      if (value == "array") {
        o.kv_events_encoding = EventEncoding::kArray;
      } else if (value == "map") {
        o.kv_events_encoding = EventEncoding::kMap;
      } else {
        return Bad(flag, "expected array or map");
      }
    } else if (flag == "kv-events-buffer-steps") {
      SIM_UINT(1u << 24);
      if (u == 0) return Bad(flag, "must be >= 1");
      o.kv_events_buffer_steps = u;
    } else if (flag == "fault-error-rate") {
      SIM_DOUBLE(0, 1);
      o.faults.error_rate = d;
    } else if (flag == "fault-hang-rate") {
      SIM_DOUBLE(0, 1);
      o.faults.hang_rate = d;
    } else if (flag == "fault-close-rate") {
      SIM_DOUBLE(0, 1);
      o.faults.close_rate = d;
    } else if (flag == "fault-drop-events-rate") {
      SIM_DOUBLE(0, 1);
      o.faults.drop_events_rate = d;
    } else if (flag == "crash-after") {
      SIM_UINT(UINT64_MAX);
      o.faults.crash_after = u;
    } else if (flag == "slow-start") {
      SIM_DOUBLE(0, 86400);
      o.faults.slow_start_s = d;
    } else if (flag == "log-level") {
      if (!common::IsValidLogLevel(value)) return Bad(flag, "unknown level");
      o.log_level = value;
    } else {
      return absl::InvalidArgumentError("unknown flag --" + flag);
    }
#undef SIM_UINT
#undef SIM_DOUBLE
  }
  if (o.workers > 1 && o.base_port != 0 && o.base_port + uint64_t{o.workers} - 1 > 65535) {
    return Bad("workers", "ports run past 65535");
  }
  if (o.bootstrap_port != 0 && o.bootstrap_port + uint64_t{o.workers} - 1 > 65535) {
    return Bad("bootstrap-port", "ports run past 65535");
  }
  if (!o.kv_events_replay_endpoint.empty() && o.kv_events_endpoint.empty()) {
    return Bad("kv-events-replay-endpoint", "needs --kv-events-endpoint");
  }
  // A listener that hands out token ids stays on this host unless the operator says otherwise
  // (a connected PUB endpoint goes only where it was pointed).
  const bool pub_bound = o.kv_events_bind || kvevents::ShouldBind(o.kv_events_endpoint);
  for (const auto& [flag, ep, bound] :
       {std::tuple{"kv-events-endpoint", &o.kv_events_endpoint, pub_bound},
        std::tuple{"kv-events-replay-endpoint", &o.kv_events_replay_endpoint, true}}) {
    if (!ep->empty() && bound && !o.kv_events_remote && !kvevents::IsLoopbackEndpoint(*ep))
      return Bad(flag, common::StrCat(*ep,
                                      " is beyond loopback and its events carry token ids; "
                                      "add --kv-events-remote to publish there"));
  }
  if (!o.profile_path.empty()) {
    auto p = LoadProfileByNameOrPath(o.profile_path);
    if (!p.ok()) return p.status();
    o.profile = *p;
  }
  if (gpu_blocks) o.profile.SetNumGpuBlocks(static_cast<uint32_t>(*gpu_blocks));
  if (cpu_blocks) o.profile.num_cpu_blocks = static_cast<uint32_t>(*cpu_blocks);
  if (max_seqs) o.profile.max_num_seqs = static_cast<uint32_t>(*max_seqs);
  if (max_batched) o.profile.max_num_batched_tokens = static_cast<uint32_t>(*max_batched);
  if (max_len) o.profile.max_model_len = static_cast<uint32_t>(*max_len);
  if (auto s = o.profile.Validate(); !s.ok()) return s;
  return o;
}

}  // namespace kvgate::sim
