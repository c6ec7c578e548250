// Hybrid models in the simulated engine (issue 32): one KV-cache group per layer kind, each with
// its own pool and LRU, a prefix reusable only where every group serves it (sim/kv_groups.h).
// Every test also rebuilds each group's cached set from the engine's own KV events, as the
// router does, and checks that the hit rule applied to it predicts cached_tokens exactly.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/builtin_profiles.h"
#include "sim/engine.h"
#include "sim/kv_groups.h"
#include "sim/tokens.h"
#include "tests/sim/sim_test_util.h"

namespace kvgate::sim {
namespace {

constexpr uint32_t kB = 16;

// Full attention (64 blocks) beside `other`; 64-token chunks; simple timings.
Profile SmallHybrid(KvGroupSpec other, uint32_t full_blocks = 64, uint32_t batch = 64) {
  Profile p;
  p.num_gpu_blocks = full_blocks;
  p.max_num_seqs = 4;
  p.max_num_batched_tokens = batch;
  p.step_fixed_s = 0.01;
  p.prefill_per_token_s = 0.001;
  p.prefill_per_token_ctx_s = 0;
  p.decode_per_seq_s = 0.002;
  p.decode_per_kv_token_s = 0;
  p.groups = {{KvGroupKind::kFullAttention, 0, full_blocks}, other};
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();
  return p;
}

Profile Builtin(const std::string& name) {
  auto p = LoadProfileByNameOrPath(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Profile{};
}

std::vector<uint64_t> Hashes(const std::vector<uint32_t>& tokens) {
  std::vector<uint64_t> h;
  AppendBlockHashes(RootBlockHash("m"), tokens, kB, 0, &h);
  return h;
}

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Each group's GPU blocks as its KV events tell them (what the router sees), and the hit the
// rule predicts from them.
class Mirror {
 public:
  explicit Mirror(Profile profile) : profile_(std::move(profile)) {}
  void Apply(const std::vector<KvEvent>& events) {
    for (const KvEvent& e : events) {
      if (e.type == KvEvent::Type::kAllBlocksCleared) {
        gpu_.clear();
        continue;
      }
      if (e.medium != Medium::kGpu) continue;
      // Copies, as vLLM announces them: a hash leaves with its last copy.
      auto& copies = gpu_[e.group_idx.value_or(0)];
      for (uint64_t h : e.block_hashes) {
        if (e.type == KvEvent::Type::kBlockStored) {
          ++copies[h];
        } else if (auto it = copies.find(h); it == copies.end()) {
          ADD_FAILURE() << "removed unknown block";
        } else if (--it->second == 0) {
          copies.erase(it);
        }
      }
    }
  }
  bool Holds(int64_t group, uint64_t h) const {
    auto it = gpu_.find(group);
    return it != gpu_.end() && it->second.contains(h);
  }
  // The leading blocks full attention holds (capped at MaxHitBlocks).
  size_t FullPrefix(const std::vector<uint32_t>& prompt) const {
    const auto h = Hashes(prompt);
    const size_t m = std::min(h.size(), MaxHitBlocks(prompt.size(), kB));
    size_t f = 0;
    while (f < m && Holds(0, h[f])) ++f;
    return f;
  }
  uint32_t Predict(const std::vector<uint32_t>& prompt) const {
    const auto h = Hashes(prompt);
    return static_cast<uint32_t>(HybridCacheHit(profile_.KvGroups(), kB, FullPrefix(prompt),
                                                [&](size_t i) { return Holds(1, h[i]); }) *
                                 kB);
  }
  std::vector<uint64_t> Sorted(int64_t group) const {
    auto it = gpu_.find(group);
    std::vector<uint64_t> out;
    if (it != gpu_.end()) {
      for (const auto& [h, n] : it->second) out.push_back(h);
    }
    return out;
  }

 private:
  Profile profile_;
  std::map<int64_t, std::map<uint64_t, int>> gpu_;
};

struct Turn {
  RequestOutput out;
  std::vector<uint32_t> output_tokens;
  std::vector<uint32_t> prefill_chunks;
  std::vector<KvEvent> events;
};

// Runs one request alone to completion, feeding its events to `mirror`, and checks first that
// the mirror predicts its local hit (cached_tokens less what the store loaded).
Turn RunAlone(Engine& e, Mirror& mirror, uint64_t id, const std::vector<uint32_t>& prompt,
              uint32_t max_tokens, double* now) {
  const uint32_t predicted = mirror.Predict(prompt);
  e.AddRequest({id, prompt, max_tokens, *now});
  Turn t;
  while (e.HasWork()) {
    StepResult r = e.Step(*now);
    *now += r.duration;
    if (r.num_prefill_tokens > 0) t.prefill_chunks.push_back(r.num_prefill_tokens);
    mirror.Apply(r.events);
    t.events.insert(t.events.end(), r.events.begin(), r.events.end());
    for (auto& o : r.outputs) {
      t.output_tokens.insert(t.output_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      t.out = o;
    }
  }
  // The store's share is not the engine's to predict (the router learns it from the store).
  EXPECT_EQ(t.out.cached_tokens - t.out.external_tokens, predicted) << "request " << id;
  return t;
}

void ExpectGroupFields(const std::vector<KvEvent>& events, const Profile& p) {
  for (const KvEvent& e : events) {
    if (e.type == KvEvent::Type::kAllBlocksCleared) continue;
    if (p.groups.empty()) {
      EXPECT_FALSE(e.group_idx || e.kv_cache_spec_kind || e.kv_cache_spec_sliding_window);
      continue;
    }
    ASSERT_TRUE(e.group_idx.has_value());
    const KvGroupSpec& g = p.groups.at(static_cast<size_t>(*e.group_idx));
    if (e.type == KvEvent::Type::kBlockRemoved) {
      EXPECT_FALSE(e.kv_cache_spec_kind || e.kv_cache_spec_sliding_window);
      continue;
    }
    EXPECT_EQ(e.kv_cache_spec_kind, std::string(KvGroupKindName(g.kind)));
    if (g.kind == KvGroupKind::kSlidingWindow) {
      EXPECT_EQ(e.kv_cache_spec_sliding_window, std::optional<int64_t>(g.sliding_window));
    } else {
      EXPECT_FALSE(e.kv_cache_spec_sliding_window.has_value());
    }
  }
}

// --- Built-in profiles: a multi-turn conversation with branches ---

// Turns: a 1500-token prompt; the same conversation continued; a branch from token 1000; the
// conversation continued again; a branch from token 1560. Each answers 20 tokens. Returns the
// cached_tokens of each turn.
std::vector<uint32_t> Conversation(const std::string& profile_name) {
  const Profile p = Builtin(profile_name);
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  std::vector<uint32_t> cached;
  std::vector<KvEvent> events;
  auto turn = [&](uint64_t id, const std::vector<uint32_t>& prompt) {
    Turn t = RunAlone(e, mirror, id, prompt, 20, &now);
    cached.push_back(t.out.cached_tokens);
    events.insert(events.end(), t.events.begin(), t.events.end());
    return Concat(prompt, t.output_tokens);
  };
  const auto p1 = Prompt(1500, 1000);
  const auto c1 = turn(1, p1);
  const auto p2 = Concat(c1, Prompt(50, 5000));
  const auto c2 = turn(2, p2);
  turn(3, Concat(std::vector<uint32_t>(p1.begin(), p1.begin() + 1000), Prompt(100, 9000)));
  turn(4, Concat(c2, Prompt(30, 7000)));
  turn(5, Concat(std::vector<uint32_t>(p2.begin(), p2.begin() + 1560), Prompt(40, 8000)));
  ExpectGroupFields(events, p);
  EXPECT_FALSE(events.empty());
  // The events rebuild each group's cache exactly.
  for (size_t g = 0; g < e.kv_cache().num_groups(); ++g) {
    EXPECT_EQ(mirror.Sorted(static_cast<int64_t>(g)),
              e.kv_cache().pool(g).CachedHashes(Medium::kGpu))
        << profile_name << " group " << g;
  }
  return cached;
}

TEST(HybridProfiles, LlamaHitsWhatFullAttentionHolds) {
  // Turn 2: 1519 tokens computed -> 94 full blocks; turn 3 shares 62 blocks; turn 4: 99;
  // turn 5: 97.
  EXPECT_EQ(Conversation("llama3-8b-h100"),
            (std::vector<uint32_t>{0, 94 * kB, 62 * kB, 99 * kB, 97 * kB}));
}

TEST(HybridProfiles, GptOssSlidingWindowKeepsEveryHitWithoutPressure) {
  EXPECT_EQ(Conversation("gpt-oss-like"),
            (std::vector<uint32_t>{0, 94 * kB, 62 * kB, 99 * kB, 97 * kB}));
}

TEST(HybridProfiles, Gemma3HitsShorterThanItsWindowFromBlockZero) {
  // The 62-block branch is shorter than the 64-block window: the run reaching block 0 is it.
  EXPECT_EQ(Conversation("gemma3-like"),
            (std::vector<uint32_t>{0, 94 * kB, 62 * kB, 99 * kB, 97 * kB}));
}

TEST(HybridProfiles, Qwen3NextHitsAtItsLastCheckpoint) {
  // Checkpoints of the first chain: 92 (end of the aligned 1488-token chunk), 93 (decode
  // crossing 1504), 97 (turn 2's aligned chunk to 1568), 98 (decode crossing 1584), 100, 101.
  // Turn 3's branch shares 62 blocks but no checkpoint below 62: nothing. Turn 5 shares 97:
  // the checkpoint at 93.
  EXPECT_EQ(Conversation("qwen3-next-like"),
            (std::vector<uint32_t>{0, 94 * kB, 0, 99 * kB, 94 * kB}));
}

TEST(HybridProfiles, ShippedFilesAreTheBuiltInProfiles) {
  std::set<std::string> names;
  for (const BuiltinProfile& b : BuiltinProfiles()) {
    names.insert(std::string(b.name));
    std::ifstream in(std::string(KVGATE_TEST_SOURCE_DIR) + "/sim/profiles/" + std::string(b.name) +
                     ".yaml");
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), b.yaml) << b.name << ": rebuild to embed the edited file";
    auto by_name = LoadProfileByNameOrPath(std::string(b.name));
    ASSERT_TRUE(by_name.ok()) << by_name.status();
    EXPECT_EQ(by_name->name, b.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"llama3-8b-h100", "gpt-oss-like", "gemma3-like",
                                          "qwen3-next-like"}));
  const Profile gpt = Builtin("gpt-oss-like");
  ASSERT_EQ(gpt.groups.size(), 2u);
  EXPECT_EQ(gpt.groups[1].kind, KvGroupKind::kSlidingWindow);
  EXPECT_EQ(gpt.groups[1].sliding_window, 128u);
  const Profile gemma = Builtin("gemma3-like");
  ASSERT_EQ(gemma.groups.size(), 2u);
  EXPECT_EQ(gemma.groups[1].sliding_window, 1024u);
  const Profile qwen = Builtin("qwen3-next-like");
  ASSERT_EQ(qwen.groups.size(), 2u);
  EXPECT_EQ(qwen.groups[1].kind, KvGroupKind::kMamba);
  EXPECT_TRUE(Builtin("llama3-8b-h100").groups.empty());
}

// --- Sliding window ---

TEST(HybridEngine, LegacyProfileEventsCarryNoGroupFields) {
  Profile p = SmallHybrid({KvGroupKind::kSlidingWindow, 33, 24});
  p.groups.clear();
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  const Turn t = RunAlone(e, mirror, 1, Prompt(100, 1), 2, &now);
  ASSERT_FALSE(t.events.empty());
  ExpectGroupFields(t.events, p);
  EXPECT_EQ(e.kv_cache().num_groups(), 1u);
}

TEST(HybridEngine, OneExplicitFullAttentionGroupTagsEventsAndHitsAsBefore) {
  Profile p = SmallHybrid({KvGroupKind::kSlidingWindow, 33, 24});
  p.groups.resize(1);
  ASSERT_TRUE(p.Validate().ok());
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  const Turn t = RunAlone(e, mirror, 1, Prompt(100, 1), 2, &now);
  ExpectGroupFields(t.events, p);
  ASSERT_FALSE(t.events.empty());
  EXPECT_EQ(t.events[0].group_idx, std::optional<int64_t>(0));
  EXPECT_EQ(t.events[0].kv_cache_spec_kind, std::optional<std::string>("full_attention"));
  EXPECT_EQ(RunAlone(e, mirror, 2, Prompt(120, 1), 1, &now).out.cached_tokens, 96u);
}

TEST(HybridEngine, EveryGroupCachesFullBlocksAndTheWindowFreesWhatItPassed) {
  const Profile p = SmallHybrid({KvGroupKind::kSlidingWindow, 33, 24});
  Engine e(p, "m", 0);
  Mirror mirror(p);
  const auto prompt = Prompt(160, 1000);
  const auto h = Hashes(prompt);
  e.AddRequest({1, prompt, 2, 0});
  // Chunk 1 (tokens 0-63): four blocks in each group, cached in each, same hashes.
  StepResult s = e.Step(0);
  mirror.Apply(s.events);
  ExpectGroupFields(s.events, p);
  ASSERT_EQ(s.events.size(), 2u);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(s.events[g].type, KvEvent::Type::kBlockStored);
    EXPECT_EQ(s.events[g].group_idx, std::optional<int64_t>(g));
    EXPECT_EQ(s.events[g].block_hashes, std::vector<uint64_t>(h.begin(), h.begin() + 4));
    EXPECT_EQ(s.events[g].token_ids, Prompt(64, 1000));
  }
  EXPECT_EQ(e.kv_cache().pool(1).NumFreeBlocks(), 24u - 4u);
  EXPECT_DOUBLE_EQ(e.kv_cache().Usage(), 8.0 / (64 + 24));  // vllm:kv_cache_usage_perc
  // Chunk 2 (64-127): the window (33 tokens) passed blocks 0 and 1, which are freed but stay
  // cached; 4 more are taken.
  s = e.Step(0.1);
  mirror.Apply(s.events);
  EXPECT_EQ(e.kv_cache().pool(1).NumFreeBlocks(), 24u - 6u);
  EXPECT_EQ(e.kv_cache().pool(0).NumFreeBlocks(), 64u - 8u);
  // Chunk 3 (128-159), then one decode: the window holds blocks 8-10 only.
  s = e.Step(0.2);
  mirror.Apply(s.events);
  s = e.Step(0.3);
  mirror.Apply(s.events);
  EXPECT_FALSE(e.HasWork());
  EXPECT_EQ(e.kv_cache().pool(1).NumFreeBlocks(), 24u);
  EXPECT_EQ(mirror.Sorted(1), e.kv_cache().pool(1).CachedHashes(Medium::kGpu));
  EXPECT_EQ(mirror.Sorted(0), mirror.Sorted(1));  // Both groups cached blocks 0-9.
  EXPECT_EQ(mirror.Sorted(0).size(), 10u);
}

