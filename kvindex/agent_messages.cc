#include <algorithm>
#include <utility>

#include "kvindex/canonicalize_impl.h"
#include "kvindex/py_json.h"
#include "xxhash.h"

// The walk over an agent API body: its top-level fields, then Anthropic Messages' conversation
// as vLLM converts it to chat (anthropic/serving.py, inline_system.py at a8c3bdb2). OpenAI
// Responses' conversation is in agent_responses.cc, the writers in agent_chat.cc.
namespace kvgate::kvindex {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

namespace {

constexpr std::string_view kBillingHeader = "x-anthropic-billing-header";

agent::Part TextPart(std::string_view text) {
  agent::Part p;
  p.text = text;
  return p;
}

}  // namespace

absl::Status Canonicalizer::Impl::Render(od::value v, std::string* out, bool default_object_type) {
  if (json_mode_) {
    return py_json::Dumps(v, out, 3, options_.max_nesting_depth, default_object_type,
                          /*json_safe=*/true);
  }
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "tool"));
  // At the depth chat's `tools` puts a function's members.
  if (!default_object_type || t != od::json_type::object) {
    return Json(v, out, 3, options_.max_nesting_depth);
  }
  // Canonical JSON of an object with "type": "object" added when it has no "type".
  od::object obj;
  KVINDEX_JSON_TRY(v.get_object().get(obj), "object");
  std::vector<std::pair<std::string_view, std::string>> entries;
  bool has_type = false;
  for (auto field : obj) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "object key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), "object value");
    std::string value;
    KVINDEX_STATUS_TRY(Json(fv, &value, 4, options_.max_nesting_depth));
    has_type = has_type || key == "type";
    entries.emplace_back(key, std::move(value));
  }
  if (!has_type) {
    entries.emplace_back("type", std::string("sobject") + canonical::kStringEnd);
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  out->push_back(canonical::kObjectBegin);
  for (const auto& [key, value] : entries) {
    AppendEscaped(key, out);
    out->push_back(canonical::kStringEnd);
    out->append(value);
  }
  out->push_back(canonical::kObjectEnd);
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::AgentRoot(od::object root, ApiKind api, bool build, Recorder* rec,
                                            CanonicalRequest* out) {
  conv_.Clear();
  const bool messages_api = api == ApiKind::kMessages;
  const std::string_view main_key = messages_api ? "messages" : "input";
  bool seen_main = false;
  // Tools after the conversation (a Responses body's after `input`) in a recording walk with
  // none before it: hashed (`late_hash`), and skipped while they hash as the reused turn's.
  bool late_record = false;
  bool late_skip = false;
  uint64_t late_hash = 0;
  agent::InlineSystems inline_systems;
  std::string_view system;                          // Messages: the top-level system prompt
  if (rec != nullptr && rec->restore != nullptr) {  // the fields before the conversation were cut
    rec->RestoreFields(out);
    (messages_api ? system : conv_.system) = rec->restore->system;
    conv_.has_tools = rec->restore->has_tools;
    conv_.canonical_tools = rec->restore->tools;
  }
  for (auto field : root) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "object key");
    od::value v;
    KVINDEX_JSON_TRY(field.value().get(v), key);
    od::json_type t = od::json_type::null;
    KVINDEX_STATUS_TRY(TypeOf(v, &t, key));
    if (key == "model") {
      std::string_view s;
      if (v.get_string().get(s)) return absl::InvalidArgumentError("'model' must be a string");
      out->model.assign(s);
    } else if (key == "stream") {
      if (t == od::json_type::boolean) {
        KVINDEX_JSON_TRY(v.get_bool().get(out->stream), key);
      } else if (t != od::json_type::null || !Validate(v, 1).ok()) {
        return absl::InvalidArgumentError("'stream' must be a boolean");
      }
    } else if (t == od::json_type::string &&
               (key == "cache_salt" || key == "user" || key == "prompt_cache_key" ||
                key == "previous_response_id" || key == "conversation")) {
      std::string_view s;
      KVINDEX_JSON_TRY(v.get_string().get(s), key);
      (key == "cache_salt"             ? out->cache_salt
       : key == "user"                 ? out->user
       : key == "prompt_cache_key"     ? out->prompt_cache_key
       : key == "previous_response_id" ? out->previous_response_id
                                       : out->conversation)
          .assign(s);
    } else if ((key == "metadata" || key == "conversation") && t == od::json_type::object) {
      // metadata.user_id (Claude Code's session) / conversation.id
      od::object obj;
      KVINDEX_JSON_TRY(v.get_object().get(obj), key);
      const std::string_view wanted = key == "metadata" ? "user_id" : "id";
      std::string* target = key == "metadata" ? &out->metadata_user_id : &out->conversation;
      for (auto member : obj) {
        std::string_view mkey;
        KVINDEX_JSON_TRY(member.unescaped_key().get(mkey), key);
        od::value mv;
        KVINDEX_JSON_TRY(member.value().get(mv), key);
        std::string_view s;
        if (mkey == wanted && !mv.get_string().get(s)) {
          target->assign(s);
        } else {
          KVINDEX_STATUS_TRY(Validate(mv, 2));
        }
      }
    } else if (key == "store" && t == od::json_type::boolean) {
      KVINDEX_JSON_TRY(v.get_bool().get(out->store), key);
    } else if (key == main_key) {
      if (seen_main) return absl::InvalidArgumentError(common::StrCat("duplicate '", key, "'"));
      seen_main = true;
      if (messages_api && t != od::json_type::array) {
        return absl::InvalidArgumentError("'messages' must be an array");
      }
      if (!messages_api && t != od::json_type::array && t != od::json_type::string) {
        return absl::InvalidArgumentError("'input' must be a string or an array of items");
      }
      if (rec != nullptr && rec->KeepsFields()) {
        std::string tools;
        agent::AppendCanonicalTools(conv_, &tools);
        rec->KeepFields(*out, messages_api ? system : conv_.system, conv_.has_tools, tools, {});
      }
      late_record = build && rec != nullptr && !conv_.has_tools;
      late_skip = late_record && rec->match->messages >= 0 && rec->match->prefix->late_tools;
      if (!build) {
        KVINDEX_STATUS_TRY(Validate(v, 1));
      } else if (messages_api) {
        od::array messages;
        KVINDEX_JSON_TRY(v.get_array().get(messages), key);
        if (rec != nullptr) {
          rec->Begin(nullptr);
          const uint8_t state = rec->ResumeState();
          inline_systems.seen_other = (state & ReusablePrefix::kSeenOther) != 0;
          inline_systems.after_tool_use = (state & ReusablePrefix::kAfterToolUse) != 0;
        }
        for (auto element : messages) {
          od::value m;
          KVINDEX_JSON_TRY(element.get(m), "messages[]");
          KVINDEX_STATUS_TRY(AnthropicMessage(m, inline_systems));
          if (rec != nullptr) {
            // Resumable where no inline system message waits to join the system prompt or the
            // next message (which then depend on messages a resumed walk does not see).
            const bool resumable = inline_systems.leading.empty() && inline_systems.held.empty();
            rec->MessageEnd(
                conv_.messages.size(),
                (resumable ? ReusablePrefix::kResumable : 0) |
                    (inline_systems.seen_other ? ReusablePrefix::kSeenOther : 0) |
                    (inline_systems.after_tool_use ? ReusablePrefix::kAfterToolUse : 0));
          }
        }
      } else {
        KVINDEX_STATUS_TRY(ResponsesInput(v, rec));
      }
    } else if (build && messages_api && key == "system") {
      KVINDEX_STATUS_TRY(AnthropicSystem(v, &system));
    } else if (build && !messages_api && key == "instructions" && t == od::json_type::string) {
      std::string_view s;
      KVINDEX_JSON_TRY(v.get_string().get(s), key);
      conv_.system = s;
    } else if (build && key == "tools") {
      const char* late = late_record && seen_main ? v.raw_json_token().data() : nullptr;
      if (late != nullptr && late_skip && t == od::json_type::array) {
        KVINDEX_STATUS_TRY(SkipArray(v));
        KVINDEX_STATUS_TRY(HashLateSection(*rec, late, 1, &late_hash));
        continue;
      }
      KVINDEX_STATUS_TRY(messages_api ? AnthropicTools(v) : ResponsesTools(v));
      if (late != nullptr) KVINDEX_STATUS_TRY(HashLateSection(*rec, late, 1, &late_hash));
    } else if (build && json_mode_ && key == "chat_template_kwargs" && t == od::json_type::object) {
      conv_.template_kwargs.clear();
      // As deep as Validate walks it in the canonical walk, so both walks agree on validity.
      KVINDEX_STATUS_TRY(py_json::Dumps(v, &conv_.template_kwargs, 1, /*max_depth=*/512, false,
                                        /*json_safe=*/true));
    } else {
      KVINDEX_STATUS_TRY(Validate(v, 1));
    }
  }
  if (!build) return absl::OkStatus();
  if (!seen_main) {
    return absl::InvalidArgumentError(messages_api ? "messages request has no 'messages'"
                                                   : "responses request has no 'input'");
  }
  if (late_record) KVINDEX_STATUS_TRY(KeepLateTools(*rec, late_skip, late_hash));
  if (messages_api) {
    for (std::string_view held : inline_systems.held) PushSystem(held);
    // The system prompt, then the leading inline system messages, "\n\n" between non-empty
    // parts.
    std::string joined;
    bool any = false;
    const auto add = [&](std::string_view s) {
      if (s.empty()) return;
      if (any) joined.append("\n\n");
      joined.append(s);
      any = true;
    };
    add(system);
    for (std::string_view s : inline_systems.leading) add(s);
    conv_.system = inline_systems.leading.empty() ? system : conv_.Own(std::move(joined));
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::KeepLateTools(Recorder& rec, bool skipped, uint64_t hash) {
  if (skipped) {
    const ReusablePrefix& prev = *rec.match->prefix;
    if (hash != prev.late_hash) {  // other tools: the whole body is walked (RunReusing)
      late_changed_ = true;
      return absl::AbortedError("the tools after the conversation changed");
    }
    conv_.has_tools = !prev.late_tools->empty();
    conv_.canonical_tools = *prev.late_tools;
    rec.next->late_tools = prev.late_tools;
    options_.reuse->CountLateTools();
  } else if (hash != 0) {  // rendered once, for this turn and the next
    std::string tools;
    agent::AppendCanonicalTools(conv_, &tools);
    rec.next->late_tools = std::make_shared<const std::string>(std::move(tools));
    conv_.canonical_tools = *rec.next->late_tools;
  }
  rec.next->late_hash = hash;
  return absl::OkStatus();
}

void Canonicalizer::Impl::PushSystem(std::string_view text) {
  if (text.empty()) return;
  agent::Message m;
  m.role = "system";
  m.content = agent::Message::Content::kString;
  m.text = text;
  conv_.messages.push_back(m);
}

absl::Status Canonicalizer::Impl::AnthropicSystem(od::value v, std::string_view* text) {
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "system"));
  if (t == od::json_type::null) return absl::OkStatus();
  if (t == od::json_type::string) {
    KVINDEX_JSON_TRY(GetText(v, text), "system");  // used as is
    return absl::OkStatus();
  }
  if (t != od::json_type::array) {
    return absl::InvalidArgumentError("'system' must be a string or an array of blocks");
  }
  od::array blocks;
  KVINDEX_JSON_TRY(v.get_array().get(blocks), "system");
  blocks_.clear();
  KVINDEX_STATUS_TRY(AnthropicBlocks(blocks, "system", &blocks_));
  *text = SystemText(blocks_);
  return absl::OkStatus();
}

