#include "kvindex/agent_chat.h"

#include <algorithm>
#include <utility>

#include "kvindex/canonicalize_impl.h"
#include "kvindex/py_json.h"
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include "xxhash.h"

// The two writers of a converted conversation (the canonical chat stream and chat JSON) and the
// converter. The walk is in agent_messages.cc and agent_responses.cc; docs/agent-apis.md lists
// each rule of the conversion and what is not imitated.
namespace kvgate::kvindex {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

namespace {

void Field(char tag, std::string_view content, std::string* out) {
  out->push_back(canonical::kField);
  out->push_back(tag);
  AppendEscaped(content, out);
}

// JSON string escapes for the chat body (UTF-8 kept).
void AppendJsonEscaped(std::string_view s, std::string* out) {
  py_json::AppendEscaped(s, out, /*ascii=*/false);
}

void AppendJsonText(std::string_view s, std::string* out) {
  out->push_back('"');
  AppendJsonEscaped(s, out);
  out->push_back('"');
}

// XXH3 of an image part's URL without building a data URL.
uint64_t ImageHash(const agent::Part& p) {
  if (!p.data_url) return XXH3_64bits(p.text.data(), p.text.size());
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, "data:", 5);
  XXH3_64bits_update(&state, p.media_type.data(), p.media_type.size());
  XXH3_64bits_update(&state, ";base64,", 8);
  XXH3_64bits_update(&state, p.data.data(), p.data.size());
  return XXH3_64bits_digest(&state);
}

std::string Hex(uint64_t h) {
  std::string s;
  AppendHex(h, &s);
  return s;
}

// Where the chat body's other part keeps its payload: {"type": T, T: "<hex of the hash>"}.
uint64_t OtherPayloadHash(const agent::Part& p) {
  const std::string hex = Hex(p.hash);
  return XXH3_64bits(hex.data(), hex.size());
}

}  // namespace

namespace agent {

void AppendCanonicalTools(const Conversation& conv, std::string* out) {
  if (!conv.has_tools) return;
  if (!conv.canonical_tools.empty()) {
    out->append(conv.canonical_tools);
    return;
  }
  // Canonical JSON of [{"type": "function", "function": {...}}, ...]: keys sorted.
  out->push_back(canonical::kMessageBegin);
  out->push_back('x');
  out->push_back(canonical::kArrayBegin);
  std::vector<const Member*> sorted;
  for (const Tool& tool : conv.tools) {
    sorted.clear();
    for (const Member& m : tool.members) sorted.push_back(&m);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Member* a, const Member* b) { return a->key < b->key; });
    out->push_back(canonical::kObjectBegin);
    out->append("function");
    out->push_back(canonical::kStringEnd);
    out->push_back(canonical::kObjectBegin);
    for (const Member* m : sorted) {
      AppendEscaped(m->key, out);
      out->push_back(canonical::kStringEnd);
      out->append(m->value);
    }
    out->push_back(canonical::kObjectEnd);
    out->append("type");
    out->push_back(canonical::kStringEnd);
    out->append("sfunction");
    out->push_back(canonical::kStringEnd);
    out->push_back(canonical::kObjectEnd);
  }
  out->push_back(canonical::kArrayEnd);
  out->push_back(canonical::kMessageEnd);
}

void AppendCanonicalHeader(const Conversation& conv, std::string* out) {
  size_t size = conv.system.size() + conv.canonical_tools.size() + 64;
  for (const Message& m : conv.messages) size += m.text.size() + 16;
  out->reserve(out->size() + size);
  AppendCanonicalTools(conv, out);
  if (!conv.system.empty()) {
    Message system;
    system.role = "system";
    system.content = Message::Content::kString;
    system.text = conv.system;
    AppendCanonicalMessage(conv, system, out);
  }
}

void AppendCanonicalMessage(const Conversation& conv, const Message& m, std::string* out) {
  out->push_back(canonical::kMessageBegin);
  out->push_back('r');
  AppendEscaped(m.role, out);
  if (m.content == Message::Content::kString) {
    Field(kTagText, m.text, out);
  } else if (m.content == Message::Content::kParts) {
    for (uint32_t i = m.parts_begin; i < m.parts_end; ++i) {
      const Part& p = conv.parts[i];
      if (p.kind == Part::Kind::kText) {
        Field(kTagText, p.text, out);
      } else if (p.kind == Part::Kind::kImage) {
        out->push_back(canonical::kField);
        out->push_back(kTagImage);
        AppendHex(ImageHash(p), out);
      } else {
        Field(kTagOtherPart, p.text, out);
        out->push_back(canonical::kField);
        out->push_back(kTagPartHash);
        AppendHex(OtherPayloadHash(p), out);
      }
    }
  }
  for (uint32_t i = m.calls_begin; i < m.calls_end; ++i) {
    const Call& c = conv.calls[i];
    Field(kTagToolCallId, c.id, out);
    Field(kTagFunctionName, c.name, out);
    Field(kTagArguments, c.arguments, out);
  }
  if (m.has_tool_call_id) Field(kTagToolResultId, m.tool_call_id, out);
  out->push_back(canonical::kMessageEnd);
}

void AppendCanonical(const Conversation& conv, std::string* out) {
  AppendCanonicalHeader(conv, out);
  for (const Message& m : conv.messages) AppendCanonicalMessage(conv, m, out);
}

