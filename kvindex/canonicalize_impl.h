// File: kvindex/canonicalize_impl.h
// Internal to kvindex: the canonicaliser's walk (canonicalize.cc for chat and completions,
// agent_chat.cc for the agents' APIs) and the helpers both halves share. Not a public header.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/strings.h"
#include "kvindex/agent_conversation.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"
#include "simdjson.h"

namespace kvgate::kvindex {
namespace od = simdjson::ondemand;

// Field tags after canonical::kField (and section tags after kMessageBegin). One byte each; the
// meaning of a field never depends on its position, so optional fields cannot be confused.
namespace walk {
constexpr char kTagRole = 'r';
constexpr char kTagTools = 'x';
constexpr char kTagFunctions = 'y';
constexpr char kTagName = 'n';
constexpr char kTagText = 't';
constexpr char kTagImage = 'i';
constexpr char kTagAudio = 'a';
constexpr char kTagVideo = 'v';
constexpr char kTagOtherPart = 'o';
constexpr char kTagPartHash = 'h';
constexpr char kTagToolCallId = 'c';
constexpr char kTagFunctionName = 'f';
constexpr char kTagArguments = 'g';
constexpr char kTagToolResultId = 'k';
constexpr char kTagNullContent = 'z';

inline absl::Status JsonError(simdjson::error_code ec, std::string_view where) {
  return absl::InvalidArgumentError(
      common::StrCat("invalid request JSON at ", where, ": ", simdjson::error_message(ec)));
}

#define KVINDEX_JSON_TRY(expr, where)   \
  do {                                  \
    if (auto kv_ec_ = (expr); kv_ec_) { \
      return JsonError(kv_ec_, where);  \
    }                                   \
  } while (0)

#define KVINDEX_STATUS_TRY(expr)                      \
  do {                                                \
    if (absl::Status kv_st_ = (expr); !kv_st_.ok()) { \
      return kv_st_;                                  \
    }                                                 \
  } while (0)

inline void AppendHex(uint64_t h, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char buf[16];
  for (int i = 15; i >= 0; --i) {
    buf[i] = kDigits[h & 0xf];
    h >>= 4;
  }
  out->append(buf, 16);
}

// A string value's text. A string without a backslash is its own decoding, so it is read in
// place in the body instead of copied into the parser's string buffer: most of a prompt's
// bytes. The view lives as long as the body, which outlives the walk as the string buffer does.
inline simdjson::error_code GetText(od::value& v, std::string_view* s) {
  std::string_view raw = v.raw_json_token();  // the token and the whitespace after it
  while (!raw.empty() &&
         (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) {
    raw.remove_suffix(1);
  }
  if (raw.size() >= 2 && raw.front() == '"' && raw.back() == '"') {
    const std::string_view text = raw.substr(1, raw.size() - 2);
    if (std::memchr(text.data(), '\\', text.size()) == nullptr) {
      // Consumed as get_string() would consume it: a value left unread is skipped later, and
      // skipping checks less of a malformed body than reading does (the fuzzers found one).
      od::raw_json_string unused;
      if (auto ec = v.get_raw_json_string().get(unused); ec) return ec;
      *s = text;
      return simdjson::SUCCESS;
    }
  }
  return v.get_string().get(*s);
}

inline absl::Status TypeOf(od::value& v, od::json_type* t, std::string_view where) {
  KVINDEX_JSON_TRY(v.type().get(*t), where);
  return absl::OkStatus();
}

// Reads a string-or-null value; `*found` is false for null.
inline absl::Status StringOrNull(od::value& v, std::string_view key, std::string_view* s,
                                 bool* found) {
  od::json_type t = od::json_type::null;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, key));
  if (t == od::json_type::null) {
    *found = false;
    return absl::OkStatus();
  }
  if (t != od::json_type::string) {
    return absl::InvalidArgumentError(common::StrCat("field '", key, "' must be a string"));
  }
  KVINDEX_JSON_TRY(v.get_string().get(*s), key);
  *found = true;
  return absl::OkStatus();
}

}  // namespace walk

class Canonicalizer::Impl {
 public:
  explicit Impl(CanonicalizeOptions options) : options_(options) {}

