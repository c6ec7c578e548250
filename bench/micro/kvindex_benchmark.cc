// kvindex micro benchmarks (issue 3). Shapes follow the Claude Code traces in
// shared/data/agentic/: a ~15K-token shared prefix (tool definitions + system prompt, ~940 token
// blocks of 16), then per-conversation history growing by a few thousand tokens a turn.
// Expensive cases shrink unless KVGATE_BENCH_FULL=1. Results: docs/benchmarks.md.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/build_info.h"
#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_index.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::kvindex {
namespace {

bool FullRun() {
  const char* v = std::getenv("KVGATE_BENCH_FULL");
  return v != nullptr && std::string(v) == "1";
}

constexpr size_t kSharedPrefixBlocks = 940;  // (12166 tool + 2875 system tokens) / 16.

// Chained hashes: blocks [0, kSharedPrefixBlocks) are common to all conversations.
std::vector<BlockHash> Conversation(uint64_t id, size_t blocks) {
  std::vector<BlockHash> c(blocks);
  uint64_t h = 0x5eed;
  for (size_t i = 0; i < blocks; ++i) {
    const uint64_t v = i < kSharedPrefixBlocks ? 0 : id + 1;
    h = (h ^ (v + i)) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
    c[i] = h;
  }
  return c;
}

// Match a `blocks`-block prompt (conversation 0's latest turn) against `holders` holders:
// holder 0 has the previous turn (all but the last 256 blocks), a quarter of the holders have
// the conversation up to some earlier turn, and the rest hold the shared prefix plus their own
// conversations.
void BM_Match(benchmark::State& state) {
  const size_t blocks = static_cast<size_t>(state.range(0));
  const int holders = static_cast<int>(state.range(1));
  PrefixIndex index;
  const std::vector<BlockHash> prompt = Conversation(0, blocks);
  for (int h = 0; h < holders; ++h) {
    const Holder holder{static_cast<uint32_t>(h), 0};
    size_t held;
    if (h == 0) {
      held = blocks > 256 ? blocks - 256 : blocks / 2;
    } else if (h % 4 == 1) {
      held = blocks * static_cast<size_t>(h) / static_cast<size_t>(holders + 1);
    } else {
      held = std::min(blocks, kSharedPrefixBlocks);
      const auto own = Conversation(1000 + h, std::min<size_t>(blocks, 2048));
      (void)index.Insert(holder, own, Tier::kGpu);
    }
    (void)index.Insert(holder, absl::MakeSpan(prompt).first(held), Tier::kGpu);
    if (h % 3 == 0) {  // Some holders also keep an offloaded host copy.
      (void)index.Insert(holder, absl::MakeSpan(prompt).first(held / 2), Tier::kHost);
    }
  }
  std::vector<MatchResult> out;
  for (auto _ : state) {
    index.Match(prompt, {}, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["matched_blocks_h0"] = out.empty() ? 0 : out[0].blocks[0];
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Match)->ArgNames({"blocks", "holders"})->ArgsProduct({{512, 2048, 8192}, {1, 8, 64}});

// Worst case for the divide and conquer: every holder stops at a different depth.
void BM_Match_DistinctDepths(benchmark::State& state) {
  const size_t blocks = static_cast<size_t>(state.range(0));
  const int holders = static_cast<int>(state.range(1));
  PrefixIndex index;
  const std::vector<BlockHash> prompt = Conversation(0, blocks);
  for (int h = 0; h < holders; ++h) {
    const size_t held = blocks * static_cast<size_t>(h + 1) / static_cast<size_t>(holders + 1);
    (void)index.Insert(Holder{static_cast<uint32_t>(h), 0}, absl::MakeSpan(prompt).first(held),
                       Tier::kGpu);
  }
  std::vector<MatchResult> out;
  for (auto _ : state) {
    index.Match(prompt, {}, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Match_DistinctDepths)->ArgNames({"blocks", "holders"})->Args({8192, 64});

// Match of a holder with holes (after middle removals): the linear fallback.
void BM_Match_Linear(benchmark::State& state) {
  const size_t blocks = static_cast<size_t>(state.range(0));
  PrefixIndex index;
  const std::vector<BlockHash> prompt = Conversation(0, blocks);
  (void)index.Insert(Holder{0, 0}, prompt, Tier::kGpu);
  (void)index.Remove(Holder{0, 0}, {prompt[blocks - 2]}, Tier::kGpu);
  std::vector<MatchResult> out;
  for (auto _ : state) {
    index.Match(prompt, {}, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(blocks));
}
BENCHMARK(BM_Match_Linear)->ArgNames({"blocks"})->Arg(8192);

// Route-time inserts of new turns (128-block chains, one holder out of 16) with LRU eviction
// at capacity. items/s = blocks/s.
void BM_Insert(benchmark::State& state) {
  PrefixIndexOptions options;
  options.default_capacity_blocks = 16384;
  PrefixIndex index(options);
  constexpr size_t kChain = 128;
  constexpr size_t kPool = 4096;
  std::vector<std::vector<BlockHash>> pool;
  for (size_t i = 0; i < kPool; ++i) {
    std::vector<BlockHash> c(kChain);
    for (size_t j = 0; j < kChain; ++j) {
      c[j] = (i * kChain + j + 1) * 0x9E3779B97F4A7C15ULL;
    }
    pool.push_back(std::move(c));
  }
  size_t i = 0;
  for (auto _ : state) {
    (void)index.Insert(Holder{static_cast<uint32_t>(i % 16), 0}, pool[i % kPool], Tier::kGpu);
    ++i;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChain));
}
BENCHMARK(BM_Insert);

// Event-style removal: BlockRemoved events of 16 blocks, tail first. items/s = blocks/s.
void BM_Remove(benchmark::State& state) {
  PrefixIndex index;
  constexpr size_t kChain = 2048;
  constexpr size_t kEvent = 16;
  uint64_t round = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto chain = Conversation(round++, kChain);
    (void)index.Insert(Holder{1, 0}, chain, Tier::kGpu);
    (void)index.Insert(Holder{2, 0}, chain, Tier::kGpu);  // Shared blocks stay indexed.
    state.ResumeTiming();
    for (size_t end = kChain; end >= kEvent; end -= kEvent) {
      std::vector<BlockHash> event(chain.begin() + static_cast<ptrdiff_t>(end - kEvent),
                                   chain.begin() + static_cast<ptrdiff_t>(end));
      benchmark::DoNotOptimize(index.Remove(Holder{1, 0}, event, Tier::kGpu));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChain));
}
BENCHMARK(BM_Remove);

// Memory per indexed block when every block is held by `holders` holders.
void BM_Memory(benchmark::State& state) {
  const int holders = static_cast<int>(state.range(0));
  const size_t blocks = FullRun() ? (size_t{1} << 20) : (size_t{1} << 16);
  double per_block = 0;
  for (auto _ : state) {
    PrefixIndexOptions options;
    options.default_capacity_blocks = blocks;
    PrefixIndex index(options);
    constexpr size_t kChain = 1024;
    for (size_t c = 0; c < blocks / kChain; ++c) {
      const auto chain = Conversation(c, kChain + kSharedPrefixBlocks);
      const auto own = absl::MakeSpan(chain).subspan(kSharedPrefixBlocks);
      for (int h = 0; h < holders; ++h) {
        (void)index.InsertAfter(Holder{static_cast<uint32_t>(h), 0}, std::nullopt, own, Tier::kGpu);
      }
    }
    const IndexStats stats = index.Stats();
    per_block =
        static_cast<double>(stats.memory_bytes) / static_cast<double>(stats.distinct_blocks);
    state.counters["distinct_blocks"] = static_cast<double>(stats.distinct_blocks);
  }
  state.counters["bytes_per_block"] = per_block;
  state.counters["bytes_per_residency"] = per_block / holders;
}
BENCHMARK(BM_Memory)
    ->ArgNames({"holders"})
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// A ~1 MiB agentic chat body: tool schemas, system prompt, then turns of user text, assistant
// tool calls and tool results. `escape_heavy`: tool results are compiler-style lines with ~6
// escapes each (worst case for string decoding); otherwise source listings (one `\n` per line,
// occasional quotes), the common case in coding-agent traffic.
std::string AgenticBody(size_t target_bytes, bool escape_heavy) {
  std::string body = R"({"model":"claude-sonnet","stream":true,"max_tokens":4096,"tools":[)";
  for (int t = 0; t < 24; ++t) {
    absl::StrAppend(&body, t ? "," : "", R"({"type":"function","function":{"name":"tool_)", t,
                    R"(","description":"Runs a command in the sandbox and returns its output. )",
                    R"(Use it for builds, tests and file edits.","parameters":{"type":"object",)",
                    R"("properties":{"command":{"type":"string","description":"shell command"},)",
                    R"("timeout":{"type":"integer","minimum":1,"maximum":600}},)",
                    R"("required":["command"]}}})");
  }
  body += R"(],"messages":[{"role":"system","content":"You are Claude Code, an agent. )";
  body += std::string(8000, 's') + R"("})";
  int turn = 0;
  while (body.size() < target_bytes) {
    absl::StrAppend(
        &body, R"(,{"role":"user","content":[{"type":"text","text":"Turn )", turn,
        R"(: please fix the failing test in src/caf\u00e9.cc \u2014 thanks.\n"}]})",
        R"(,{"role":"assistant","content":null,"tool_calls":[{"id":"call_)", turn,
        R"(","type":"function","function":{"name":"tool_3","arguments":"{\"command\": )",
        R"(\"make test -j8\"}"}}]})", R"(,{"role":"tool","tool_call_id":"call_)", turn,
        R"(","content":")");
    for (int line = 0; line < 60; ++line) {
      if (escape_heavy) {
        absl::StrAppend(&body, "test_", line, ".cc:", line * 7,
                        ": expected \\\"ok\\\" but got \\\"fail\\\"\\tat frame ", line, "\\n");
      } else if (line % 10 == 0) {
        absl::StrAppend(&body, "  LOG(INFO) << \\\"processing block \\\" << block_index_", line,
                        ";\\n");
      } else {
        absl::StrAppend(&body, "  const uint64_t seed_", line,
                        " = ChainSeed(parent_hash, block.tokens(), options.block_size);\\n");
      }
    }
    body += R"("})";
    ++turn;
  }
  body += "]}";
  return body;
}

