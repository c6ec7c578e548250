#include "tokenizer/chat_template.h"

#include <simdjson.h>

#include "common/strings.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/jinja_ast.h"

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

absl::Status ChatTemplate::RenderRequest(std::string_view body, const SpecialTokensMap& tokens,
                                         std::string* out, bool* add_special_tokens) const {
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
  jinja::Array conversation;
  for (size_t i = 0; i < messages->array().size(); ++i) {
    auto m = NormalizeMessage(messages->array()[i], i, openai_content_);
    if (!m.ok()) return m.status();
    conversation.push_back(*std::move(m));
  }
  auto tools = field("tools");
  if (!tools.ok()) return tools.status();
  Value tool_list = Value::None();
  if (tools->is_array()) {
    jinja::Array list;
    for (size_t i = 0; i < tools->array().size(); ++i) {
      auto t = NormalizeTool(tools->array()[i], i);
      if (!t.ok()) return t.status();
      list.push_back(*std::move(t));
    }
    tool_list = Value::MakeArray(std::move(list));
  }
  auto flag = [&](const char* key, bool dflt) {
    bool b;
    return doc[key].get(b) == simdjson::SUCCESS ? b : dflt;
  };
  const bool continue_final = flag("continue_final_message", false);
  const bool add_generation = flag("add_generation_prompt", !continue_final);
  *add_special_tokens = flag("add_special_tokens", false);

  // transformers: {**special_tokens_map, **kwargs}, then the named arguments.
  Value ctx = Value::MakeObject();
  for (const auto& [k, v] : tokens.named) ctx.Set(k, Value::String(v));
  if (!tokens.additional.empty()) {
    jinja::Array extra;
    for (const auto& s : tokens.additional) extra.push_back(Value::String(s));
    ctx.Set("additional_special_tokens", Value::MakeArray(std::move(extra)));
  }
  auto kwargs = field("chat_template_kwargs");
  if (!kwargs.ok()) return kwargs.status();
  if (kwargs->is_object()) {
    for (const auto& [k, v] : kwargs->object()) ctx.Set(k, v);
  }
  auto documents = field("documents");
  if (!documents.ok()) return documents.status();
  ctx.Set("messages", Value::MakeArray(conversation));
  ctx.Set("tools", tool_list);
  ctx.Set("documents", documents->is_undefined() ? Value::None() : *documents);
  ctx.Set("add_generation_prompt", Value::Bool(add_generation));
  if (absl::Status s = template_->Render(ctx, out); !s.ok()) {
    return absl::InvalidArgumentError(common::StrCat("chat template: ", s.message()));
  }
  if (continue_final && !conversation.empty()) {
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
