#include "bench/replay/cli.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "common/strings.h"

namespace kvgate::replay {
namespace {

using common::StrCat;

absl::Status Bad(std::string_view flag, std::string_view why) {
  return absl::InvalidArgumentError(StrCat("--", flag, ": ", why));
}

}  // namespace

std::string Usage() {
  return R"(usage: kvgate-replay --target URL --trace PATH [options]

Replays a Mooncake JSONL trace (open-loop) or agentic session JSON (a file or a directory of
*.json, closed-loop) against an OpenAI-compatible server (or through the agents' own APIs:
Anthropic Messages, OpenAI Responses) and reports TTFT/TPOT/E2E, throughput, cached tokens and
per-worker load (X-Kvgate-Worker).

  --target URL                 base URL of the gateway or worker (required)
  --trace PATH                 *.jsonl, *.json or a directory of *.json (required)
  --report FILE.json           write the JSON report there
  --records FILE.jsonl         write one JSON line per request (timings, tokens, worker, error)
  --conversations N            concurrent agentic conversations (default 16)
  --max-conversations N        conversations to run (default: each session file once)
  --loop                       keep drawing sessions until --duration/--max-requests
  --ramp-up SECONDS            spread the first conversations' starts (default 0)
  --max-think-time SECONDS     cap each think time (trace seconds, before --speedup;
                               default 300, 0 = no cap)
  --speedup X                  divide open-loop gaps and think times by X (default 1)
  --time-scale X               alias of --speedup
  --duration SECONDS           stop sending after this long (default: no limit)
  --max-requests N             stop sending after N requests (default: no limit)
  --share-prefix true|false    share tool/system prefix blocks across conversations (default true)
  --no-share-prefix            same as --share-prefix false
  --api chat|messages|responses
                               /v1/chat/completions (default), /v1/messages as Claude Code sends
                               it, /v1/responses as Codex CLI sends it; Mooncake traces also take
                               completions (their default)
  --thinking                   with --api messages: send thinking {"type":"enabled"}
  --responses-store            with --api responses: store: true, and each later turn sends only
                               its new items with previous_response_id
  --model NAME                 model field (default sim-model)
  --max-output-tokens N        cap on max_tokens; 0 = the trace's value (default 512)
  --fleet-capacity-tokens N    capacity of the pooled-LRU bound (default 0 = skip it)
  --no-bounds                  skip the trace bounds
  --floor-prefill-rate TOK/S   one worker's prefill rate in wall-clock tokens per second: the
                               TTFT floor is each request's compulsory tokens (no earlier
                               request sent them) / this. Against a simulator running faster
                               than real time, its rate divided by its --time-scale (kvgate-sim's
                               default 1/7e-5 = 14286 tokens per simulated s at --time-scale
                               0.05: 285714). Default 0 = no floor
  --floor-context-factor F     a prefilled token's extra cost per token of context before it,
                               as a share of its own (kvgate-sim: prefill_per_token_ctx_s /
                               prefill_per_token_s = 1.43e-5). The compulsory tokens end the
                               prompt and attend to all P tokens of it before them, cached or
                               not: c x (1 + F x (P - c + c / 2)) / rate. Default 0
  --floor-step-seconds S       an engine step's fixed cost in wall-clock seconds (kvgate-sim:
                               step_fixed_s x --time-scale): each request's floor adds one per
                               step its compulsory prefill needs at least. Default 0
  --floor-step-tokens N        the tokens one step prefills at most (vLLM's
                               max_num_batched_tokens, kvgate-sim's 8192): c tokens take
                               ceil(max(c, 1) / N) steps; 0 = one step. Default 0
  --request-timeout SECONDS    per-request timeout (default 600)
  --header NAME:VALUE          extra request header (repeatable)
  --connection-per-request     open a new connection for every request and close it after
                               (Connection: close), as a client without keep-alive; behind a
                               TCP balancer each turn of a session may reach another replica
  --request-sample FILE.jsonl  write a uniform sample of the requests sent, one JSON line each
                               ({"path", "headers", "body"}), e.g. to ask /admin/explain later
  --request-sample-size N      how many requests --request-sample keeps (default 50)
  --progress auto|on|off|lines live progress line on stderr (default auto: when a TTY);
                               lines: a line every 5 s (done, errors, cached share so far)
  --no-table                   do not print the human table on stdout
  --help
  --version                    print the version and git commit
)";
}

