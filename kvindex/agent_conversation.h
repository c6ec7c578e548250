// File: kvindex/agent_conversation.h
// Internal to kvindex: an agent API request converted to chat, as plain values. The walk over
// a Messages or Responses body (agent_chat.cc) fills it once; two writers read it: the
// canonical chat stream (block hashing) and a chat-completions body (chat templates,
// kvgate-sim). Text is viewed in simdjson's string buffer (valid until the next parse) or in
// `owned`. Thread-compatible.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::kvindex::agent {

/// One content part of a chat message.
struct Part {
  enum class Kind : uint8_t { kText, kImage, kOther };
  Kind kind = Kind::kText;
  std::string_view text;  // kText: the text; kImage: the URL (unless data_url); kOther: the type
  // kImage from base64 data: the URL is "data:<media_type>;base64,<data>" (never concatenated).
  bool data_url = false;
  std::string_view media_type;
  std::string_view data;
  uint64_t hash = 0;  // kOther: the payload's hash
};

/// One chat tool call ({"id", "type": "function", "function": {"name", "arguments"}}).
struct Call {
  std::string_view id;
  std::string_view name;
  std::string_view arguments;
};

/// One chat message. Parts and calls are ranges of Conversation::parts / ::calls.
struct Message {
  enum class Content : uint8_t { kAbsent, kString, kParts };
  std::string_view role;
  Content content = Content::kAbsent;
  std::string_view text;  // kString
  uint32_t parts_begin = 0, parts_end = 0;
  uint32_t calls_begin = 0, calls_end = 0;
  bool has_tool_call_id = false;
  std::string_view tool_call_id;
  bool has_reasoning = false;  // vLLM's `reasoning` (thinking): rendered by some templates only
  std::string_view reasoning;
};

/// One member of a chat tool's "function" object, its value rendered (canonical JSON for
/// hashing, JSON text for a chat body).
struct Member {
  std::string_view key;
  std::string value;
};

struct Tool {
  std::vector<Member> members;  // in the order the chat tool lists them
};

/// An Anthropic content block before its message's role is known (the role may follow the
/// content in the object).
struct Block {
  enum class Kind : uint8_t { kText, kImage, kThinking, kToolUse, kToolResult, kOther, kDropped };
  Kind kind = Kind::kDropped;
  std::string_view text;  // kText, kThinking; kToolResult: its text ("\n"-joined)
  Part part;              // kImage, kOther
  Call call;              // kToolUse
  std::string_view tool_use_id;
  bool has_tool_use_id = false;
  uint32_t images_begin = 0, images_end = 0;  // kToolResult: its images, in Conversation::parts
  std::string_view repr;                      // kToolResult in an assistant message
};

/// Anthropic inline `role: system` messages (vLLM's inline_system.py, "preserve"): leading
/// ones join the system prompt; one between a tool_use and its tool_result moves after the
/// result; the rest stay in place.
struct InlineSystems {
  bool seen_other = false;      // a user or assistant message came before
  bool after_tool_use = false;  // the last one was an assistant message with tool_use
  std::vector<std::string_view> leading;
  std::vector<std::string_view> held;  // waiting for the next message
};

struct Conversation {
  std::string_view system;  // the leading system message's text ("" = none)
  std::vector<Message> messages;
  std::vector<Part> parts;
  std::vector<Call> calls;
  std::vector<Tool> tools;
  bool has_tools = false;
  // The tools section's canonical bytes when prefix reuse restored them (`tools` is then
  // empty); "" when the section is rendered from `tools`.
  std::string_view canonical_tools;
  std::string template_kwargs;  // JSON text of chat_template_kwargs, "" when absent
  std::string unsupported;      // what vLLM would refuse (the first reason), "" when none
  std::deque<std::string> owned;

  std::string_view Own(std::string s) {
    owned.push_back(std::move(s));
    return owned.back();
  }
  /// The type an opaque part carries in the chat body: its own, unless chat gives that name a
  /// meaning of its own (text, image_url, ...), which the part does not have. "type" too: its
  /// payload key would repeat the "type" key.
  std::string_view OtherType(std::string_view type) {
    for (std::string_view chat :
         {"type", "text", "input_text", "image_url", "input_audio", "video_url"}) {
      if (type == chat) return Own("kvgate-other-" + std::string(type));
    }
    return type;
  }
  void Unsupported(std::string_view why) {
    if (unsupported.empty()) unsupported.assign(why);
  }
  void Clear() {
    system = {};
    messages.clear();
    parts.clear();
    calls.clear();
    tools.clear();
    has_tools = false;
    canonical_tools = {};
    template_kwargs.clear();
    unsupported.clear();
    owned.clear();
  }
};

/// Appends the canonical chat stream of `conv`: byte for byte what the Canonicalizer builds for
/// the chat body of AppendMessageJson / AppendToolsJson (tested property).
void AppendCanonical(const Conversation& conv, std::string* out);
/// Its two halves: the tools section and the system message, then each message.
void AppendCanonicalHeader(const Conversation& conv, std::string* out);
/// The tools section alone (none without tools).
void AppendCanonicalTools(const Conversation& conv, std::string* out);
void AppendCanonicalMessage(const Conversation& conv, const Message& m, std::string* out);

/// The chat-completions JSON object of `conv.messages[i]`.
void AppendMessageJson(const Conversation& conv, const Message& m, std::string* out);
/// The chat-completions `tools` array of `conv`.
void AppendToolsJson(const Conversation& conv, std::string* out);

}  // namespace kvgate::kvindex::agent
