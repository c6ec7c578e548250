// Issue 31: a long chat body whose first messages an earlier body had is parsed without them.
// The property: with the cache, every body canonicalises exactly as a full pass does (the
// same fields, the same canonical bytes, the same error), whatever the next turn does to the
// previous one: append, edit a message, truncate, change the system prompt or the model, move
// or change the tools, re-space the JSON, or break it. And the cache must really be used, and
// stay within its bound.
#include "kvindex/prefix_reuse.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kvindex/block_memo.h"
#include "kvindex/canonicalize.h"
#include "tests/kvindex/prefix_reuse_expect.h"

namespace kvgate::kvindex {
namespace {

struct Msg {
  std::string json;  // one element of the messages array
};

class Bodies {
 public:
  explicit Bodies(uint32_t seed) : rng_(seed) {}

  // Text with the escapes agents send: newlines, tabs, quotes, backslashes, unicode, and the
  // escaped control bytes the canonical stream must frame.
  std::string Text(size_t bytes) {
    static const char* kPieces[] = {
        "int main() {", "\\n",     "\\t",  "\\\"quoted\\\"", "\\\\", "\\u00e9", "é",     "\\u0001",
        "\\b",          " return", "ok; ", "\\ud83d\\ude00", "\\/",  "x",       "\\r\\n"};
    std::string out;
    while (out.size() < bytes) out += kPieces[rng_() % std::size(kPieces)];
    return out;
  }

  Msg Message(size_t bytes) {
    const int kind = static_cast<int>(rng_() % 4);
    const int id = next_id_++;
    switch (kind) {
      case 0:
        return {"{\"role\":\"user\",\"content\":\"" + Text(bytes) + "\"}"};
      case 1:
        return {"{\"content\":\"" + Text(bytes) + "\", \"role\": \"assistant\"}"};
      case 2:
        return {"{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_" +
                std::to_string(id) +
                "\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":"
                "\"{\\\"path\\\": \\\"src/f" +
                std::to_string(id) + ".cc\\\"}\"}}]}"};
      default:
        return {"{\"role\":\"tool\",\"tool_call_id\":\"call_" + std::to_string(id) +
                "\",\"content\":[{\"type\":\"text\",\"text\":\"" + Text(bytes) + "\"}]}"};
    }
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  int next_id_ = 0;
};

struct Turn {
  std::string model = "m";
  std::string system;
  std::vector<Msg> messages;
  bool tools_after = false;
  int tool_count = 1;  // 0: no `tools` field
  bool pretty = false;

  std::string Body() const {
    const std::string sep = pretty ? ",\n  " : ",";
    std::string tools = R"("tools":[)";
    for (int i = 0; i < tool_count; ++i) {
      tools += std::string(i > 0 ? "," : "") + R"({"type":"function","function":{"name":"tool)" +
               std::to_string(i) + R"(","parameters":{"type":"object"}}})";
    }
    tools += "]";
    if (tool_count == 0) tools = R"("tools":null)";
    std::string b = "{\"model\":\"" + model + "\"" + sep;
    if (!tools_after) b += tools + sep;
    b += "\"messages\":[" + std::string(pretty ? "\n    " : "");
    b += "{\"role\":\"system\",\"content\":\"" + system + "\"}";
    for (const Msg& m : messages) b += sep + m.json;
    b += pretty ? "\n  ]" : "]";
    if (tools_after) b += sep + tools;
    b += sep + "\"stream\":true}";
    return b;
  }
};

void ExpectSame(Canonicalizer& reusing, Canonicalizer& whole, const std::string& body,
                const std::string& what, uint32_t block_bytes = 64, int* resumed = nullptr,
                int* borrowed = nullptr) {
  ExpectSameAsFullPass(reusing, whole, body, ApiKind::kChatCompletions, what, block_bytes, resumed,
                       borrowed);
}

