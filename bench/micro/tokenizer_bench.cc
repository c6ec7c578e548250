// kvgate-tokenizer-bench: the figures issue 16 asks for (docs/benchmarks.md, "Tokenizer").
//
//   kvgate-tokenizer-bench throughput DIR CORPUS.jsonl [REPS]
//       Encode (no special tokens) of every {"text"} line, one thread, best of REPS passes:
//       MB/s and tokens/s. The `tokenizers` side: tests/tokenizer/reference.mjs bench.
//   kvgate-tokenizer-bench session DIR [TURNS]
//       An agentic session in the shape of ../shared/data/agentic (tool definitions and a
//       system prompt of trace_0277's sizes, then per turn an assistant tool call and a tool
//       result, to 100K+ tokens): per-turn cost of the gateway's incremental chat tokenisation
//       against a full render + tokenisation.
//   kvgate-tokenizer-bench render DIR [TURNS] [TIMED]
//       The chat template alone over the same session's last TIMED turns (of TURNS; 200 turns
//       are ~1 MB): p50 of a render that replays the iterations earlier turns rendered, and of
//       one that renders them all (jinja_memo.h). The two renders must be equal.
//   kvgate-tokenizer-bench router DIR [ITERATIONS] [BYTES] [turn,same,cold]
//       Router overhead in precise mode for a chat request of ~BYTES (default 400,000; an
//       agent's 287K-token context is ~1,000,000): ParseRequest + Plan (chat template +
//       tokenizer + token chains) + an uncommitted Decide, p50/p99, for a session turn (the
//       last ITERATIONS turns of a session that reaches ~BYTES, each on the history the
//       previous turn cached), the same body again, and a cold body of that size (no
//       cached prefix). The last argument picks the cases (all three by default; one alone
//       is what a profile of it needs). Each case also gives its page faults a request;
//       KVGATE_BENCH_EACH=1 prints every session turn's time.
#include <simdjson.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/build_info.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "prometheus/registry.h"
#include "router/precise/precise_mode.h"
#include "router/routing/route_planner.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvgate::tokenizer::HfTokenizer;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::shared_ptr<const HfTokenizer> Load(const std::string& dir) {
  kvgate::tokenizer::HfTokenizerFiles f;
  f.dir = dir;
  auto t = HfTokenizer::Load(f);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
    std::exit(2);
  }
  return *t;
}

// The inside of a JSON string literal (the callers write the quotes).
std::string JsonEscape(const std::string& s) {
  std::string quoted;
  kvgate::common::AppendJsonString(quoted, s);
  return quoted.substr(1, quoted.size() - 2);
}

// English-like prose and code, deterministic: ~`tokens` tokens (about 4.3 bytes a token).
std::string Prose(std::mt19937_64& rng, size_t tokens) {
  static const char* kWords[] = {
      "the",      "function", "returns", "a",      "value",  "when",   "called",  "with",
      "an",       "argument", "file",    "module", "class",  "error",  "handler", "request",
      "response", "buffer",   "index",   "test",   "passes", "fails",  "because", "config",
      "loader",   "reads",    "yaml",    "and",    "json",   "worker", "router",  "cache",
      "block",    "token",    "prefix",  "hash",   "event",  "stream", "of"};
  static const char* kCode[] = {"  if (x == nullptr) return absl::InvalidArgumentError(\"x\");\n",
                                "for (size_t i = 0; i < n; ++i) sum += v[i];\n",
                                "def handle(req):\n    return {\"ok\": True, \"n\": len(req)}\n",
                                "$ grep -rn \"TODO\" src/ | wc -l\n42\n"};
  std::string s;
  const size_t bytes = tokens * 43 / 10;
  while (s.size() < bytes) {
    if (rng() % 12 == 0) {
      s += kCode[rng() % 4];
    } else {
      s += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
      s += rng() % 9 == 0 ? ". " : " ";
    }
  }
  return s;
}