// Canonicalise + hash. Arg 0: typical source listings; 1: escape-heavy tool output.
// Arg 1 of the pair: 1 = the body has simdjson padding (CanonicalizePadded, no copy).
void BM_CanonicalizeAndHash(benchmark::State& state) {
  std::string body = AgenticBody(size_t{1} << 20, state.range(0) == 1);
  const size_t size = body.size();
  body.reserve(size + Canonicalizer::kPaddingBytes);
  const bool padded = state.range(1) == 1;
  Canonicalizer canonicalizer;
  CanonicalRequest req;
  std::vector<BlockHash> chain;
  const uint64_t ns = NamespaceSeed({"claude-sonnet", "", ""});
  for (auto _ : state) {
    const absl::Status st = padded
                                ? canonicalizer.CanonicalizePadded(body, body.capacity(),
                                                                   ApiKind::kChatCompletions, &req)
                                : canonicalizer.Canonicalize(body, ApiKind::kChatCompletions, &req);
    if (!st.ok()) {
      state.SkipWithError("canonicalize failed");
      break;
    }
    HashPrompt(req.prompts[0], ns, HashOptions{}, &chain);
    benchmark::DoNotOptimize(chain.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(size));
  state.counters["blocks"] = static_cast<double>(chain.size());
}
BENCHMARK(BM_CanonicalizeAndHash)
    ->ArgNames({"escape_heavy", "padded"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_CanonicalizeOnly(benchmark::State& state) {
  const std::string body = AgenticBody(size_t{1} << 20, state.range(0) == 1);
  Canonicalizer canonicalizer;
  CanonicalRequest req;
  for (auto _ : state) {
    benchmark::DoNotOptimize(canonicalizer.Canonicalize(body, ApiKind::kChatCompletions, &req));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}
BENCHMARK(BM_CanonicalizeOnly)
    ->ArgNames({"escape_heavy"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond);

// A follow-up turn through the prefix-reuse cache: a ~400 KB body whose messages but the last
// are an earlier turn's (the cache holds the body itself after the first parse), with 24 tools
// before the conversation or after it (the OpenAI SDKs' order). Chat, or the same turn as a
// Responses body (`input` items, tools after them as Codex sends them).
std::string ResponsesBody(size_t target_bytes, bool tools_after) {
  std::string tools = R"("tools":[)";
  for (int t = 0; t < 24; ++t) {
    absl::StrAppend(&tools, t ? "," : "", R"({"type":"function","name":"tool_)", t,
                    R"(","description":"Runs a command in the sandbox and returns its output. )",
                    R"(Use it for builds, tests and file edits.","parameters":{"type":"object",)",
                    R"("properties":{"command":{"type":"string","description":"shell command"}},)",
                    R"("required":["command"]}})");
  }
  tools += "]";
  std::string body = R"({"model":"gpt-5-codex","instructions":"You are Codex. )";
  body += std::string(8000, 's') + R"(",)";
  if (!tools_after) body += tools + ",";
  body += R"("input":[)";
  for (int turn = 0; body.size() < target_bytes; ++turn) {
    absl::StrAppend(&body, turn ? "," : "", R"({"role":"user","content":"Turn )", turn,
                    R"(: fix the failing test"},{"type":"function_call","call_id":"call_)", turn,
                    R"(","name":"tool_3","arguments":"{\"command\": \"make test\"}"})",
                    R"(,{"type":"function_call_output","call_id":"call_)", turn, R"(","output":")");
    for (int line = 0; line < 60; ++line) {
      absl::StrAppend(&body, "  const uint64_t seed_", line,
                      " = ChainSeed(parent_hash, block.tokens(), options.block_size);\\n");
    }
    body += R"("})";
  }
  body += "]";
  if (tools_after) body += "," + tools;
  return body + R"(,"stream":true})";
}