TEST(PrefixReuse, EveryNextTurnCanonicalisesAsAFullPass) {
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Canonicalizer whole;
  int resumed = 0;   // turns whose block hashes resumed from the previous turn's
  int borrowed = 0;  // turns whose prompt borrowed the reused bytes instead of copying them
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    Bodies gen(seed);
    Turn t;
    t.tools_after = seed % 2 == 0;  // the OpenAI SDKs' order: the header comes last
    t.system = gen.Text(20000);
    while (t.Body().size() < PrefixReuseCache::kMinBodyBytes + 4096) {
      t.messages.push_back(gen.Message(3000));
    }
    ExpectSame(reusing, whole, t.Body(), "first turn");
    for (int turn = 0; turn < 40; ++turn) {
      const int op = static_cast<int>(gen.rng()() % 10);
      std::string what = "seed " + std::to_string(seed) + " turn " + std::to_string(turn);
      Turn next = t;
      switch (op) {
        case 0:  // edit a message in the middle
          next.messages[gen.rng()() % next.messages.size()] = gen.Message(2000);
          what += " edit";
          break;
        case 1:  // truncate
          next.messages.resize(next.messages.size() - 1 - gen.rng()() % 3);
          what += " truncate";
          break;
        case 2:  // the system prompt changes
          next.system += "x";
          what += " system";
          break;
        case 3:
          next.model = next.model == "m" ? "other" : "m";
          what += " model";
          break;
        case 4:
          if (gen.rng()() % 2 == 0) {
            next.tools_after = !next.tools_after;
            what += " tools moved";
          } else {  // a tool added, or all of them dropped (the header changes or goes)
            next.tool_count = (next.tool_count + 1) % 3;
            what += " tools changed";
          }
          break;
        case 5:
          next.pretty = !next.pretty;
          what += " re-spaced";
          break;
        default:  // append (the common case)
          for (int k = 1 + static_cast<int>(gen.rng()() % 3); k > 0; --k) {
            next.messages.push_back(gen.Message(1 + gen.rng()() % 4000));
          }
          what += " append";
      }
      // Now and then another block size: the previous turn's hashes are then not reused.
      ExpectSame(reusing, whole, next.Body(), what, turn % 7 == 6 ? 48 : 64, &resumed, &borrowed);
      // A broken next turn is refused as a full pass refuses it (not kept for later turns).
      std::string broken = next.Body();
      broken.insert(broken.size() - 40, "{\"role\":");
      ExpectSame(reusing, whole, broken, what + " broken");
      t = next;
    }
  }
  const PrefixReuseCache::Stats s = cache.stats();
  // Most turns append: most bodies must have reused something, and far more bytes than parsed.
  EXPECT_GT(s.hits, 100u);
  EXPECT_GT(s.reused_bytes, s.hits * 40000);
  EXPECT_GT(resumed, 80);
  EXPECT_GT(borrowed, 80);
  EXPECT_GT(s.late_tools, 20u);  // half the sessions send their tools after the messages
}

// The OpenAI SDKs write `tools` after `messages`. A turn whose tools are byte for byte the
// previous turn's takes that turn's canonical header without parsing them; other tools make
// it a whole walk (the same bytes as a full pass either way), published for the next turn.
TEST(PrefixReuse, ToolsAfterTheMessagesAreParsedOnlyWhenTheirBytesChange) {
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Canonicalizer whole;
  Bodies gen(3);
  Turn t;
  t.tools_after = true;
  t.system = gen.Text(20000);
  while (t.Body().size() < PrefixReuseCache::kMinBodyBytes + 4096) {
    t.messages.push_back(gen.Message(3000));
  }
  auto turn = [&](const std::string& what) {
    t.messages.push_back(gen.Message(500));
    ExpectSame(reusing, whole, t.Body(), what);
    return cache.stats();
  };
  ExpectSame(reusing, whole, t.Body(), "first turn");
  PrefixReuseCache::Stats s = turn("same tools");
  EXPECT_EQ(s.late_tools, 1u);
  EXPECT_EQ(s.hits, 1u);
  t.tool_count = 2;
  s = turn("a tool added");
  EXPECT_EQ(s.late_tools, 1u);
  EXPECT_EQ(s.misses, 2u) << "walked whole";
  s = turn("the new tools again");
  EXPECT_EQ(s.late_tools, 2u);
  t.tool_count = 0;  // `"tools":null`: the header goes
  s = turn("tools dropped");
  EXPECT_EQ(s.late_tools, 2u);
  s = turn("no tools again");
  EXPECT_EQ(s.late_tools, 2u);
  EXPECT_EQ(s.hits, 3u);
}