  absl::Status Run(std::string_view body, size_t capacity, ApiKind api, bool build_prompt,
                   CanonicalRequest* out);

  /// The agents' APIs (agent_chat.cc): the conversation converted by the last Run of a
  /// kMessages / kResponses body. With `json_mode`, tool members hold JSON text (for a chat
  /// body) and Run does not build the canonical stream.
  const agent::Conversation& conversation() const { return conv_; }
  void set_json_mode(bool json_mode) { json_mode_ = json_mode; }

 private:
  // While a long body's messages are walked: what its next turn may reuse
  // (kvindex/prefix_reuse.h), in the body's coordinates although the walk may read the body
  // without the messages it reuses.
  struct Recorder {
    ReusablePrefix* next;
    const PrefixMatch* match;
    const char* data;             // the text walked
    od::document* doc = nullptr;  // the walk's document (where its iterator is)
    // The walk skipped the fields before the conversation too: what they made, restored from the
    // reused entry, and the bytes of the `"messages":[` put in their place at cut_begin.
    const ReusablePrefix::Fields* restore = nullptr;
    size_t inserted = 0;
    bool ok = true;  // false: a separator was not where expected; nothing is published

    size_t BodyOffset(size_t at) const {
      return match->messages >= 0 && at >= match->cut_begin + inserted
                 ? at - inserted + (match->cut_end - match->cut_begin)
                 : at;
    }
    // At the root object: where its first field begins, unless the walk skipped the fields.
    void FieldsBegin();
    // Whether the walk is to keep what the fields before the conversation made: they were
    // walked (not restored), and the cut can start at the first of them.
    bool KeepsFields() const { return restore == nullptr && next->has_fields; }
    // At the conversation array, when KeepsFields(): keeps what those fields made (`system`:
    // the agents' system prompt; `tools`, `functions`: canonical sections).
    void KeepFields(const CanonicalRequest& out, std::string_view system, bool has_tools,
                    std::string_view tools, std::string_view functions);
    // At the walk's start, when it skipped the fields: the request's fields they made.
    void RestoreFields(CanonicalRequest* out) const;
    // What the conversion carried past the last reused message (ReusablePrefix::State).
    uint8_t ResumeState() const {
      return match->messages >= 0 ? match->prefix->states[match->messages] : 0;
    }
    // At the messages array's first element; with `prompt` (whose `bytes` hold the header so
    // far), the reused messages' canonical bytes follow the header: borrowed from the entry
    // when the header is the entry's, else copied.
    void Begin(CanonicalPrompt* prompt, bool entrys_header = false);
    // After the header in `prompt->bytes`: the reused messages, borrowed or copied (Begin).
    // `entrys_header`: the header is the entry's, not written (borrowed with the messages).
    void PlaceReused(CanonicalPrompt* prompt, bool entrys_header = false) const;
    // After each message: where it ended in the body and in the canonical messages (for the
    // agents' APIs, until AgentCanonical, how many converted messages there were), its state.
    void MessageEnd(size_t canonical_end, uint8_t state);
  };

  // The walk over `data` (`length` bytes; the body, or the body without reused messages).
  absl::Status Walk(std::string_view body, const char* data, size_t length, size_t capacity,
                    ApiKind api, bool build_prompt, Recorder* rec, CanonicalRequest* out);
  // `body` with simdjson's padding after it: itself when `*capacity` allows, else a copy.
  const char* Padded(std::string_view body, size_t* capacity);
  // A tools section after the conversation (the OpenAI SDKs' order) in a recording walk: the
  // body bytes from `begin` (its value) to where the walk is (the next field) are hashed into
  // `*hash` after `tag`. A later turn whose late sections hash alike takes what the reused
  // turn made of them without parsing them (SkipArray consumes an array unread; an error is
  // malformed JSON, which the whole body's walk then reports).
  static absl::Status HashLateSection(const Recorder& rec, const char* begin, uint64_t tag,
                                      uint64_t* hash);
  static absl::Status SkipArray(od::value v);
  // Every field a walk sets, back to a fresh request's.
  static void ClearRequest(CanonicalRequest* out);
  // A long body (canonicalize_reuse.cc): walked without the messages an earlier body had,
  // when one had them; what its messages were is then published for the next turn.
  absl::Status RunReusing(std::string_view body, size_t capacity, ApiKind api,
                          CanonicalRequest* out);
  absl::Status WalkAndPublish(std::string_view body, const char* data, size_t length,
                              size_t capacity, ApiKind api, const PrefixMatch& match,
                              CanonicalRequest* out);
  // An agent body's canonical stream from conv_, after the reused messages' canonical bytes
  // when the walk resumed; with `rec`, the recorded messages' canonical ends are filled in.
  void AgentCanonical(Recorder* rec, CanonicalPrompt* prompt);