// Text blocks joined with no separator, billing-header blocks dropped (vLLM).
std::string_view Canonicalizer::Impl::SystemText(const std::vector<agent::Block>& blocks) {
  std::string_view only;
  size_t count = 0;
  for (const agent::Block& b : blocks) {
    if (b.kind == agent::Block::Kind::kText && !b.text.empty() &&
        !b.text.starts_with(kBillingHeader)) {
      only = b.text;
      ++count;
    }
  }
  if (count <= 1) return only;
  std::string joined;
  for (const agent::Block& b : blocks) {
    if (b.kind == agent::Block::Kind::kText && !b.text.starts_with(kBillingHeader)) {
      joined.append(b.text);
    }
  }
  return conv_.Own(std::move(joined));
}

absl::Status Canonicalizer::Impl::AnthropicMessage(od::value v,
                                                   agent::InlineSystems& inline_systems) {
  od::object msg;
  if (v.get_object().get(msg)) return absl::InvalidArgumentError("each message must be an object");
  std::string_view role, text;
  bool has_role = false;
  enum class Content { kAbsent, kString, kBlocks } content = Content::kAbsent;
  blocks_.clear();
  for (auto field : msg) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "message key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    if (key == "role") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &role, &has_role));
    } else if (key == "content") {
      od::json_type t = od::json_type::null;
      KVINDEX_STATUS_TRY(TypeOf(fv, &t, key));
      if (t == od::json_type::string) {
        KVINDEX_JSON_TRY(GetText(fv, &text), key);
        content = Content::kString;
      } else if (t == od::json_type::array) {
        od::array blocks;
        KVINDEX_JSON_TRY(fv.get_array().get(blocks), key);
        blocks_.clear();
        KVINDEX_STATUS_TRY(AnthropicBlocks(blocks, has_role ? role : "", &blocks_));
        content = Content::kBlocks;
      } else if (t != od::json_type::null) {
        return absl::InvalidArgumentError("message 'content' must be a string or an array");
      }
    } else {
      KVINDEX_STATUS_TRY(Validate(fv, 3));
    }
  }
  if (!has_role) return absl::InvalidArgumentError("message without a 'role'");
  using Kind = agent::Block::Kind;
  if (role == "system") {
    const std::string_view t = content == Content::kString
                                   ? (text.starts_with(kBillingHeader) ? "" : text)
                               : content == Content::kBlocks ? SystemText(blocks_)
                                                             : std::string_view();
    if (!inline_systems.seen_other) {
      inline_systems.leading.push_back(t);
    } else if (inline_systems.after_tool_use) {
      inline_systems.held.push_back(t);
    } else {
      PushSystem(t);
    }
    return absl::OkStatus();
  }
  const bool user = role == "user";
  if (!user && role != "assistant") {
    return absl::InvalidArgumentError("message 'role' must be 'user', 'assistant' or 'system'");
  }
  bool has_result = false, has_tool_use = false;
  for (const agent::Block& b : blocks_) {
    has_result = has_result || b.kind == Kind::kToolResult;
    has_tool_use = has_tool_use || b.kind == Kind::kToolUse;
  }
  // A system message held after a tool_use goes after the tool results, else before.
  const bool held_after = user && has_result;
  if (!held_after) {
    for (std::string_view held : inline_systems.held) PushSystem(held);
    inline_systems.held.clear();
  }
  agent::Message m;
  m.role = role;
  if (content == Content::kString) {
    m.content = agent::Message::Content::kString;
    m.text = text;
    conv_.messages.push_back(m);
  } else if (content == Content::kBlocks) {
    parts_.clear();
    m.calls_begin = static_cast<uint32_t>(conv_.calls.size());
    std::string reasoning;
    for (const agent::Block& b : blocks_) {
      switch (b.kind) {
        case Kind::kText:
          if (!b.text.empty()) parts_.push_back(TextPart(b.text));
          break;
        case Kind::kImage:
        case Kind::kOther:
          parts_.push_back(b.part);
          break;
        case Kind::kThinking:
          reasoning.append(b.text);
          m.has_reasoning = true;
          break;
        case Kind::kToolUse:
          conv_.calls.push_back(b.call);
          break;
        case Kind::kToolResult:
          if (user) {
            agent::Message tool;
            tool.role = "tool";
            tool.content = agent::Message::Content::kString;
            tool.text = b.text;
            tool.has_tool_call_id = true;
            tool.tool_call_id = b.tool_use_id;
            conv_.messages.push_back(tool);
            if (b.images_end > b.images_begin) {
              agent::Message images;
              images.role = "user";
              images.content = agent::Message::Content::kParts;
              images.parts_begin = b.images_begin;
              images.parts_end = b.images_end;
              conv_.messages.push_back(images);
            }
          } else {
            parts_.push_back(TextPart(b.repr));
          }
          break;
        case Kind::kDropped:
          break;
      }
    }
    m.calls_end = static_cast<uint32_t>(conv_.calls.size());
    if (m.has_reasoning) m.reasoning = conv_.Own(std::move(reasoning));
    if (parts_.size() == 1 && parts_[0].kind == agent::Part::Kind::kText) {
      m.content = agent::Message::Content::kString;
      m.text = parts_[0].text;
    } else if (!parts_.empty()) {
      m.content = agent::Message::Content::kParts;
      m.parts_begin = static_cast<uint32_t>(conv_.parts.size());
      conv_.parts.insert(conv_.parts.end(), parts_.begin(), parts_.end());
      m.parts_end = static_cast<uint32_t>(conv_.parts.size());
    }
    // vLLM emits a user message only with content; an assistant message always.
    if (!user || m.content != agent::Message::Content::kAbsent) conv_.messages.push_back(m);
  } else if (!user) {
    conv_.messages.push_back(m);
  }
  if (held_after) {
    for (std::string_view held : inline_systems.held) PushSystem(held);
    inline_systems.held.clear();
  }
  inline_systems.seen_other = true;
  inline_systems.after_tool_use = !user && has_tool_use;
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::AnthropicBlocks(od::array blocks, std::string_view role,
                                                  std::vector<agent::Block>* out) {
  using Kind = agent::Block::Kind;
  for (auto element : blocks) {
    od::object block;
    if (element.get_object().get(block)) {
      return absl::InvalidArgumentError("content blocks must be objects");
    }
    agent::Block b;
    std::string_view type, text, thinking, id, name, arguments;
    bool has_type = false, has_text = false, has_thinking = false, has_id = false, has_name = false;
    agent::Part source;
    bool has_source = false;
    for (auto field : block) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "content block key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      if (key == "type") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
      } else if (key == "text") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &text, &has_text));
      } else if (key == "thinking") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &thinking, &has_thinking));
      } else if (key == "id") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &id, &has_id));
      } else if (key == "name") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &name, &has_name));
      } else if (key == "tool_use_id") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &b.tool_use_id, &b.has_tool_use_id));
      } else if (key == "source") {
        KVINDEX_STATUS_TRY(AnthropicImage(fv, &source));
        has_source = true;
      } else if (key == "input") {
        // json.dumps(block.input or {}): an empty or null input is "{}".
        std::string args;
        od::json_type t = od::json_type::null;
        KVINDEX_STATUS_TRY(TypeOf(fv, &t, key));
        if (t == od::json_type::null) {
          args = "{}";
        } else {
          KVINDEX_STATUS_TRY(py_json::Dumps(fv, &args, 2, options_.max_nesting_depth));
        }
        arguments = conv_.Own(std::move(args));
      } else if (key == "content") {
        KVINDEX_STATUS_TRY(AnthropicToolResult(fv, role, &b));
      } else {
        KVINDEX_STATUS_TRY(Validate(fv, 4));
      }
    }
    if (!has_type) return absl::InvalidArgumentError("content block without a 'type'");
    if (type == "text") {
      b.kind = Kind::kText;
      b.text = text;
    } else if (type == "image") {
      if (has_source) {
        b.kind = Kind::kImage;
        b.part = source;
      }
    } else if (type == "thinking") {
      if (has_thinking) {
        b.kind = Kind::kThinking;
        b.text = thinking;
      }
    } else if (type == "tool_use") {
      b.kind = Kind::kToolUse;
      b.call.id = id;  // vLLM invents "call_<time>" for a missing id; kvgate keeps ""
      b.call.name = name;
      b.call.arguments = arguments.empty() ? std::string_view("{}") : arguments;
    } else if (type == "tool_result") {
      b.kind = Kind::kToolResult;
    } else if (type == "redacted_thinking" || type == "tool_reference") {
      b.kind = Kind::kDropped;
    } else {
      // vLLM's request model has no other block type (`document` included): a 400 there. The
      // block still hashes, so that routing stays stable.
      b.kind = Kind::kOther;
      b.part.kind = agent::Part::Kind::kOther;
      b.part.text = conv_.OtherType(type);
      b.part.hash = has_source
                        ? XXH3_64bits_withSeed(source.data.data(), source.data.size(),
                                               XXH3_64bits(source.text.data(), source.text.size()))
                        : XXH3_64bits(text.data(), text.size());
      conv_.Unsupported(common::StrCat("content blocks of type '", type, "' are not supported"));
    }
    if (b.kind == Kind::kToolResult && b.text.data() == nullptr) b.text = "";
    out->push_back(b);
  }
  return absl::OkStatus();
}