// An entry keeps its canonical prompt as pieces shared with the session's earlier entries:
// publishing a turn copies what it added. The pieces must read back as the whole prompt, stay
// few (joined past kMaxPieces), and really be shared (not a fresh copy every turn).
TEST(PrefixReuse, ALongSessionSharesItsEarlierBytesInFewPieces) {
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Canonicalizer whole;
  Bodies gen(7);
  Turn t;
  t.system = gen.Text(20000);
  while (t.Body().size() < PrefixReuseCache::kMinBodyBytes + 4096) {
    t.messages.push_back(gen.Message(3000));
  }
  std::shared_ptr<const ReusablePrefix> previous;
  int shared = 0;  // turns whose entry's first piece is the previous entry's
  int joined = 0;  // turns whose entry is one piece again after several
  for (int turn = 0; turn < 60; ++turn) {
    const std::string what = "turn " + std::to_string(turn);
    if (turn % 11 == 10) {
      t.messages.resize(t.messages.size() - 2);  // a truncation now and then: a piece cut short
    }
    t.messages.push_back(gen.Message(1 + gen.rng()() % 3000));
    const std::string body = t.Body();
    CanonicalRequest full, reused;
    ASSERT_TRUE(whole.Parse(body, 0, ApiKind::kChatCompletions, true, &full).ok()) << what;
    ASSERT_TRUE(reusing.Parse(body, 0, ApiKind::kChatCompletions, true, &reused).ok()) << what;
    ASSERT_EQ(reused.prompts[0].Text(), full.prompts[0].bytes) << what;
    const auto& entry = reused.messages_layout;
    ASSERT_TRUE(entry) << what;
    std::string back;
    entry->AppendCanonical(0, entry->canonical_size, &back);
    ASSERT_EQ(back, full.prompts[0].bytes) << what;
    EXPECT_EQ(entry->canonical_size, full.prompts[0].bytes.size()) << what;
    EXPECT_LE(entry->canonical.size(), ReusablePrefix::kMaxPieces) << what;
    EXPECT_TRUE(entry->CanonicalStartsWith(full.prompts[0].bytes)) << what;
    EXPECT_FALSE(entry->CanonicalStartsWith(full.prompts[0].bytes + "x")) << what;
    if (previous != nullptr) {
      if (entry->canonical.front().bytes == previous->canonical.front().bytes) ++shared;
      if (entry->canonical.size() == 1 && previous->canonical.size() > 1) ++joined;
    }
    previous = entry;
  }
  EXPECT_GT(shared, 45);
  EXPECT_GE(joined, 3);
}

TEST(PrefixReuse, TheCacheStaysWithinItsBoundLeastRecentlyUsedFirst) {
  constexpr size_t kBound = size_t{2} << 20;
  PrefixReuseCache cache(kBound);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  std::vector<std::string> bodies;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    Bodies gen(seed);
    Turn t;
    t.system = gen.Text(100 + seed);  // a different key for every session
    while (t.Body().size() < 200000) t.messages.push_back(gen.Message(4000));
    bodies.push_back(t.Body());
    CanonicalRequest out;
    ASSERT_TRUE(reusing.Parse(bodies.back(), 0, ApiKind::kChatCompletions, true, &out).ok());
    EXPECT_LE(cache.stats().bytes, kBound);
  }
  // ~140 KB of canonical bytes each: the bound holds about fifteen; the oldest were dropped.
  const PrefixReuseCache::Stats s = cache.stats();
  EXPECT_LT(s.entries, 30u);
  EXPECT_GT(s.entries, 3u);
  EXPECT_FALSE(cache.Find(bodies.front() + " ", 0).prefix);  // evicted
  const std::string& last = bodies.back();
  // The newest is still there: its next turn (another message) reuses every earlier one.
  std::string next = last.substr(0, last.rfind(']')) + R"(,{"role":"user","content":"go on"})" +
                     last.substr(last.rfind(']'));
  const PrefixMatch m = cache.Find(next, 0);
  ASSERT_TRUE(m.prefix);
  EXPECT_EQ(m.messages + 1, static_cast<int>(m.prefix->separators.size()));
}

// Sessions of one agent share its tools and system prompt, so their bodies share a key: each
// must still find its own earlier turns (with four conversations a key, these 40 sessions
// evicted each other and none did).
TEST(PrefixReuse, ManySessionsOfOneAgentEachFindTheirOwnEarlierTurns) {
  PrefixReuseCache cache(size_t{256} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Canonicalizer whole;
  Bodies gen(11);
  const std::string system = gen.Text(70000);
  constexpr int kSessions = 40, kTurns = 3;
  std::vector<Turn> sessions(kSessions);
  for (Turn& t : sessions) t.system = system;
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int s = 0; s < kSessions; ++s) {
      sessions[s].messages.push_back(gen.Message(2000));
      const std::string body = sessions[s].Body();
      const std::string what = "session " + std::to_string(s) + " turn " + std::to_string(turn);
      // From its second turn on, a session reuses all its earlier messages (the system message
      // is 0), not only the system prompt that every session of the agent has.
      if (turn > 0) {
        EXPECT_EQ(cache.Find(body, 0).messages, turn) << what;
      }
      ExpectSame(reusing, whole, body, what);
    }
  }
}