std::string ChatBody(size_t target_bytes, bool tools_after) {
  std::string body = AgenticBody(target_bytes, false);
  if (!tools_after) return body;
  const size_t begin = body.find(R"("tools":[)");
  const size_t end = body.find(R"(,"messages":[)");
  const std::string tools = body.substr(begin, end - begin);
  body.erase(begin, end - begin + 1);  // and its comma
  body.insert(body.size() - 1, "," + tools);
  return body;
}

void BM_NextTurn(benchmark::State& state) {
  const bool responses = state.range(0) == 1;
  const bool tools_after = state.range(1) == 1;
  const ApiKind api = responses ? ApiKind::kResponses : ApiKind::kChatCompletions;
  const std::string body =
      responses ? ResponsesBody(400000, tools_after) : ChatBody(400000, tools_after);
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer canonicalizer(CanonicalizeOptions{.reuse = &cache});
  CanonicalRequest req;
  std::vector<BlockHash> chain;
  const uint64_t ns = NamespaceSeed({"m", "", ""});
  for (auto _ : state) {
    const absl::Status st = canonicalizer.Parse(body, 0, api, true, &req);
    if (!st.ok() || req.prompts.empty()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
    HashPrompt(req.prompts[0], ns, HashOptions{}, &chain);
    benchmark::DoNotOptimize(chain.data());
  }
  const PrefixReuseCache::Stats stats = cache.stats();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
  state.counters["reused"] =
      static_cast<double>(stats.hits) / static_cast<double>(state.iterations());
  state.counters["late_tools"] =
      static_cast<double>(stats.late_tools) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_NextTurn)
    ->ArgNames({"responses", "tools_after"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_HashTokens(benchmark::State& state) {
  std::vector<uint32_t> tokens(131072);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<uint32_t>(i * 2654435761u) % 152000;
  }
  std::vector<BlockHash> out;
  for (auto _ : state) {
    out.clear();
    HashTokenBlocks(tokens, 1, 16, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(tokens.size() * 4));
}
BENCHMARK(BM_HashTokens)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvgate::kvindex

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvindex_bench")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
