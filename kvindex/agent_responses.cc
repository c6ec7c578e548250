#include "kvindex/canonicalize_impl.h"
#include "kvindex/py_json.h"
#include "xxhash.h"

// OpenAI Responses' input as vLLM converts it to chat (openai/responses/utils.py at 01ca842d,
// construct_input_messages).
namespace kvgate::kvindex {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

namespace {

bool IsAssistant(const agent::Message& m) { return m.role == "assistant"; }

}  // namespace

absl::Status Canonicalizer::Impl::ResponsesInput(od::value v, Recorder* rec) {
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "input"));
  if (t == od::json_type::string) {
    agent::Message m;
    m.role = "user";
    m.content = agent::Message::Content::kString;
    KVINDEX_JSON_TRY(GetText(v, &m.text), "input");
    conv_.messages.push_back(m);
    return absl::OkStatus();
  }
  od::array items;
  KVINDEX_JSON_TRY(v.get_array().get(items), "input");
  if (rec != nullptr) rec->Begin(nullptr);
  for (auto element : items) {
    od::value item;
    KVINDEX_JSON_TRY(element.get(item), "input[]");
    KVINDEX_STATUS_TRY(ResponsesItem(item));
    if (rec != nullptr) {
      // The next item may still change an assistant message (its calls, text or reasoning);
      // after any other, every converted message is final.
      const bool resumable = conv_.messages.empty() || !IsAssistant(conv_.messages.back());
      rec->MessageEnd(conv_.messages.size(), resumable ? ReusablePrefix::kResumable : 0);
    }
  }
  return absl::OkStatus();
}