// vLLM's "false prefix residency": the full-attention group still holds a conversation's
// prefix but the sliding-window group, whose blocks were freed early and age out first, lost
// the window before it, so the hit is shorter than full attention suggests.
TEST(HybridEngine, SlidingWindowBlocksAreEvictedBeforeFullAttentionOnes) {
  const Profile p = SmallHybrid({KvGroupKind::kSlidingWindow, 33, 24});
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  const auto a = Prompt(160, 1000);
  const Turn ta = RunAlone(e, mirror, 1, a, 2, &now);
  const auto ha = Hashes(a);
  // Three other conversations of 11 blocks each churn the 24-block sliding-window pool (its
  // least recently freed blocks first: A's, freed as its window moved on) but not the 64-block
  // full-attention pool.
  std::vector<KvEvent> pressure;
  for (uint64_t i = 2; i <= 4; ++i) {
    const Turn t = RunAlone(e, mirror, i, Prompt(160, static_cast<uint32_t>(i) * 1000), 2, &now);
    pressure.insert(pressure.end(), t.events.begin(), t.events.end());
  }
  ExpectGroupFields(pressure, p);
  std::set<uint64_t> removed_swa;
  for (const KvEvent& ev : pressure) {
    if (ev.type != KvEvent::Type::kBlockRemoved) continue;
    EXPECT_EQ(ev.group_idx, std::optional<int64_t>(1)) << "a full-attention block was evicted";
    removed_swa.insert(ev.block_hashes.begin(), ev.block_hashes.end());
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(removed_swa.contains(ha[i])) << i;
    EXPECT_TRUE(mirror.Holds(0, ha[i])) << i;
    EXPECT_FALSE(mirror.Holds(1, ha[i])) << i;
  }
  // A branch sharing A's first 6 blocks finds them in full attention, not in the window: 0.
  const auto branch = Concat(Prompt(96, 1000), Prompt(30, 9000));
  EXPECT_EQ(mirror.FullPrefix(branch), 6u);
  EXPECT_EQ(RunAlone(e, mirror, 5, branch, 2, &now).out.cached_tokens, 0u);
  // Recomputing it cached A's blocks 0-5 again in the window. A's next turn: full attention
  // holds 10 blocks, the window's first run of 2 ends at block 6.
  const auto a2 = Concat(Concat(a, ta.output_tokens), Prompt(30, 7000));
  EXPECT_EQ(mirror.FullPrefix(a2), 10u);
  EXPECT_EQ(RunAlone(e, mirror, 6, a2, 1, &now).out.cached_tokens, 6 * kB);
}