void AppendMessageJson(const Conversation& conv, const Message& m, std::string* out) {
  out->append("{\"role\":");
  AppendJsonText(m.role, out);
  if (m.content == Message::Content::kString) {
    out->append(",\"content\":");
    AppendJsonText(m.text, out);
  } else if (m.content == Message::Content::kParts) {
    out->append(",\"content\":[");
    for (uint32_t i = m.parts_begin; i < m.parts_end; ++i) {
      const Part& p = conv.parts[i];
      if (i > m.parts_begin) out->push_back(',');
      if (p.kind == Part::Kind::kText) {
        out->append("{\"type\":\"text\",\"text\":");
        AppendJsonText(p.text, out);
      } else if (p.kind == Part::Kind::kImage) {
        out->append("{\"type\":\"image_url\",\"image_url\":{\"url\":");
        if (p.data_url) {
          out->append("\"data:");
          AppendJsonEscaped(p.media_type, out);
          out->append(";base64,");
          AppendJsonEscaped(p.data, out);
          out->push_back('"');
        } else {
          AppendJsonText(p.text, out);
        }
        out->push_back('}');
      } else {
        out->append("{\"type\":");
        AppendJsonText(p.text, out);
        out->push_back(',');
        AppendJsonText(p.text, out);
        out->append(":\"");
        AppendHex(p.hash, out);
        out->push_back('"');
      }
      out->push_back('}');
    }
    out->push_back(']');
  }
  if (m.calls_end > m.calls_begin) {
    out->append(",\"tool_calls\":[");
    for (uint32_t i = m.calls_begin; i < m.calls_end; ++i) {
      const Call& c = conv.calls[i];
      if (i > m.calls_begin) out->push_back(',');
      out->append("{\"id\":");
      AppendJsonText(c.id, out);
      out->append(",\"type\":\"function\",\"function\":{\"name\":");
      AppendJsonText(c.name, out);
      out->append(",\"arguments\":");
      AppendJsonText(c.arguments, out);
      out->append("}}");
    }
    out->push_back(']');
  }
  if (m.has_tool_call_id) {
    out->append(",\"tool_call_id\":");
    AppendJsonText(m.tool_call_id, out);
  }
  if (m.has_reasoning) {
    out->append(",\"reasoning\":");
    AppendJsonText(m.reasoning, out);
  }
  out->push_back('}');
}

void AppendToolsJson(const Conversation& conv, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < conv.tools.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append("{\"type\":\"function\",\"function\":{");
    const auto& members = conv.tools[i].members;
    for (size_t k = 0; k < members.size(); ++k) {
      if (k > 0) out->push_back(',');
      AppendJsonText(members[k].key, out);
      out->push_back(':');
      out->append(members[k].value);
    }
    out->append("}}");
  }
  out->push_back(']');
}

}  // namespace agent

// ---------------------------------------------------------------------------------------------

AgentChatConverter::AgentChatConverter(CanonicalizeOptions options)
    : impl_(std::make_unique<Canonicalizer::Impl>(options)) {
  impl_->set_json_mode(true);
}
AgentChatConverter::~AgentChatConverter() = default;

absl::Status AgentChatConverter::Convert(std::string_view body, ApiKind api, ConvertedChat* out) {
  if (api != ApiKind::kMessages && api != ApiKind::kResponses) {
    return absl::InvalidArgumentError("not an agent API");
  }
  CanonicalRequest request;
  KVINDEX_STATUS_TRY(impl_->Run(body, 0, api, true, &request));
  const agent::Conversation& conv = impl_->conversation();
  out->model = std::move(request.model);
  out->messages.clear();
  out->roles.clear();
  if (!conv.system.empty()) {
    out->roles.emplace_back("system");
    out->messages.emplace_back("{\"role\":\"system\",\"content\":");
    AppendJsonText(conv.system, &out->messages.back());
    out->messages.back().push_back('}');
  }
  for (const agent::Message& m : conv.messages) {
    out->roles.emplace_back(m.role);
    out->messages.emplace_back();
    agent::AppendMessageJson(conv, m, &out->messages.back());
  }
  out->tools.clear();
  if (conv.has_tools) agent::AppendToolsJson(conv, &out->tools);
  out->unsupported = conv.unsupported;
  return absl::OkStatus();
}

absl::Status AgentChatConverter::ConvertToChatBody(std::string_view body, ApiKind api,
                                                   std::string* out) {
  ConvertedChat chat;
  KVINDEX_STATUS_TRY(Convert(body, api, &chat));
  const std::string& kwargs = impl_->conversation().template_kwargs;
  *out = ChatBodyOf(chat.model, chat.messages, chat.tools,
                    kwargs.empty() ? std::string() : ",\"chat_template_kwargs\":" + kwargs);
  return absl::OkStatus();
}

std::string ChatBodyOf(std::string_view model, const std::vector<std::string>& messages,
                       std::string_view tools, std::string_view extra) {
  size_t size = model.size() + tools.size() + extra.size() + 64;
  for (const auto& m : messages) size += m.size() + 1;
  std::string body;
  body.reserve(size);
  body.append("{\"model\":");
  AppendJsonText(model, &body);
  body.append(",\"messages\":[");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) body.push_back(',');
    body.append(messages[i]);
  }
  body.push_back(']');
  if (!tools.empty()) {
    body.append(",\"tools\":");
    body.append(tools);
  }
  body.append(extra);
  body.push_back('}');
  return body;
}

std::string SessionIdOfUserId(std::string_view user_id) {
  if (!user_id.starts_with('{')) return std::string(user_id);
  thread_local od::parser parser;
  std::string padded(user_id);
  padded.reserve(padded.size() + simdjson::SIMDJSON_PADDING);
  od::document doc;
  std::string_view session;
  if (parser.iterate(padded.data(), padded.size(), padded.capacity()).get(doc) ||
      doc["session_id"].get_string().get(session) || session.empty()) {
    return std::string(user_id);
  }
  return std::string(session);
}

}  // namespace kvgate::kvindex