  // Walks a value completely, so that malformed JSON in fields the gateway does not read is
  // still caught (simdjson on-demand skips unread values without validating them).
  absl::Status Validate(od::value v, int depth);
  absl::Status Message(od::value v, std::string* out);
  absl::Status ContentParts(od::array parts, std::string* out);
  absl::Status PartPayloadHash(od::value v, uint64_t* hash);
  absl::Status ToolCalls(od::value v, std::string* out);
  absl::Status FunctionCall(od::value v, std::string* out);
  absl::Status Completions(od::value prompt, CanonicalRequest* out);
  absl::Status Tokens(od::array arr, std::vector<uint32_t>* tokens);
  // Appends the canonical form of any JSON value: objects with sorted keys, normalised numbers
  // and decoded strings; with a null `out`, only validates it.
  absl::Status Json(od::value v, std::string* out, int depth, int max_depth);

  // Agent APIs (agent_chat.cc). The root walk reads the top-level fields and, with `build`,
  // converts the conversation into conv_.
  absl::Status AgentRoot(od::object root, ApiKind api, bool build, Recorder* rec,
                         CanonicalRequest* out);
  // After an agent body's walk with a recorder and no tools before the conversation: the tools
  // after it (hashed to `hash`, skipped or parsed) become the turn's and the next one's.
  absl::Status KeepLateTools(Recorder& rec, bool skipped, uint64_t hash);
  absl::Status AnthropicSystem(od::value v, std::string_view* text);
  std::string_view SystemText(const std::vector<agent::Block>& blocks);
  void PushSystem(std::string_view text);
  absl::Status AnthropicMessage(od::value v, agent::InlineSystems& inline_systems);
  absl::Status AnthropicBlocks(od::array blocks, std::string_view role,
                               std::vector<agent::Block>* out);
  absl::Status AnthropicToolResult(od::value v, std::string_view role, agent::Block* b);
  absl::Status AnthropicImage(od::value source, agent::Part* out);
  absl::Status ToolsArray(od::value v, od::array* tools, bool* present);
  absl::Status AnthropicTools(od::value v);
  absl::Status ResponsesInput(od::value v, Recorder* rec);
  absl::Status ResponsesItem(od::value v);
  absl::Status ResponsesParts(od::array parts, std::string_view* first_text);
  absl::Status ResponsesTools(od::value v);
  // A tool's member value: canonical JSON, or JSON text in json_mode_.
  absl::Status Render(od::value v, std::string* out, bool default_object_type = false);

  static void Field(char tag, std::string_view content, std::string* out) {
    out->push_back(canonical::kField);
    out->push_back(tag);
    AppendEscaped(content, out);
  }

  CanonicalizeOptions options_;
  od::parser parser_;
  std::string padded_;
  bool whole_ = false;  // set while a body is parsed again without prefix reuse
  // Set by a walk that took the reused turn's header unparsed and found the tool sections
  // after the messages changed (RunReusing then walks the whole body).
  bool late_changed_ = false;
  std::string tools_;      // Canonical `tools` section.
  std::string functions_;  // Canonical `functions` section.
  std::string content_;    // A message's content parts.
  std::string calls_;      // A message's tool calls / function call.
  std::string scratch_;
  agent::Conversation conv_;
  std::vector<agent::Block> blocks_;  // an Anthropic message's blocks
  std::vector<agent::Part> parts_;    // a message's parts before they join conv_.parts
  bool json_mode_ = false;
};

}  // namespace kvgate::kvindex