// --- Mamba ---

TEST(HybridEngine, MambaAlignsChunksAndCheckpointsAtBlockBoundaries) {
  const Profile p = SmallHybrid({KvGroupKind::kMamba, 0, 8});
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  const auto a = Prompt(100, 1000);
  const auto h = Hashes(a);
  const Turn ta = RunAlone(e, mirror, 1, a, 3, &now);
  // 64 (budget, aligned), 32 (cut at 96, the last block boundary), 4.
  EXPECT_EQ(ta.prefill_chunks, (std::vector<uint32_t>{64, 32, 4}));
  std::vector<KvEvent> mamba;
  for (const KvEvent& ev : ta.events) {
    if (ev.group_idx == 1) mamba.push_back(ev);
  }
  ExpectGroupFields(ta.events, p);
  ASSERT_EQ(mamba.size(), 2u);  // Checkpoints after blocks 3 and 5, one block each.
  EXPECT_EQ(mamba[0].block_hashes, std::vector<uint64_t>{h[3]});
  EXPECT_EQ(mamba[0].parent_block_hash, std::optional<uint64_t>(h[2]));
  EXPECT_EQ(mamba[0].token_ids, Prompt(16, 1048));
  EXPECT_EQ(mamba[1].block_hashes, std::vector<uint64_t>{h[5]});
  EXPECT_EQ(mamba[1].kv_cache_spec_kind, std::optional<std::string>("mamba"));
  EXPECT_EQ(e.kv_cache().pool(1).NumFreeBlocks(), 8u);  // State and checkpoints freed.
  EXPECT_EQ(e.kv_cache().pool(1).CachedHashes(Medium::kGpu).size(), 2u);

  // The conversation goes on: full attention holds 6 blocks, the checkpoint after 5 serves.
  const auto a2 = Concat(Concat(a, ta.output_tokens), Prompt(40, 5000));
  EXPECT_EQ(RunAlone(e, mirror, 2, a2, 1, &now).out.cached_tokens, 6 * kB);
  // A branch at token 90 shares 5 blocks; the last checkpoint below is after block 3.
  const auto branch = Concat(Prompt(90, 1000), Prompt(30, 6000));
  EXPECT_EQ(mirror.FullPrefix(branch), 5u);
  EXPECT_EQ(RunAlone(e, mirror, 3, branch, 1, &now).out.cached_tokens, 4 * kB);
  EXPECT_EQ(mirror.Sorted(1), e.kv_cache().pool(1).CachedHashes(Medium::kGpu));
}