// A tool_result's content: text items joined with "\n" (the tool message), image items (a user
// message after it), or, in an assistant message, "Tool result: " and the content.
absl::Status Canonicalizer::Impl::AnthropicToolResult(od::value v, std::string_view role,
                                                      agent::Block* b) {
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "content"));
  if (t == od::json_type::null) return absl::OkStatus();
  if (t == od::json_type::string) {
    KVINDEX_JSON_TRY(GetText(v, &b->text), "content");
    if (role != "user") b->repr = conv_.Own(common::StrCat("Tool result: ", b->text));
    return absl::OkStatus();
  }
  if (t != od::json_type::array) {
    return absl::InvalidArgumentError("tool_result 'content' must be a string or an array");
  }
  od::array items;
  KVINDEX_JSON_TRY(v.get_array().get(items), "content");
  std::string joined;
  std::string_view only;
  size_t texts = 0;
  b->images_begin = static_cast<uint32_t>(conv_.parts.size());
  for (auto element : items) {
    od::object item;
    if (element.get_object().get(item)) {
      return absl::InvalidArgumentError("tool_result content items must be objects");
    }
    std::string_view type, text;
    bool has_type = false, has_text = false, has_source = false;
    agent::Part image;
    for (auto field : item) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "content item key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      if (key == "type") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
      } else if (key == "text") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &text, &has_text));
      } else if (key == "source") {
        KVINDEX_STATUS_TRY(AnthropicImage(fv, &image));
        has_source = true;
      } else {
        KVINDEX_STATUS_TRY(Validate(fv, 5));
      }
    }
    if (type == "text" && has_text) {
      if (texts++ > 0) joined.push_back('\n');
      joined.append(text);
      only = text;
    } else if (type == "image" && has_source) {
      conv_.parts.push_back(image);
    }
  }
  b->images_end = static_cast<uint32_t>(conv_.parts.size());
  b->text = texts == 1 ? only : texts == 0 ? std::string_view("") : conv_.Own(std::move(joined));
  if (role != "user") b->repr = conv_.Own(common::StrCat("Tool result: ", b->text));
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::AnthropicImage(od::value v, agent::Part* out) {
  od::object source;
  if (v.get_object().get(source)) {
    return absl::InvalidArgumentError("an image 'source' must be an object");
  }
  std::string_view type, media_type, data, url;
  bool has_type = false, has_media = false, has_data = false, has_url = false;
  for (auto field : source) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "source key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    if (key == "type") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
    } else if (key == "media_type") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &media_type, &has_media));
    } else if (key == "data") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &data, &has_data));
    } else if (key == "url") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &url, &has_url));
    } else {
      KVINDEX_STATUS_TRY(Validate(fv, 5));
    }
  }
  out->kind = agent::Part::Kind::kImage;
  if (type == "url") {
    out->text = has_url ? url : "";
  } else {
    out->data_url = true;
    out->media_type = has_media && !media_type.empty() ? media_type : "image/jpeg";
    out->data = data;
  }
  return absl::OkStatus();
}