// A memo holds no more hashes than the cache counted for it, is written once, and answers only
// for the root seed and block size it was written with.
TEST(PrefixReuse, BlockMemoKeepsOneBoundedChain) {
  const std::vector<BlockHash> chain = {1, 2, 3};
  BlockMemo small(2);
  small.Set(7, 64, chain);
  EXPECT_TRUE(small.Get(7, 64).empty());
  BlockMemo memo(3);
  EXPECT_TRUE(memo.Get(7, 64).empty());
  memo.Set(7, 64, chain);
  memo.Set(7, 64, std::vector<BlockHash>{9});
  ASSERT_EQ(memo.Get(7, 64).size(), 3u);
  EXPECT_EQ(memo.Get(7, 64)[2], 3u);
  EXPECT_TRUE(memo.Get(8, 64).empty());
  EXPECT_TRUE(memo.Get(7, 32).empty());
}

// Gateway threads share the cache: entries published by one thread are reused by another, and a
// prompt's block hashes are kept by one thread while others read them (run under TSan too).
TEST(PrefixReuse, ConcurrentTurnsShareOneCacheAndEachEqualsAFullPass) {
  PrefixReuseCache cache(size_t{64} << 20);
  constexpr int kThreads = 4, kSessions = 6, kTurns = 6;
  Bodies gen(23);
  const std::string system = gen.Text(66000);
  std::vector<std::vector<std::string>> bodies(kSessions);  // [session][turn]
  for (int s = 0; s < kSessions; ++s) {
    Turn t;
    t.system = system;
    for (int turn = 0; turn < kTurns; ++turn) {
      t.messages.push_back(gen.Message(1500));
      bodies[s].push_back(t.Body());
    }
  }
  std::vector<std::thread> threads;
  int resumed[kThreads] = {};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
      Canonicalizer whole;
      for (int turn = 0; turn < kTurns; ++turn) {
        for (int s = 0; s < kSessions; ++s) {
          ExpectSame(reusing, whole, bodies[(s + i) % kSessions][turn],
                     "thread " + std::to_string(i) + " turn " + std::to_string(turn), 64,
                     &resumed[i]);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(cache.stats().hits, 0u);
  int total = 0;
  for (int r : resumed) total += r;
  EXPECT_GT(total, 0);
}

TEST(PrefixReuse, ABodyIsReusedOnlyWhereEveryByteBeforeIsTheSame) {
  PrefixReuseCache cache(size_t{64} << 20);
  Canonicalizer reusing(CanonicalizeOptions{.reuse = &cache});
  Bodies gen(7);
  Turn t;
  t.system = gen.Text(30000);
  for (int i = 0; i < 30; ++i) t.messages.push_back(gen.Message(3000));
  CanonicalRequest out;
  ASSERT_TRUE(reusing.Parse(t.Body(), 0, ApiKind::kChatCompletions, true, &out).ok());
  // One byte changed inside message 10: only messages before it may be reused.
  Turn edited = t;
  edited.messages[10].json.insert(20, "Z");
  edited.messages.push_back(gen.Message(100));
  const std::string body = edited.Body();
  const PrefixMatch m = cache.Find(body, 0);
  ASSERT_TRUE(m.prefix);
  EXPECT_EQ(m.messages, 10);  // the system message and messages 0..9
  EXPECT_LE(m.cut_end, body.find(edited.messages[10].json));

  // Found by the fuzzer: a trailing comma after the known messages. Cut through, `[1,]`
  // would have become the valid `[]`; nothing is reused there, and the body stays refused.
  Canonicalizer whole;
  std::string trailing = t.Body();
  trailing.insert(trailing.rfind(']'), ",");
  CanonicalRequest a, b;
  EXPECT_FALSE(reusing.Parse(trailing, 0, ApiKind::kChatCompletions, true, &a).ok());
  EXPECT_EQ(reusing.Parse(trailing, 0, ApiKind::kChatCompletions, true, &a),
            whole.Parse(trailing, 0, ApiKind::kChatCompletions, true, &b));
}

}  // namespace
}  // namespace kvgate::kvindex