TEST(HybridEngine, MambaCheckpointsAgeOutOfTheirPool) {
  const Profile p = SmallHybrid({KvGroupKind::kMamba, 0, 4});
  Engine e(p, "m", 0);
  Mirror mirror(p);
  double now = 0;
  const auto a = Prompt(100, 1000);
  const Turn ta = RunAlone(e, mirror, 1, a, 3, &now);
  for (uint64_t i = 2; i <= 4; ++i) {
    RunAlone(e, mirror, i, Prompt(100, static_cast<uint32_t>(i) * 1000), 3, &now);
  }
  // Full attention still holds A's 6 blocks; its checkpoints are gone: nothing hits.
  const auto a2 = Concat(Concat(a, ta.output_tokens), Prompt(40, 5000));
  EXPECT_EQ(mirror.FullPrefix(a2), 6u);
  EXPECT_EQ(RunAlone(e, mirror, 5, a2, 1, &now).out.cached_tokens, 0u);
}

// --- The store and P/D with groups ---

class FakeStore : public ExternalKvCache {
 public:
  size_t Lookup(absl::Span<const uint64_t> hashes) override {
    size_t n = 0;
    while (n < hashes.size() && blocks.contains(hashes[n])) ++n;
    return n;
  }
  size_t Load(absl::Span<const uint64_t> hashes) override { return hashes.size(); }
  void Save(absl::Span<const uint64_t> hashes, std::optional<uint64_t>,
            absl::Span<const uint32_t>) override {
    blocks.insert(hashes.begin(), hashes.end());
  }
  std::set<uint64_t> blocks;
};