// A `tools` value (either API): an array, or null for none (`*present` false).
absl::Status Canonicalizer::Impl::ToolsArray(od::value v, od::array* tools, bool* present) {
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "tools"));
  conv_.tools.clear();
  conv_.canonical_tools = {};
  *present = t != od::json_type::null;
  if (*present && (t != od::json_type::array || v.get_array().get(*tools))) {
    return absl::InvalidArgumentError("'tools' must be an array");
  }
  return absl::OkStatus();
}

// Anthropic tools -> {"type": "function", "function": {name, description, parameters: the
// input_schema (with "type": "object" when it has none), strict, defer_loading}}.
absl::Status Canonicalizer::Impl::AnthropicTools(od::value v) {
  od::array tools;
  bool present = false;
  KVINDEX_STATUS_TRY(ToolsArray(v, &tools, &present));
  if (!present) return absl::OkStatus();
  static constexpr std::string_view kOrder[] = {"name", "description", "parameters", "strict",
                                                "defer_loading"};
  for (auto element : tools) {
    od::object tool;
    if (element.get_object().get(tool)) {
      return absl::InvalidArgumentError("each tool must be an object");
    }
    std::string rendered[5];
    bool present[5] = {};
    std::string_view name;
    for (auto field : tool) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "tool key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      od::json_type ft = od::json_type::null;
      KVINDEX_STATUS_TRY(TypeOf(fv, &ft, key));
      const std::string_view member = key == "input_schema" ? "parameters" : key;
      const auto at = std::find(std::begin(kOrder), std::end(kOrder), member);
      if (at == std::end(kOrder) || key == "parameters" || ft == od::json_type::null) {
        KVINDEX_STATUS_TRY(Validate(fv, 3));
        continue;
      }
      const size_t i = static_cast<size_t>(at - std::begin(kOrder));
      if (i == 0 && ft == od::json_type::string) {
        std::string_view s;
        KVINDEX_JSON_TRY(GetText(fv, &s), key);
        name = s;
        rendered[0].clear();
        if (json_mode_) {
          py_json::AppendString(s, &rendered[0]);
        } else {
          rendered[0].push_back('s');
          AppendEscaped(s, &rendered[0]);
          rendered[0].push_back(canonical::kStringEnd);
        }
      } else {
        rendered[i].clear();
        KVINDEX_STATUS_TRY(Render(fv, &rendered[i], i == 2));
      }
      present[i] = true;
    }
    if (!present[2]) {
      // A server tool (web search, ...) has no input_schema: vLLM's request model refuses it.
      conv_.Unsupported(common::StrCat("tool '", name, "' has no input_schema"));
      continue;
    }
    agent::Tool out;
    for (size_t i = 0; i < 5; ++i) {
      if (present[i]) out.members.push_back({kOrder[i], std::move(rendered[i])});
    }
    conv_.tools.push_back(std::move(out));
  }
  conv_.has_tools = !conv_.tools.empty();
  return absl::OkStatus();
}

}  // namespace kvgate::kvindex
