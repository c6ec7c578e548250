#include "tokenizer/chat_template.h"

#include <simdjson.h>
#include <xxhash.h>

#include <optional>

#include "absl/types/span.h"
#include "common/strings.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_memo.h"

namespace kvgate::tokenizer {
namespace {

using jinja::Value;
using simdjson::dom::element;

constexpr int kMaxDepth = 64;

absl::StatusOr<Value> ToValue(element e, int depth) {
  if (depth > kMaxDepth) return absl::InvalidArgumentError("JSON nested too deeply");
  switch (e.type()) {
    case simdjson::dom::element_type::NULL_VALUE:
      return Value::None();
    case simdjson::dom::element_type::BOOL:
      return Value::Bool(bool(e));
    case simdjson::dom::element_type::INT64:
      return Value::Int(int64_t(e));
    case simdjson::dom::element_type::UINT64: {
      const uint64_t u = uint64_t(e);
      return u <= uint64_t(INT64_MAX) ? Value::Int(static_cast<int64_t>(u))
                                      : Value::Float(static_cast<double>(u));
    }
    case simdjson::dom::element_type::DOUBLE:
      return Value::Float(double(e));
    case simdjson::dom::element_type::STRING:
      return Value::String(std::string(std::string_view(e)));
    case simdjson::dom::element_type::ARRAY: {
      jinja::Array a;
      for (element x : simdjson::dom::array(e)) {
        auto v = ToValue(x, depth + 1);
        if (!v.ok()) return v.status();
        a.push_back(*std::move(v));
      }
      return Value::MakeArray(std::move(a));
    }
    case simdjson::dom::element_type::OBJECT: {
      jinja::Object o;
      for (auto [k, x] : simdjson::dom::object(e)) {
        auto v = ToValue(x, depth + 1);
        if (!v.ok()) return v.status();
        // A repeated key keeps its first position and its last value, as Python's json does.
        bool found = false;
        for (auto& [ok, ov] : o) {
          if (ok == k) {
            ov = *v;
            found = true;
          }
        }
        if (!found) o.emplace_back(std::string(k), *std::move(v));
      }
      return Value::MakeObject(std::move(o));
    }
  }
  return absl::InvalidArgumentError("unknown JSON type");
}

absl::Status Bad(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// vLLM's _parse_chat_message_content (+ _postprocess_messages for tool-call arguments).
absl::StatusOr<Value> NormalizeMessage(const Value& m, size_t index, bool openai) {
  const std::string where = common::StrCat("messages[", index, "]");
  if (!m.is_object()) return Bad(where + " is not an object");
  const Value role = m.Get("role");
  if (!role.is_string()) return Bad(where + ".role is not a string");
  const std::string& r = role.str();
  const Value content = m.Get("content");
  // Strings (string format) or {"type": "text", "text"} (openai format). A string Value is
  // immutable and shares its payload: a message's text is not copied (a whole conversation was
  // copied three times a turn).
  jinja::Array texts;
  auto add_text = [&](const Value& s) {
    if (openai) {
      texts.push_back(Value::MakeObject({{"type", Value::String("text")}, {"text", s}}));
    } else {
      texts.push_back(s);
    }
  };
  if (content.is_string()) {
    add_text(content);
  } else if (content.is_array()) {
    for (const Value& part : content.array()) {
      if (part.is_string()) {
        add_text(part);
        continue;
      }
      if (!part.is_object()) return Bad(where + ".content has a part that is not an object");
      const Value type = part.Get("type");
      const std::string t = type.is_string() ? type.str() : "";
      const char* key = t == "text" || t == "input_text" || t == "output_text" ? "text"
                        : t == "refusal"                                       ? "refusal"
                        : t == "thinking"                                      ? "thinking"
                                                                               : nullptr;
      if (key == nullptr) {
        return Bad(common::StrCat(where, ".content part of type '", t,
                                  "' is not text (multimodal prompts are not tokenised here)"));
      }
      const Value text = part.Get(key);
      if (text.is_none() || text.is_undefined()) continue;  // vLLM skips empty text parts
      if (!text.is_string()) return Bad(where + ".content part text is not a string");
      add_text(text);
    }
  } else if (!content.is_none() && !content.is_undefined()) {
    return Bad(where + ".content is neither a string, a list nor null");
  }
  Value out = Value::MakeObject();
  out.Set("role", role);
  if (openai) {
    out.Set("content", Value::MakeArray(std::move(texts)));
  } else if (texts.size() == 1) {
    out.Set("content", texts[0]);
  } else {
    std::string joined;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (i > 0) joined += "\n";
      joined += texts[i].str();
    }
    out.Set("content", Value::String(std::move(joined)));
  }
  if (r == "assistant") {
    const Value calls = m.Get("tool_calls");
    if (calls.is_array() && !calls.array().empty()) {
      jinja::Array parsed;
      for (const Value& call : calls.array()) {
        if (!call.is_object()) return Bad(where + ".tool_calls has an entry that is not an object");
        // Copies: the request's values stay as sent.
        Value c = Value::MakeObject(call.object());
        Value fn = c.Get("function");
        if (fn.is_object()) {
          Value f = Value::MakeObject(fn.object());
          const Value args = f.Get("arguments");
          if (args.is_string()) {
            simdjson::dom::parser parser;
            element doc;
            Value parsed_args = Value::MakeObject();
            if (parser.parse(args.str()).get(doc) == simdjson::SUCCESS) {
              auto v = ToValue(doc, 0);
              if (v.ok()) parsed_args = *std::move(v);
            }
            f.Set("arguments", parsed_args);
          } else if (!args.is_array() && !args.is_object()) {
            f.Set("arguments", Value::MakeObject());
          }
          c.Set("function", f);
        }
        parsed.push_back(std::move(c));
      }
      out.Set("tool_calls", Value::MakeArray(std::move(parsed)));
    } else if (calls.is_array()) {
      // An empty list is dropped: the template takes its plain assistant path.
    }
    const Value reasoning = m.Get("reasoning");
    if (!reasoning.is_undefined() && !reasoning.is_none()) {
      out.Set("reasoning", reasoning);
      out.Set("reasoning_content", reasoning);
    }
  } else if (r == "tool") {
    const Value id = m.Get("tool_call_id");
    if (!id.is_undefined()) out.Set("tool_call_id", id);
    if (openai) {  // tool results are plain strings whatever the format
      std::string joined;
      const Value c = out.Get("content");
      for (size_t i = 0; i < c.array().size(); ++i) {
        if (i > 0) joined += "\n";
        joined += c.array()[i].Get("text").str();
      }
      out.Set("content", Value::String(std::move(joined)));
    }
  }
  const Value name = m.Get("name");
  if (name.is_string()) out.Set("name", name);
  if (r == "developer") {
    const Value tools = m.Get("tools");
    out.Set("tools", tools.is_undefined() ? Value::None() : tools);
  }
  return out;
}

// ChatCompletionToolsParam.model_dump(): type, then function {name, description, parameters,
// extras}, then the tool's extras.
absl::StatusOr<Value> NormalizeTool(const Value& t, size_t index) {
  const std::string where = common::StrCat("tools[", index, "]");
  if (!t.is_object()) return Bad(where + " is not an object");
  const Value fn = t.Get("function");
  if (!fn.is_object() || !fn.Get("name").is_string()) {
    return Bad(where + ".function.name is missing");
  }
  Value f = Value::MakeObject();
  f.Set("name", fn.Get("name"));
  for (const char* key : {"description", "parameters"}) {
    const Value v = fn.Get(key);
    f.Set(key, v.is_undefined() ? Value::None() : v);
  }
  for (const auto& [k, v] : fn.object()) {
    if (k != "name" && k != "description" && k != "parameters") f.Set(k, v);
  }
  Value out = Value::MakeObject();
  const Value type = t.Get("type");
  out.Set("type", type.is_undefined() ? Value::String("function") : type);
  out.Set("function", f);
  for (const auto& [k, v] : t.object()) {
    if (k != "type" && k != "function") out.Set(k, v);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source) {
  auto t = jinja::Template::Parse(source);
  if (!t.ok())
    return absl::InvalidArgumentError(common::StrCat("chat template: ", t.status().message()));
  std::unique_ptr<ChatTemplate> out(new ChatTemplate());
  out->openai_content_ = (*t)->IteratesContent();
  out->template_ = *std::move(t);
  return out;
}

// What the template reads of a request.
struct ChatTemplate::Request {
  jinja::Array conversation;
  jinja::KnownHashes hashes;  // of the messages that came from the cache
  Value tools = Value::None();
  Value kwargs;     // Undefined when absent
  Value documents;  // Undefined when absent
  bool continue_final = false;
  bool add_generation = true;
  bool add_special = false;
};

// The whole body through a JSON tree: the reference every other read must equal, and the one
// whose errors a client sees.
absl::Status ChatTemplate::ReadWhole(std::string_view body, bool openai, Request* r) {
  thread_local simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc); err != simdjson::SUCCESS) {
    return Bad(common::StrCat("the body is not valid JSON (", simdjson::error_message(err), ")"));
  }
  if (!doc.is_object()) return Bad("the body is not a JSON object");
  auto field = [&](const char* key) -> absl::StatusOr<Value> {
    element e;
    if (doc[key].get(e) != simdjson::SUCCESS) return Value();
    return ToValue(e, 0);
  };
  auto messages = field("messages");
  if (!messages.ok()) return messages.status();
  if (!messages->is_array()) return Bad("the body has no \"messages\" list");
  for (size_t i = 0; i < messages->array().size(); ++i) {
    auto m = NormalizeMessage(messages->array()[i], i, openai);
    if (!m.ok()) return m.status();
    r->conversation.push_back(*std::move(m));
  }
  auto tools = field("tools");
  if (!tools.ok()) return tools.status();
  if (tools->is_array()) {
    jinja::Array list;
    for (size_t i = 0; i < tools->array().size(); ++i) {
      auto t = NormalizeTool(tools->array()[i], i);
      if (!t.ok()) return t.status();
      list.push_back(*std::move(t));
    }
    r->tools = Value::MakeArray(std::move(list));
  }
  auto flag = [&](const char* key, bool dflt) {
    bool b;
    return doc[key].get(b) == simdjson::SUCCESS ? b : dflt;
  };
  r->continue_final = flag("continue_final_message", false);
  r->add_generation = flag("add_generation_prompt", !r->continue_final);
  r->add_special = flag("add_special_tokens", false);
  auto kwargs = field("chat_template_kwargs");
  if (!kwargs.ok()) return kwargs.status();
  r->kwargs = *kwargs;
  auto documents = field("documents");
  if (!documents.ok()) return documents.status();
  r->documents = *documents;
  return absl::OkStatus();
}

namespace {

// A list or an object given as raw JSON, as a Value; false when it is not valid.
bool RawToValue(std::string_view raw, Value* out) {
  thread_local simdjson::dom::parser parser;
  element e;
  if (parser.parse(raw.data(), raw.size()).get(e) != simdjson::SUCCESS) return false;
  auto v = ToValue(e, 0);
  if (!v.ok()) return false;
  *out = *std::move(v);
  return true;
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A message's bytes without the whitespace around them: the message cache's key, the same
// whichever way the message was found.
std::string_view TrimJson(std::string_view s) {
  while (!s.empty() && IsJsonSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsJsonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The messages `layout` places in `body`, each an object's bytes; false when it does not fit.
bool MessagesAt(std::string_view body, const ChatLayout& layout,
                std::vector<std::string_view>* raws) {
  raws->clear();
  size_t from = layout.begin;
  for (uint32_t end : layout.ends) {
    if (end < from || end >= body.size()) return false;
    const std::string_view m = TrimJson(body.substr(from, end - from));
    if (m.size() < 2 || m.front() != '{' || m.back() != '}') return false;
    raws->push_back(m);
    from = size_t{end} + 1;
  }
  return body[layout.ends.back()] == ']';
}

}  // namespace

bool ChatTemplate::ReadMessages(absl::Span<const std::string_view> raws, Request* r) const {
  thread_local std::vector<jinja::ValueHash> keys;
  thread_local std::vector<size_t> missing;
  keys.clear();
  missing.clear();
  for (std::string_view raw : raws) {
    const XXH128_hash_t h = XXH3_128bits(raw.data(), raw.size());
    keys.push_back({h.low64, h.high64});
  }
  r->conversation.resize(raws.size());
  r->hashes.reserve(raws.size());
  {
    common::MutexLock lock(&mu_);  // once for the whole history
    for (size_t i = 0; i < raws.size(); ++i) {
      if (const CachedMessage* c = messages_.Find(keys[i])) {
        r->conversation[i] = c->value;
        r->hashes[&c->value.object()] = c->hash;
      } else {
        missing.push_back(i);
      }
    }
    message_stats_.hits += raws.size() - missing.size();
  }
  std::vector<CachedMessage> parsed;
  parsed.reserve(missing.size());
  for (size_t i : missing) {
    Value v;
    if (!RawToValue(raws[i], &v)) return false;
    auto m = NormalizeMessage(v, i, openai_content_);
    if (!m.ok()) return false;
    CachedMessage c{*std::move(m), {}};
    c.hash = jinja::HashValue(c.value);
    r->conversation[i] = c.value;
    r->hashes[&c.value.object()] = c.hash;
    parsed.push_back(std::move(c));
  }
  if (parsed.empty()) return true;
  common::MutexLock lock(&mu_);
  message_stats_.misses += parsed.size();
  for (size_t k = 0; k < parsed.size(); ++k) {
    messages_.Put(keys[missing[k]], std::move(parsed[k]), 2 * raws[missing[k]].size() + 256);
  }
  return true;
}

bool ChatTemplate::ReadReusing(std::string_view body, const ChatLayout* layout, Request* r) const {
  namespace od = simdjson::ondemand;
  thread_local od::parser parser;
  thread_local std::string padded;
  thread_local std::vector<std::string_view> raws;
  // With a layout the fields are read from the body without its messages' bytes:
  // body[0, begin) then body[ends.back(), end), whose `]` lands at `cut`.
  size_t cut = std::string_view::npos;
  if (layout != nullptr && !layout->ends.empty() && MessagesAt(body, *layout, &raws)) {
    cut = layout->begin;
    padded.assign(body.data(), cut);
    padded.append(body.substr(layout->ends.back()));
  } else {
    padded.assign(body.data(), body.size());
  }
  const size_t length = padded.size();
  padded.resize(length + simdjson::SIMDJSON_PADDING);
  od::document doc;
  od::object top;
  if (parser.iterate(padded.data(), length, padded.size()).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(top) != simdjson::SUCCESS) {
    return false;
  }
  // The first occurrence of a key counts, as in the full read (a JSON tree's lookup).
  bool messages = false, tools = false, kwargs = false, documents = false;
  struct Flag {
    bool seen = false;
    std::optional<bool> value;
  } continue_final, add_generation, add_special;
  for (auto field : top) {
    std::string_view key;
    od::value v;
    od::json_type type;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS ||
        field.value().get(v) != simdjson::SUCCESS || v.type().get(type) != simdjson::SUCCESS) {
      return false;
    }
    auto raw = [&](std::string_view* out) {
      if (type == od::json_type::array) {
        od::array a;
        return v.get_array().get(a) == simdjson::SUCCESS &&
               a.raw_json().get(*out) == simdjson::SUCCESS;
      }
      od::object o;
      return v.get_object().get(o) == simdjson::SUCCESS &&
             o.raw_json().get(*out) == simdjson::SUCCESS;
    };
    auto flag = [&](Flag* f) {  // a flag that is not a bool keeps its default
      if (f->seen) return;
      f->seen = true;
      bool b = false;
      if (type == od::json_type::boolean && v.get_bool().get(b) == simdjson::SUCCESS) f->value = b;
    };
    if (key == "messages" && !messages) {
      messages = true;
      od::array list;
      if (type != od::json_type::array || v.get_array().get(list) != simdjson::SUCCESS)
        return false;
      if (cut != std::string_view::npos) {
        // The layout's array, and no other: emptied by the cut, its `]` where the cut put it.
        std::string_view bytes;
        if (list.raw_json().get(bytes) != simdjson::SUCCESS ||
            bytes.data() + TrimJson(bytes).size() - 1 != padded.data() + cut ||
            TrimJson(bytes.substr(1)) != "]") {
          return false;
        }
      } else {
        raws.clear();
        for (auto item : list) {
          od::object o;
          std::string_view bytes;
          if (item.get_object().get(o) != simdjson::SUCCESS ||
              o.raw_json().get(bytes) != simdjson::SUCCESS) {
            return false;
          }
          raws.push_back(TrimJson(bytes));
        }
      }
      if (!ReadMessages(raws, r)) return false;
      if (cut != std::string_view::npos) {
        common::MutexLock lock(&mu_);
        ++message_stats_.layouts;
      }
    } else if (key == "tools" && !tools) {
      tools = true;
      if (type == od::json_type::null) continue;
      std::string_view bytes;
      Value list;
      if (type != od::json_type::array || !raw(&bytes) || !RawToValue(bytes, &list)) return false;
      jinja::Array normalized;
      for (size_t i = 0; i < list.array().size(); ++i) {
        auto t = NormalizeTool(list.array()[i], i);
        if (!t.ok()) return false;
        normalized.push_back(*std::move(t));
      }
      r->tools = Value::MakeArray(std::move(normalized));
    } else if ((key == "chat_template_kwargs" && !kwargs) || (key == "documents" && !documents)) {
      Value* out = key == "documents" ? &r->documents : &r->kwargs;
      (key == "documents" ? documents : kwargs) = true;
      std::string_view bytes;
      if (type == od::json_type::null) {
        *out = Value::None();
      } else if (type != od::json_type::array && type != od::json_type::object) {
        return false;  // a scalar: rare, read in full
      } else if (!raw(&bytes) || !RawToValue(bytes, out)) {
        return false;
      }
    } else if (key == "continue_final_message") {
      flag(&continue_final);
    } else if (key == "add_generation_prompt") {
      flag(&add_generation);
    } else if (key == "add_special_tokens") {
      flag(&add_special);
    }
  }
  if (!messages) return false;
  r->continue_final = continue_final.value.value_or(false);
  r->add_generation = add_generation.value.value_or(!r->continue_final);
  r->add_special = add_special.value.value_or(false);
  return true;
}

ChatTemplate::MessageStats ChatTemplate::message_stats() const {
  common::MutexLock lock(&mu_);
  MessageStats s = message_stats_;
  s.bytes = messages_.bytes();
  return s;
}

absl::Status ChatTemplate::RenderRequest(std::string_view body, const SpecialTokensMap& tokens,
                                         std::string* out, bool* add_special_tokens, bool reuse,
                                         const ChatLayout* layout) const {
  Request r;
  if (!reuse || !ReadReusing(body, layout, &r)) {
    r = Request{};
    if (absl::Status s = ReadWhole(body, openai_content_, &r); !s.ok()) return s;
  }
  const jinja::Array& conversation = r.conversation;
  *add_special_tokens = r.add_special;

  // transformers: {**special_tokens_map, **kwargs}, then the named arguments.
  Value ctx = Value::MakeObject();
  for (const auto& [k, v] : tokens.named) ctx.Set(k, Value::String(v));
  if (!tokens.additional.empty()) {
    jinja::Array extra;
    for (const auto& s : tokens.additional) extra.push_back(Value::String(s));
    ctx.Set("additional_special_tokens", Value::MakeArray(std::move(extra)));
  }
  if (r.kwargs.is_object()) {
    for (const auto& [k, v] : r.kwargs.object()) ctx.Set(k, v);
  }
  ctx.Set("messages", Value::MakeArray(conversation));
  ctx.Set("tools", r.tools);
  ctx.Set("documents", r.documents.is_undefined() ? Value::None() : r.documents);
  ctx.Set("add_generation_prompt", Value::Bool(r.add_generation));
  if (absl::Status s = template_->Render(ctx, out, reuse, r.hashes.empty() ? nullptr : &r.hashes);
      !s.ok()) {
    return absl::InvalidArgumentError(common::StrCat("chat template: ", s.message()));
  }
  if (r.continue_final && !conversation.empty()) {
    // transformers cuts the render after the final message's content.
    Value last = conversation.back().Get("content");
    if (last.is_array() && !last.array().empty()) last = last.array().back().Get("text");
    if (!last.is_string()) return Bad("continue_final_message: the final message has no text");
    std::string final = last.str();
    size_t at = out->rfind(final);
    if (at == std::string::npos) {
      const std::string stripped = jinja::ToStr(jinja::CallFilter("trim", last, {}));
      at = out->rfind(stripped);
      if (at == std::string::npos) return Bad("continue_final_message: content not in the render");
      final = stripped;
    }
    out->resize(at + final.size());
  }
  return absl::OkStatus();
}

}  // namespace kvgate::tokenizer