absl::StatusOr<CliOptions> ParseCommandLine(const std::vector<std::string>& args) {
  CliOptions cli;
  ReplayOptions& o = cli.replay;
  uint64_t sample_size = 50;
  uint64_t step_tokens = 0;
  auto u64 = [](uint64_t* out) {
    return [out](std::string_view flag, std::string_view v) -> absl::Status {
      if (!common::ParseUint64(v, out)) return Bad(flag, "expected a non-negative integer");
      return absl::OkStatus();
    };
  };
  auto dbl = [](double* out, bool positive) {
    return [out, positive](std::string_view flag, std::string_view v) -> absl::Status {
      if (!common::ParseDouble(v, out) || *out < 0 || (positive && *out == 0)) {
        return Bad(flag, positive ? "expected a positive number" : "expected a number >= 0");
      }
      return absl::OkStatus();
    };
  };
  auto str = [](std::string* out) {
    return [out](std::string_view flag, std::string_view v) -> absl::Status {
      *out = std::string(v);
      return absl::OkStatus();
    };
  };
  using Handler = std::function<absl::Status(std::string_view, std::string_view)>;
  std::map<std::string, Handler, std::less<>> with_value = {
      {"target", str(&o.target)},
      {"trace", str(&o.trace)},
      {"report", str(&cli.report_path)},
      {"records", str(&cli.records_path)},
      {"request-sample", str(&cli.request_sample_path)},
      {"request-sample-size", u64(&sample_size)},
      {"conversations", u64(&o.conversations)},
      {"max-conversations", u64(&o.max_conversations)},
      {"ramp-up", dbl(&o.ramp_up_s, false)},
      {"max-think-time", dbl(&o.max_think_time_s, false)},
      {"speedup", dbl(&o.speedup, true)},
      {"time-scale", dbl(&o.speedup, true)},
      {"duration", dbl(&o.duration_s, false)},
      {"max-requests", u64(&o.max_requests)},
      {"model", str(&o.body.model)},
      {"max-output-tokens", u64(&o.body.max_output_tokens)},
      {"fleet-capacity-tokens", u64(&o.fleet_capacity_tokens)},
      {"floor-prefill-rate", dbl(&o.floor_prefill_rate, false)},
      {"floor-context-factor", dbl(&o.floor_context_factor, false)},
      {"floor-step-seconds", dbl(&o.floor_step_s, false)},
      {"floor-step-tokens", u64(&step_tokens)},
      {"request-timeout", dbl(&o.request_timeout_s, true)},
      {"share-prefix",
       [&](std::string_view flag, std::string_view v) -> absl::Status {
         if (v == "true" || v == "on" || v == "1") {
           o.share_prefix = true;
         } else if (v == "false" || v == "off" || v == "0") {
           o.share_prefix = false;
         } else {
           return Bad(flag, "expected true or false");
         }
         return absl::OkStatus();
       }},
      {"api",
       [&](std::string_view flag, std::string_view v) -> absl::Status {
         if (!ParseApi(v, &o.api)) return Bad(flag, "expected chat, messages or responses");
         return absl::OkStatus();
       }},
      {"progress",
       [&](std::string_view flag, std::string_view v) -> absl::Status {
         if (v == "auto") {
           o.progress = -1;
         } else if (v == "on") {
           o.progress = 1;
         } else if (v == "off") {
           o.progress = 0;
         } else if (v == "lines") {
           o.progress = 2;
         } else {
           return Bad(flag, "expected auto, on, off or lines");
         }
         return absl::OkStatus();
       }},
      {"header",
       [&](std::string_view flag, std::string_view v) -> absl::Status {
         const size_t colon = v.find(':');
         if (colon == std::string_view::npos || colon == 0) return Bad(flag, "expected NAME:VALUE");
         std::string_view value = v.substr(colon + 1);
         while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
         o.headers.emplace_back(std::string(v.substr(0, colon)), std::string(value));
         return absl::OkStatus();
       }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg.substr(0, 2) != "--") return absl::InvalidArgumentError(StrCat("unexpected ", arg));
    arg.remove_prefix(2);
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (name == "help") {
      cli.help = true;
      return cli;
    }
    if (!value) {
      if (name == "loop") {
        o.loop = true;
        continue;
      }
      if (name == "no-share-prefix") {
        o.share_prefix = false;
        continue;
      }
      if (name == "no-bounds") {
        o.compute_bounds = false;
        continue;
      }
      if (name == "no-table") {
        cli.table = false;
        continue;
      }
      if (name == "thinking") {
        o.body.thinking = true;
        continue;
      }
      if (name == "connection-per-request") {
        o.connection_per_request = true;
        continue;
      }
      if (name == "responses-store") {
        o.body.responses_store = true;
        continue;
      }
    }
    auto it = with_value.find(name);
    if (it == with_value.end()) return absl::InvalidArgumentError(StrCat("unknown flag --", name));
    if (!value) {
      if (i + 1 >= args.size()) return Bad(name, "missing value");
      value = args[++i];
    }
    auto status = it->second(name, *value);
    if (!status.ok()) return status;
  }
  if (!cli.request_sample_path.empty()) {
    if (sample_size == 0) return Bad("request-sample-size", "expected a positive integer");
    o.request_sample_size = sample_size;
  }
  if (step_tokens > UINT32_MAX) return Bad("floor-step-tokens", "expected at most 4294967295");
  o.floor_step_tokens = static_cast<uint32_t>(step_tokens);
  if (o.target.empty()) return Bad("target", "required");
  if (o.trace.empty()) return Bad("trace", "required");
  if (o.body.thinking && o.api != Api::kMessages) return Bad("thinking", "needs --api messages");
  if (o.body.responses_store && o.api != Api::kResponses) {
    return Bad("responses-store", "needs --api responses");
  }
  return cli;
}

}  // namespace kvgate::replay