int Throughput(const std::string& dir, const std::string& corpus, int reps) {
  auto tok = Load(dir);
  std::vector<std::string> texts;
  std::ifstream in(corpus);
  simdjson::dom::parser parser;
  for (std::string line; std::getline(in, line);) {
    std::string_view text;
    if (!line.empty() && parser.parse(line)["text"].get(text) == simdjson::SUCCESS) {
      texts.emplace_back(text);
    }
  }
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  std::vector<uint32_t> ids;
  double best = 1e9;
  size_t tokens = 0;
  for (int r = 0; r < reps; ++r) {
    tokens = 0;
    const auto t0 = Clock::now();
    for (const auto& t : texts) {
      (void)tok->Encode(t, false, &ids);
      tokens += ids.size();
    }
    best = std::min(best, Since(t0));
  }
  std::printf(
      "{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, "
      "\"tokens_per_s\": %.0f}\n",
      bytes, tokens, best, bytes / best / 1e6, tokens / best);
  return 0;
}

// The session's messages after `turns` turns (JSON array elements, comma-separated).
struct Session {
  std::string tools;     // the "tools" array
  std::string messages;  // messages so far
  std::mt19937_64 rng{277};
  explicit Session() {
    // trace_0277: tool_tokens 12166, system_tokens 2875.
    tools = "[";
    for (int i = 0; i < 24; ++i) {
      if (i > 0) tools += ",";
      tools += kvgate::common::StrCat(
          R"({"type":"function","function":{"name":"tool_)", i, R"(","description":")",
          JsonEscape(Prose(rng, 450)),
          R"(","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}})");
    }
    tools += "]";
    messages = R"({"role":"system","content":")" + JsonEscape(Prose(rng, 2875)) +
               R"("},{"role":"user","content":"Fix the failing test in the router."})";
  }
  void Turn(int i) {
    messages += kvgate::common::StrCat(
        R"(,{"role":"assistant","content":")", JsonEscape(Prose(rng, 120)),
        R"(","tool_calls":[{"id":"call_)", i,
        R"(","type":"function","function":{"name":"tool_3","arguments":"{\"path\": \"src/f)", i,
        R"(.cc\"}"}}]},{"role":"tool","tool_call_id":"call_)", i, R"(","content":")",
        JsonEscape(Prose(rng, 830)), R"("})");
  }
  std::string Body() const {
    return R"({"model":"m","messages":[)" + messages + R"(],"tools":)" + tools + "}";
  }
};

// The chat template alone on a session's last turns: a render that replays the iterations
// the previous turn rendered, and one that renders every iteration, per turn.
int RenderBench(const std::string& dir, int turns, int timed) {
  auto tok = Load(dir);
  Session s;
  std::vector<double> reuse_ms, full_ms;
  std::string rendered, full;
  bool add_special = false;
  for (int i = 0; i < turns; ++i) {
    s.Turn(i);
    if (i < turns - timed) continue;
    const std::string body = s.Body();
    if (i == turns - timed && !tok->RenderChat(body, &rendered, &add_special, true).ok()) return 1;
    auto t0 = Clock::now();
    if (!tok->RenderChat(body, &rendered, &add_special, true).ok()) return 1;
    reuse_ms.push_back(Since(t0) * 1e3);
    t0 = Clock::now();
    if (!tok->RenderChat(body, &full, &add_special, false).ok()) return 1;
    full_ms.push_back(Since(t0) * 1e3);
    if (rendered != full) {
      std::fprintf(stderr, "turn %d: the render with replayed iterations differs\n", i);
      return 1;
    }
  }
  std::sort(reuse_ms.begin(), reuse_ms.end());
  std::sort(full_ms.begin(), full_ms.end());
  // What the two caches hold after one session (as they count it against their bounds).
  const auto messages = tok->chat_template()->message_stats();
  const auto replay = tok->chat_template()->reuse_stats();
  std::printf(
      "{\"turns\": %d, \"body_bytes\": %zu, \"render_bytes\": %zu, "
      "\"replaying_p50_ms\": %.3f, \"rendering_all_p50_ms\": %.3f, "
      "\"message_cache_bytes\": %zu, \"replay_store_bytes\": %zu}\n",
      turns, s.Body().size(), rendered.size(), reuse_ms[reuse_ms.size() / 2],
      full_ms[full_ms.size() / 2], messages.bytes, replay.bytes);
  return 0;
}