TEST(HybridEngine, StoreLoadRestoresEveryGroup) {
  for (const KvGroupSpec& other :
       {KvGroupSpec{KvGroupKind::kSlidingWindow, 33, 24}, KvGroupSpec{KvGroupKind::kMamba, 0, 8}}) {
    const Profile p = SmallHybrid(other, 64, 256);
    FakeStore store;
    const auto prompt = Prompt(128, 7);
    const auto h = Hashes(prompt);
    double now = 0;
    Engine a(p, "m", 0);
    a.SetExternalCache(&store);
    Mirror ma(p);
    RunAlone(a, ma, 1, prompt, 1, &now);
    EXPECT_EQ(store.blocks.size(), 8u);

    Engine b(p, "m", 0);
    b.SetExternalCache(&store);
    Mirror mb(p);
    now = 0;
    const Turn loaded = RunAlone(b, mb, 1, prompt, 1, &now);
    EXPECT_EQ(loaded.out.cached_tokens, 112u);
    EXPECT_EQ(loaded.out.external_tokens, 112u);
    if (other.kind == KvGroupKind::kSlidingWindow) {
      // The window of the loaded positions (5 and 6, and 7 computed) is restored and cached.
      std::vector<uint64_t> window = {h[5], h[6], h[7]};
      std::sort(window.begin(), window.end());
      EXPECT_EQ(mb.Sorted(1), window);
    } else {
      // The state at the end of the prompt (after block 7) is a checkpoint.
      EXPECT_EQ(mb.Sorted(1), std::vector<uint64_t>{h[7]});
    }
    EXPECT_EQ(mb.Sorted(1), b.kv_cache().pool(1).CachedHashes(Medium::kGpu));
    EXPECT_EQ(mb.Sorted(0).size(), 8u);
    // The conversation goes on: the restored blocks hit locally, every group serving them (a
    // Mamba model needs the checkpoint after block 7, which only a longer prompt can use).
    const Turn again = RunAlone(b, mb, 2, Concat(prompt, Prompt(20, 500)), 1, &now);
    EXPECT_EQ(again.out.cached_tokens, 128u);
    EXPECT_EQ(again.out.external_tokens, 0u);
  }
}