// Content parts of an input message (or of a function_call_output) into parts_, in order;
// `*first_text` is the first part's text ("" when it has none).
absl::Status Canonicalizer::Impl::ResponsesParts(od::array parts, std::string_view* first_text) {
  bool first = true;
  for (auto element : parts) {
    od::object part;
    if (element.get_object().get(part)) {
      return absl::InvalidArgumentError("content parts must be objects");
    }
    std::string_view type, text, url;
    bool has_type = false, has_text = false, has_url = false;
    uint64_t payload = 0;
    for (auto field : part) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "content part key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      od::json_type t = od::json_type::null;
      KVINDEX_STATUS_TRY(TypeOf(fv, &t, key));
      if (key == "type") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
      } else if ((key == "text" || key == "refusal") && t == od::json_type::string) {
        KVINDEX_JSON_TRY(GetText(fv, &text), key);
        has_text = true;
      } else if (key == "image_url" && t == od::json_type::string) {
        KVINDEX_JSON_TRY(fv.get_string().get(url), key);
        has_url = true;
      } else if ((key == "file_id" || key == "file_data" || key == "file_url") &&
                 t == od::json_type::string) {
        std::string_view s;
        KVINDEX_JSON_TRY(fv.get_string().get(s), key);
        payload = XXH3_64bits_withSeed(s.data(), s.size(), payload);
      } else {
        KVINDEX_STATUS_TRY(Validate(fv, 5));
      }
    }
    if (!has_type) return absl::InvalidArgumentError("content part without a 'type'");
    agent::Part p;
    if (has_text) {
      p.text = text;  // input_text, output_text, refusal, reasoning_text, summary_text
    } else if (type == "input_image" && has_url) {
      p.kind = agent::Part::Kind::kImage;
      p.text = url;
    } else {
      p.kind = agent::Part::Kind::kOther;
      p.text = conv_.OtherType(type);
      p.hash = payload;
    }
    if (first) *first_text = has_text ? text : std::string_view("");
    first = false;
    parts_.push_back(p);
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::ResponsesItem(od::value v) {
  od::object item;
  if (v.get_object().get(item)) return absl::InvalidArgumentError("input items must be objects");
  std::string_view type, role, text, call_id, name, arguments, ns, first_text;
  bool has_type = false, has_role = false, has_call_id = false, has_name = false, has_ns = false,
       encrypted = false;
  enum class Content { kAbsent, kString, kParts } content = Content::kAbsent;
  std::string_view summary_text;
  parts_.clear();
  for (auto field : item) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "input item key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    od::json_type t = od::json_type::null;
    KVINDEX_STATUS_TRY(TypeOf(fv, &t, key));
    if (key == "type") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
    } else if (key == "role") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &role, &has_role));
    } else if (key == "call_id") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &call_id, &has_call_id));
    } else if (key == "name") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &name, &has_name));
    } else if (key == "namespace") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &ns, &has_ns));
    } else if ((key == "arguments" || key == "input") && t == od::json_type::string) {
      KVINDEX_JSON_TRY(GetText(fv, &arguments), key);
    } else if (key == "arguments" || key == "input") {
      std::string args;
      KVINDEX_STATUS_TRY(py_json::Dumps(fv, &args, 2, options_.max_nesting_depth));
      arguments = conv_.Own(std::move(args));
    } else if ((key == "content" || key == "output") && t == od::json_type::string) {
      KVINDEX_JSON_TRY(GetText(fv, &text), key);
      content = Content::kString;
    } else if ((key == "content" || key == "output") && t == od::json_type::array) {
      od::array parts;
      KVINDEX_JSON_TRY(fv.get_array().get(parts), key);
      parts_.clear();
      KVINDEX_STATUS_TRY(ResponsesParts(parts, &first_text));
      content = Content::kParts;
    } else if (key == "summary" && t == od::json_type::array) {
      // A reasoning item's summary: its first text, when the item has no content.
      od::array parts;
      KVINDEX_JSON_TRY(fv.get_array().get(parts), key);
      const size_t before = parts_.size();
      KVINDEX_STATUS_TRY(ResponsesParts(parts, &summary_text));
      parts_.resize(before);
    } else if (key == "encrypted_content") {
      encrypted = t != od::json_type::null;
      KVINDEX_STATUS_TRY(Validate(fv, 3));
    } else {
      KVINDEX_STATUS_TRY(Validate(fv, 3));
    }
  }
  if (!has_type) type = "message";  // an EasyInputMessage: {role, content}
  agent::Message* last = conv_.messages.empty() ? nullptr : &conv_.messages.back();
  const auto string_content = [&](agent::Message& m) {
    if (content == Content::kString) {
      m.content = agent::Message::Content::kString;
      m.text = text;
    } else if (content == Content::kParts) {
      m.content = agent::Message::Content::kParts;
      m.parts_begin = static_cast<uint32_t>(conv_.parts.size());
      conv_.parts.insert(conv_.parts.end(), parts_.begin(), parts_.end());
      m.parts_end = static_cast<uint32_t>(conv_.parts.size());
    }
  };
  if (type == "message") {
    if (!has_role) return absl::InvalidArgumentError("message item without a 'role'");
    if (role == "assistant") {
      // Only its first part's text, merged into an assistant message that has no content yet.
      const std::string_view t = content == Content::kString  ? text
                                 : content == Content::kParts ? first_text
                                                              : std::string_view("");
      if (last != nullptr && IsAssistant(*last) &&
          last->content == agent::Message::Content::kAbsent) {
        last->content = agent::Message::Content::kString;
        last->text = t;
      } else {
        agent::Message m;
        m.role = role;
        m.content = agent::Message::Content::kString;
        m.text = t;
        conv_.messages.push_back(m);
      }
      return absl::OkStatus();
    }
    agent::Message m;
    m.role = role;  // user, system and developer pass unchanged
    string_content(m);
    conv_.messages.push_back(m);
  } else if (type == "function_call" || type == "custom_tool_call") {
    agent::Call call;
    call.id = call_id;
    call.name = has_ns && !ns.empty() ? conv_.Own(common::StrCat(ns, "__", name)) : name;
    call.arguments = arguments;
    conv_.calls.push_back(call);
    if (last != nullptr && IsAssistant(*last)) {
      // Calls join only the last message, so its range ends where the new call begins.
      if (last->calls_end == last->calls_begin) {
        last->calls_begin = static_cast<uint32_t>(conv_.calls.size() - 1);
      }
      last->calls_end = static_cast<uint32_t>(conv_.calls.size());
    } else {
      agent::Message m;
      m.role = "assistant";
      m.calls_begin = static_cast<uint32_t>(conv_.calls.size() - 1);
      m.calls_end = static_cast<uint32_t>(conv_.calls.size());
      conv_.messages.push_back(m);
    }
  } else if (type == "function_call_output" || type == "custom_tool_call_output") {
    agent::Message m;
    m.role = "tool";
    string_content(m);
    m.has_tool_call_id = true;
    m.tool_call_id = call_id;
    conv_.messages.push_back(m);
  } else if (type == "reasoning") {
    if (encrypted) conv_.Unsupported("Encrypted content is not supported.");
    const std::string_view t = content == Content::kParts ? first_text : summary_text;
    if (last != nullptr && IsAssistant(*last) && !last->has_reasoning) {
      last->has_reasoning = true;
      last->reasoning = t;
    } else {
      agent::Message m;
      m.role = "assistant";
      m.has_reasoning = true;
      m.reasoning = t;
      m.calls_begin = m.calls_end = static_cast<uint32_t>(conv_.calls.size());
      conv_.messages.push_back(m);
    }
  } else {
    conv_.Unsupported(common::StrCat("input items of type '", type, "' are not supported"));
  }
  return absl::OkStatus();
}

// Responses tools: a function tool's members (all but "type") become the chat tool's
// "function"; built-in tools (web_search, ...) need vLLM's tool server and are left out.
absl::Status Canonicalizer::Impl::ResponsesTools(od::value v) {
  od::array tools;
  bool present = false;
  KVINDEX_STATUS_TRY(ToolsArray(v, &tools, &present));
  if (!present) return absl::OkStatus();
  for (auto element : tools) {
    od::object tool;
    if (element.get_object().get(tool)) {
      return absl::InvalidArgumentError("each tool must be an object");
    }
    agent::Tool out;
    std::string_view type;
    bool has_type = false;
    for (auto field : tool) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "tool key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      if (key == "type") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
        continue;
      }
      agent::Member m;
      m.key = key;
      KVINDEX_STATUS_TRY(Render(fv, &m.value));
      out.members.push_back(std::move(m));
    }
    if (type == "function") conv_.tools.push_back(std::move(out));
  }
  conv_.has_tools = !conv_.tools.empty();
  return absl::OkStatus();
}

}  // namespace kvgate::kvindex
