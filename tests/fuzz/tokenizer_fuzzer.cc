// libFuzzer target for the tokenizer and the chat-template engine (issue 16). The first byte
// picks a mode:
//   0: the rest is a Jinja template: parse it and render it over a fixed conversation;
//   1: the rest is a chat body: render it through a template with loops, filters and tojson;
//   2: the rest is text: encode it with a small byte-level tokenizer (added tokens, the
//      Llama 3 split) and check the hand-compiled splits (Llama 3, Qwen, DeepSeek V3's three)
//      against Oniguruma's on the same text.
// Nothing may crash, leak or trip a sanitizer; errors must be statuses. Fuzzed by
// tests/fuzz/run_fuzzers.sh (clang); its seeds also run in kvgate_tokenizer_tests (gcc builds).
#include <simdjson.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/hf_split.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/jinja.h"

namespace {

using namespace kvgate::tokenizer;

// Every pattern hf_split.h hand-compiles (DeepSeek V3's CR and LF are the characters).
constexpr const char* kPatterns[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    "\\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

constexpr const char* kTemplate = R"({%- set ns = namespace(n=0) -%}
{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}
<|{{ m.role }}|>{{ m.content if m.content is string else m.content|tojson }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.arguments|tojson(indent=2) }}{% endfor %}{% endif -%}
{%- endfor -%}{{ tools|tojson if tools }}{{ ns.n }}{% if add_generation_prompt %}<|assistant|>{% endif %})";

struct State {
  std::shared_ptr<const HfTokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
  std::vector<std::pair<std::shared_ptr<const hf::Regex>, const hf::FastSplit*>> splits;
};

State* Init() {
  auto* s = new State();
  const std::string dir = "/tmp/kvgate_tokenizer_fuzzer_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json")
      << R"({
    "added_tokens": [{"id": 7, "content": "<|x|>", "special": true, "normalized": false},
                     {"id": 8, "content": "ab", "special": false, "normalized": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": ")"
         R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6},
              "merges": ["a b", "ab c", "Ġ a"]}})";
  HfTokenizerFiles f;
  f.dir = dir;
  auto t = HfTokenizer::Load(f);
  if (!t.ok()) std::abort();
  s->tokenizer = *t;
  std::filesystem::remove_all(dir);
  s->chat = *ChatTemplate::Parse(kTemplate);
  for (const char* p : kPatterns) {
    auto re = *hf::Regex::Compile(p);
    const hf::FastSplit* fast = hf::FastSplit::For(re->pattern());
    if (fast == nullptr) std::abort();
    s->splits.emplace_back(std::move(re), fast);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static State* state = Init();
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto t = jinja::Template::Parse(in);
      if (!t.ok()) return 0;
      jinja::Value msg = jinja::Value::MakeObject();
      msg.Set("role", jinja::Value::String("user"));
      msg.Set("content", jinja::Value::String("hi"));
      jinja::Value ctx = jinja::Value::MakeObject();
      ctx.Set("messages", jinja::Value::MakeArray({msg, msg, msg}));
      ctx.Set("add_generation_prompt", jinja::Value::Bool(true));
      // Rendered twice replaying what it can (the second may replay iterations of the first),
      // and once rendering everything: all three must agree.
      std::string first, second, full;
      const absl::Status a = (*t)->Render(ctx, &first);
      const absl::Status b = (*t)->Render(ctx, &second);
      const absl::Status c = (*t)->Render(ctx, &full, false);
      if (a.ok() != c.ok() || b.ok() != c.ok() || (c.ok() && (first != full || second != full)))
        std::abort();
      return 0;
    }
    case 1: {
      std::string out, full;
      bool add_special = false, full_special = false;
      const absl::Status a = state->chat->RenderRequest(in, SpecialTokensMap{}, &out, &add_special);
      // A body that is valid JSON (the gateway parses every body before it renders one) renders
      // the same read through the message cache as read whole.
      simdjson::dom::parser parser;
      simdjson::dom::element doc;
      if (parser.parse(in.data(), in.size()).get(doc) == simdjson::SUCCESS) {
        const absl::Status b =
            state->chat->RenderRequest(in, SpecialTokensMap{}, &full, &full_special, false);
        if (a.ok() != b.ok() || (b.ok() && (out != full || add_special != full_special)) ||
            (!b.ok() && a.message() != b.message())) {
          std::abort();
        }
        // A layout guessed from the bytes (every `,` after the first `[`, then the last `]`):
        // right for a flat list of messages, wrong otherwise; the render is the same.
        const size_t open = in.find('['), close = in.rfind(']');
        if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
          std::vector<uint32_t> ends;
          for (size_t i = open + 1; i < close; ++i) {
            if (in[i] == ',') ends.push_back(static_cast<uint32_t>(i));
          }
          ends.push_back(static_cast<uint32_t>(close));
          const ChatLayout layout{open + 1, ends};
          std::string placed;
          bool placed_special = false;
          const absl::Status c = state->chat->RenderRequest(in, SpecialTokensMap{}, &placed,
                                                            &placed_special, true, &layout);
          if (c.ok() != b.ok() || (b.ok() && (placed != full || placed_special != full_special)) ||
              (!b.ok() && c.message() != b.message())) {
            std::abort();
          }
        }
      }
      return 0;
    }
    default: {
      std::vector<uint32_t> ids;
      if (!state->tokenizer->Encode(in, true, &ids).ok()) return 0;  // invalid UTF-8
      for (const auto& [regex, fast] : state->splits) {
        std::vector<std::pair<size_t, size_t>> a, b;
        fast->ForEachMatch(in, [&](size_t i, size_t j) { a.emplace_back(i, j); });
        regex->ForEachMatch(in, [&](size_t i, size_t j) { b.emplace_back(i, j); });
        if (a != b) std::abort();  // the hand-compiled split must equal Oniguruma's
      }
      return 0;
    }
  }
}