int SessionBench(const std::string& dir, int turns) {
  auto tok = Load(dir);
  Session s;
  std::vector<uint32_t> ids, full;
  double inc_total = 0, full_total = 0;
  std::vector<double> inc_last, full_last, render_last, render_full_last;
  size_t last_tokens = 0, last_bytes = 0;
  std::string rendered, rendered_full;
  for (int i = 0; i < turns; ++i) {
    s.Turn(i);
    const std::string body = s.Body();
    // The template alone, replaying the iterations of earlier turns and rendering every one.
    bool add_special = false;
    auto t0 = Clock::now();
    if (!tok->RenderChat(body, &rendered, &add_special, true).ok()) return 1;
    const double render = Since(t0);
    t0 = Clock::now();
    if (!tok->RenderChat(body, &rendered_full, &add_special, false).ok()) return 1;
    const double render_full = Since(t0);
    if (rendered != rendered_full) {
      std::fprintf(stderr, "turn %d: the render with replayed iterations differs\n", i);
      return 1;
    }
    t0 = Clock::now();
    if (!tok->TokenizeChat(body, &ids).ok()) return 1;
    const double inc = Since(t0);
    t0 = Clock::now();
    if (!tok->TokenizeChatFull(body, &full).ok()) return 1;
    const double f = Since(t0);
    if (ids != full) {
      std::fprintf(stderr, "turn %d: incremental ids differ from full\n", i);
      return 1;
    }
    inc_total += inc;
    full_total += f;
    if (i >= turns - 10) {
      inc_last.push_back(inc);
      full_last.push_back(f);
      render_last.push_back(render);
      render_full_last.push_back(render_full);
    }
    last_tokens = ids.size();
    last_bytes = body.size();
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto st = tok->cache_stats();
  std::printf(
      "{\"turns\": %d, \"final_tokens\": %zu, \"final_body_bytes\": %zu, "
      "\"incremental_ms_per_turn\": %.3f, \"full_ms_per_turn\": %.3f, "
      "\"incremental_ms_last10_p50\": %.3f, \"full_ms_last10_p50\": %.3f, "
      "\"render_ms_last10_p50\": %.3f, \"render_full_ms_last10_p50\": %.3f, "
      "\"cache_hits\": %llu, \"reused_bytes\": %llu, \"encoded_bytes\": %llu}\n",
      turns, last_tokens, last_bytes, inc_total / turns * 1e3, full_total / turns * 1e3,
      median(inc_last) * 1e3, median(full_last) * 1e3, median(render_last) * 1e3,
      median(render_full_last) * 1e3, static_cast<unsigned long long>(st.hits),
      static_cast<unsigned long long>(st.reused_bytes),
      static_cast<unsigned long long>(st.encoded_bytes));
  return 0;
}

int RouterBench(const std::string& dir, int iterations, size_t target, std::string_view cases) {
  auto wanted = [&](std::string_view c) { return cases.find(c) != std::string_view::npos; };
  using namespace kvgate;
  auto made = tokenizer::MakeTokenizer(dir);
  if (!made.ok()) return 2;
  config::RoutingConfig config;
  config.precise.tokenizer = dir;
  prometheus::Registry registry;
  router::PreciseMode precise(registry, config);
  config::WorkerConfig c;
  c.url = *common::ParseHttpUrl("http://w0:8000");
  c.kv_events = config::KvEventsConfig{};
  c.kv_events->endpoint = "tcp://127.0.0.1:1";
  router::WorkerList workers;
  for (uint32_t i = 0; i < 4; ++i) {
    c.url = *common::ParseHttpUrl(common::StrCat("http://w", i, ":8000"));
    workers.push_back(std::make_shared<router::Worker>(c, i));
    workers.back()->set_precise_state(router::PreciseState::kVerified);
  }
  precise.Configure(workers, {});
  router::RoutePlanner planner(config, &precise);
  std::vector<router::WorkerIdentity> ids;
  for (const auto& w : workers) ids.push_back(w->identity());
  auto policies = *router::MakePolicySet(config, ids);

  // The session grows turn by turn (each turn on the history the previous one cached, as a
  // live agentic session does); it starts where `iterations` more turns end at ~`target` bytes.
  Session s;
  int turn = 0;
  s.Turn(turn++);
  const size_t turn_bytes = s.Body().size();
  s.Turn(turn++);
  const size_t per_turn = s.Body().size() - turn_bytes;
  const size_t start = target > per_turn * iterations ? target - per_turn * iterations : 0;
  while (s.Body().size() < start) s.Turn(turn++);
  // Page faults are counted too: on a paravirtualised VM each costs ~10 µs, and a turn whose
  // buffers land on fresh heap pages pays a few hundred of them.
  auto minor_faults = [] {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
  };
  long faults = 0;
  auto plan_once = [&](const std::string& body) {
    const long faults_before = minor_faults();
    const auto t0 = Clock::now();
    router::ParsedRequest parsed;
    if (!router::ParseRequest(body, body.size(), router::ApiEndpoint::kChatCompletions, true, "",
                              &parsed)
             .ok()) {
      std::exit(1);
    }
    auto plan = planner.Plan(parsed, "/v1/chat/completions", workers, *policies, config,
                             router::SteadyClock::now());
    if (!plan.ok() || plan->tokens.empty()) std::exit(1);
    auto d = planner.Decide(*plan, 0, false, router::SteadyClock::now());
    (void)d;
    const double ms = Since(t0) * 1e3;
    faults += minor_faults() - faults_before;
    return ms;
  };
  auto report = [&](const char* name, std::vector<double> v, size_t bytes) {
    std::sort(v.begin(), v.end());
    std::printf(
        "{\"case\": \"%s\", \"body_bytes\": %zu, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"page_faults_per_request\": %.1f}\n",
        name, bytes, v[v.size() / 2], v[v.size() * 99 / 100],
        static_cast<double>(faults) / static_cast<double>(v.size()));
  };
  std::vector<double> turn_ms, same_ms, cold_ms;
  plan_once(s.Body());  // the session's history is cached
  faults = 0;
  const size_t first_bytes = s.Body().size();
  for (int i = 0; i < iterations; ++i) {
    s.Turn(turn++);
    turn_ms.push_back(plan_once(s.Body()));
    if (std::getenv("KVGATE_BENCH_EACH") != nullptr) {
      std::fprintf(stderr, "turn %d: %.3f ms\n", i, turn_ms.back());
    }
  }
  const std::string body = s.Body();
  std::printf("{\"session_turns_bytes\": [%zu, %zu]}\n", first_bytes, body.size());
  if (wanted("turn")) report("session turn (+1 turn on the cached history)", turn_ms, body.size());
  faults = 0;
  if (wanted("same")) {
    for (int i = 0; i < iterations; ++i) same_ms.push_back(plan_once(body));
    report("same body again", same_ms, body.size());
  }
  faults = 0;
  if (wanted("cold")) {
    for (int i = 0; i < std::max(3, iterations / 4); ++i) {
      // A nonce at the start of the system prompt: nothing cached shares a prefix.
      std::string cold = body;
      cold.insert(cold.find("\"content\":\"") + 11, common::StrCat("nonce ", i, " "));
      cold_ms.push_back(plan_once(cold));
    }
    report("cold (no cached prefix)", cold_ms, body.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-tokenizer-bench")) return 0;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "throughput" && argc >= 4) {
    return Throughput(argv[2], argv[3], argc > 4 ? std::atoi(argv[4]) : 3);
  }
  if (mode == "render" && argc >= 3) {
    return RenderBench(argv[2], argc > 3 ? std::atoi(argv[3]) : 200,
                       argc > 4 ? std::max(1, std::atoi(argv[4])) : 20);
  }
  if (mode == "session" && argc >= 3)
    return SessionBench(argv[2], argc > 3 ? std::atoi(argv[3]) : 100);
  if (mode == "router" && argc >= 3)
    return RouterBench(argv[2], argc > 3 ? std::atoi(argv[3]) : 40,
                       argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 400'000,
                       argc > 5 ? argv[5] : "turn,same,cold");
  std::fprintf(stderr,
               "usage: kvgate-tokenizer-bench throughput DIR CORPUS.jsonl [REPS] | session DIR "
               "[TURNS] | render DIR [TURNS] [TIMED] | router DIR [ITERATIONS] [BYTES] [CASES]\n");
  return 2;
}