TEST(HybridEngine, PdPrefillHoldsEveryGroupAndDecodeKeepsTheWindow) {
  const Profile p = SmallHybrid({KvGroupKind::kSlidingWindow, 33, 24}, 64, 256);
  Engine prefill(p, "m", 0);
  EngineRequest r;
  r.id = 1;
  r.prompt = Prompt(100, 7);
  r.max_tokens = 1;
  r.hold = true;
  prefill.AddRequest(r);
  ASSERT_TRUE(prefill.Step(0).outputs.at(0).finished);
  EXPECT_EQ(prefill.num_held_blocks(), 14u);  // 7 blocks in each group.
  ASSERT_NE(prefill.HeldBlocks(1), nullptr);
  EXPECT_EQ(prefill.HeldBlocks(1)->size(), 7u);  // remote_block_ids: full attention's.
  prefill.ReleaseHeld(1);
  EXPECT_EQ(prefill.num_held_blocks(), 0u);
  EXPECT_EQ(prefill.kv_cache().pool(1).NumFreeBlocks(), 24u);

  Engine decode(p, "m", 0);
  EngineRequest d = r;
  d.hold = false;
  d.max_tokens = 2;
  d.remote_tokens = 100;
  decode.AddRequest(d);
  StepResult first = decode.Step(0);
  EXPECT_EQ(first.outputs.at(0).cached_tokens, 99u);
  // 99 tokens received: the window needs blocks 4-6 only; 4 and 5 are full and cached.
  EXPECT_EQ(decode.kv_cache().pool(1).NumFreeBlocks(), 24u - 3u);
  EXPECT_EQ(decode.kv_cache().pool(1).CachedHashes(Medium::kGpu).size(), 2u);
  EXPECT_EQ(decode.pool().CachedHashes(Medium::kGpu).size(), 6u);
}

// --- Robustness: a random workload through tiny pools, with preemptions ---

std::vector<std::string> Replay(Engine& e, Mirror& mirror) {
  const std::vector<EngineRequest> reqs = RandomWorkload(40, 57, 59);
  std::vector<std::string> log;
  std::map<uint64_t, uint32_t> got;
  RunWorkload(e, reqs, [&](double now, const StepResult& r) {
    mirror.Apply(r.events);
    for (const auto& o : r.outputs) {
      got[o.id] = o.completion_tokens;
      log.push_back(std::to_string(o.id) + ":" + std::to_string(o.cached_tokens) + "@" +
                    std::to_string(now) + (o.finished ? " done" : ""));
    }
    for (const auto& ev : r.events) {
      log.push_back("ev" + std::to_string(ev.group_idx.value_or(-1)) + "/" +
                    std::to_string(ev.block_hashes.size()));
    }
  });
  for (const auto& r : reqs) EXPECT_EQ(got[r.id], r.max_tokens) << r.id;
  EXPECT_GT(e.counters().preemptions, 0u);
  return log;
}

TEST(HybridEngine, RandomWorkloadWithPreemptionFinishesAndEventsMatchThePools) {
  for (const KvGroupSpec& other :
       {KvGroupSpec{KvGroupKind::kSlidingWindow, 33, 10}, KvGroupSpec{KvGroupKind::kMamba, 0, 4}}) {
    const Profile p = SmallHybrid(other, 16);
    Engine e1(p, "m", 7), e2(p, "m", 7);
    Mirror m1(p), m2(p);
    EXPECT_EQ(Replay(e1, m1), Replay(e2, m2));
    for (size_t g = 0; g < 2; ++g) {
      const BlockPool& pool = e1.kv_cache().pool(g);
      EXPECT_EQ(m1.Sorted(static_cast<int64_t>(g)), pool.CachedHashes(Medium::kGpu))
          << KvGroupKindName(other.kind) << " group " << g;
      EXPECT_EQ(pool.NumFreeBlocks(), pool.num_gpu_blocks());
    }
  }
}

}  // namespace
}  // namespace kvgate::sim
