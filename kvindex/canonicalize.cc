#include "kvindex/canonicalize.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kvindex/canonicalize_impl.h"
#include "kvindex/prefix_reuse.h"
#include "simdjson.h"
#include "xxhash.h"

namespace kvgate::kvindex {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

// Every object is read in ONE forward pass over its fields (dispatching on the key) and the
// canonical order is restored from views and small buffers afterwards. simdjson's
// find_field_unordered() rewinds objects assuming they were validated, which malformed input
// that was partly skipped violates (found by the fuzzer). Decoded strings live in the parser's
// string buffer until the next document, so keeping views is safe.

void Canonicalizer::Impl::ClearRequest(CanonicalRequest* out) {
  out->prompts.clear();
  out->model.clear();
  out->cache_salt.clear();
  out->user.clear();
  out->stream = false;
  out->prompt_error.clear();
  out->metadata_user_id.clear();
  out->prompt_cache_key.clear();
  out->previous_response_id.clear();
  out->conversation.clear();
  out->store = true;
  out->messages_layout.reset();
}

absl::Status Canonicalizer::Impl::Run(std::string_view body, size_t capacity, ApiKind api,
                                      bool build_prompt, CanonicalRequest* out) {
  ClearRequest(out);
  if (body.size() > options_.max_body_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body of ", body.size(), " bytes exceeds the limit"));
  }
  // A long body whose first messages an earlier body had: parsed without them. (Not for a
  // chat body converted from an agent API: its tools are JSON text, not canonical.)
  const bool conversation =
      api == ApiKind::kChatCompletions ||
      ((api == ApiKind::kMessages || api == ApiKind::kResponses) && !json_mode_);
  if (build_prompt && conversation && options_.reuse != nullptr && !whole_ &&
      body.size() >= PrefixReuseCache::kMinBodyBytes) {
    return RunReusing(body, capacity, api, out);
  }
  const char* data = Padded(body, &capacity);
  return Walk(body, data, body.size(), capacity, api, build_prompt, nullptr, out);
}

const char* Canonicalizer::Impl::Padded(std::string_view body, size_t* capacity) {
  // simdjson needs SIMDJSON_PADDING readable bytes past the end; copy unless the caller has them.
  if (*capacity >= body.size() + simdjson::SIMDJSON_PADDING) return body.data();
  padded_.resize(body.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(padded_.data(), body.data(), body.size());
  std::memset(padded_.data() + body.size(), 0, simdjson::SIMDJSON_PADDING);
  *capacity = padded_.size();
  return padded_.data();
}

absl::Status Canonicalizer::Impl::Walk(std::string_view body, const char* data, size_t length,
                                       size_t capacity, ApiKind api, bool build_prompt,
                                       Recorder* rec, CanonicalRequest* out) {
  od::document doc;
  KVINDEX_JSON_TRY(parser_.iterate(data, length, capacity).get(doc), "document");
  od::object root;
  if (auto ec = doc.get_object().get(root); ec) {
    if (ec == simdjson::INCORRECT_TYPE) {
      return absl::InvalidArgumentError("request body must be a JSON object");
    }
    return JsonError(ec, "document");
  }
  if (rec != nullptr) {
    rec->doc = &doc;
    rec->FieldsBegin();
  }

  if (api == ApiKind::kMessages || api == ApiKind::kResponses) {
    KVINDEX_STATUS_TRY(AgentRoot(root, api, build_prompt, rec, out));
    const char* after = nullptr;
    if (!doc.current_location().get(after)) {
      return absl::InvalidArgumentError(
          "invalid request JSON: trailing content after the top-level object");
    }
    if (build_prompt && !json_mode_) {
      out->prompts.emplace_back();
      out->prompts.back().kind = PromptKind::kChat;
      // About as long as the body (reused messages included): grow it once, not by doublings.
      out->prompts.back().bytes.reserve(body.size());
      AgentCanonical(rec, &out->prompts.back());
    }
    return absl::OkStatus();
  }

  const bool chat = build_prompt && api == ApiKind::kChatCompletions;
  const bool completions = build_prompt && api == ApiKind::kCompletions;
  CanonicalPrompt* prompt = nullptr;
  if (chat) {
    out->prompts.emplace_back();
    prompt = &out->prompts.back();
    prompt->kind = PromptKind::kChat;
    // The canonical stream is about as long as the body: grow it once, not by doublings.
    prompt->bytes.reserve(body.size());
  }
  tools_.clear();
  functions_.clear();
  if (rec != nullptr && rec->restore != nullptr) {  // the fields before `messages` were cut
    rec->RestoreFields(out);
    tools_ = rec->restore->tools;
    functions_ = rec->restore->functions;
  }
  bool seen_messages = false;
  bool seen_prompt = false;
  size_t header_written = 0;        // Bytes of tool sections already at the front of the stream.
  bool provisional_header = false;  // the header written is the reused turn's (checked at the end)
  // Tool sections after the messages, when the reused turn's header was made of them alone:
  // only their bytes are hashed (`late_hash`), and the header stays if the hash does.
  bool late_unparsed = false;
  uint64_t late_hash = 0;
  bool late_only = false;     // the header comes from sections after the messages only
  size_t messages_bytes = 0;  // The messages' canonical bytes, after the tool sections.
  for (auto field : root) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "object key");
    od::value v;
    KVINDEX_JSON_TRY(field.value().get(v), key);
    od::json_type t;
    if (key == "model") {
      std::string_view s;
      if (v.get_string().get(s)) {
        return absl::InvalidArgumentError("'model' must be a string");
      }
      out->model.assign(s);
    } else if (key == "stream") {
      KVINDEX_STATUS_TRY(TypeOf(v, &t, key));
      if (t == od::json_type::boolean) {
        KVINDEX_JSON_TRY(v.get_bool().get(out->stream), key);
      } else if (t != od::json_type::null || Validate(v, 1) != absl::OkStatus()) {
        return absl::InvalidArgumentError("'stream' must be a boolean");
      }
    } else if (key == "cache_salt" || key == "user") {
      KVINDEX_STATUS_TRY(TypeOf(v, &t, key));
      if (t == od::json_type::string) {
        std::string_view s;
        KVINDEX_JSON_TRY(v.get_string().get(s), key);
        (key == "user" ? out->user : out->cache_salt).assign(s);
      } else {
        KVINDEX_STATUS_TRY(Validate(v, 1));
      }
    } else if (chat && (key == "tools" || key == "functions")) {
      std::string* section = key == "tools" ? &tools_ : &functions_;
      section->clear();
      KVINDEX_STATUS_TRY(TypeOf(v, &t, key));
      // A section after the messages goes into the late hash (the same bytes canonicalise to
      // the same section).
      const char* late = seen_messages && rec != nullptr ? v.raw_json_token().data() : nullptr;
      const uint64_t tag = key == "tools" ? 1 : 2;
      if (t == od::json_type::null) {
        if (late != nullptr) KVINDEX_STATUS_TRY(HashLateSection(*rec, late, tag, &late_hash));
        continue;
      }
      if (t != od::json_type::array) {
        return absl::InvalidArgumentError(common::StrCat("'", key, "' must be an array"));
      }
      if (late_unparsed) {  // the reused turn's header stands if the hash agrees
        KVINDEX_STATUS_TRY(SkipArray(v));
        KVINDEX_STATUS_TRY(HashLateSection(*rec, late, tag, &late_hash));
        continue;
      }
      section->push_back(canonical::kMessageBegin);
      section->push_back(key == "tools" ? kTagTools : kTagFunctions);
      KVINDEX_STATUS_TRY(Json(v, section, 0, options_.max_nesting_depth));
      section->push_back(canonical::kMessageEnd);
      if (late != nullptr) KVINDEX_STATUS_TRY(HashLateSection(*rec, late, tag, &late_hash));
    } else if (chat && key == "messages") {
      if (seen_messages) {
        return absl::InvalidArgumentError("duplicate 'messages'");
      }
      seen_messages = true;
      od::array messages;
      if (v.get_array().get(messages)) {
        return absl::InvalidArgumentError("'messages' must be an array");
      }
      if (rec != nullptr && rec->KeepsFields())
        rec->KeepFields(*out, {}, false, tools_, functions_);
      // Tool sections seen so far go first; later ones are inserted at the end.
      prompt->bytes.assign(tools_);
      prompt->bytes.append(functions_);
      header_written = prompt->bytes.size();
      // Tool sections after the messages (the OpenAI SDKs' order) would be inserted before the
      // whole prompt at the end, a move of every byte. A turn that reuses an earlier one's
      // messages most likely has its tools too: that header goes first, checked at the end.
      late_only = header_written == 0;
      if (header_written == 0 && rec != nullptr && rec->match->messages >= 0) {
        const ReusablePrefix& prev = *rec->match->prefix;
        header_written = prev.header_bytes;  // borrowed with the reused messages (Begin)
        provisional_header = header_written > 0;
        late_unparsed = provisional_header && prev.late_hash != 0;
      }
      tools_.clear();
      functions_.clear();
      if (rec != nullptr) rec->Begin(prompt, provisional_header);
      for (auto element : messages) {
        od::value m;
        KVINDEX_JSON_TRY(element.get(m), "messages[]");
        KVINDEX_STATUS_TRY(Message(m, &prompt->bytes));
        if (rec != nullptr) {
          rec->MessageEnd(prompt->size() - header_written, ReusablePrefix::kResumable);
        }
      }
      messages_bytes = prompt->size() - header_written;
    } else if (completions && key == "prompt") {
      if (seen_prompt) {
        return absl::InvalidArgumentError("duplicate 'prompt'");
      }
      seen_prompt = true;
      KVINDEX_STATUS_TRY(Completions(v, out));
    } else {
      KVINDEX_STATUS_TRY(Validate(v, 1));
    }
  }
  const char* trailing = nullptr;
  if (!doc.current_location().get(trailing)) {
    return absl::InvalidArgumentError(
        "invalid request JSON: trailing content after the top-level object");
  }
  if (chat) {
    if (!seen_messages) {
      return absl::InvalidArgumentError("chat request has no 'messages'");
    }
    if (late_unparsed) {
      // The late sections were only hashed: other bytes than the reused turn's must be
      // canonicalised, which a walk of the whole body does (RunReusing).
      if (late_hash != rec->match->prefix->late_hash) {
        late_changed_ = true;
        return absl::AbortedError("the tool sections after the messages changed");
      }
      options_.reuse->CountLateTools();
    } else if (provisional_header) {
      // Only sections after the messages made this body's header: kept when they made the
      // reused turn's bytes, replaced otherwise.
      std::string header = tools_ + functions_;
      if (header.size() != header_written || !rec->match->prefix->CanonicalStartsWith(header)) {
        prompt->OwnAll();
        prompt->bytes.replace(0, header_written, header);
      }
    } else if (!tools_.empty() || !functions_.empty()) {
      // Canonical order is tools, functions, messages whatever the body's key order.
      prompt->OwnAll();
      if (header_written > 0) {
        // Both an early and a late section: rebuild the header in canonical order.
        scratch_.assign(prompt->bytes, 0, header_written);
        const bool early_is_tools = scratch_[1] == kTagTools;
        std::string header = early_is_tools ? scratch_ + functions_ : tools_ + scratch_;
        prompt->bytes.replace(0, header_written, header);
      } else {
        prompt->bytes.insert(0, tools_ + functions_);
      }
    }
    if (rec != nullptr) {
      rec->next->header_bytes = prompt->size() - messages_bytes;
      // Zero also when a late section hashed to it: the next turn then parses its sections.
      if (late_only && rec->next->header_bytes > 0) rec->next->late_hash = late_hash;
    }
  } else if (completions && !seen_prompt) {
    return absl::InvalidArgumentError("completions request has no 'prompt'");
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::Validate(od::value v, int depth) {
  // As deep as the gateway ever accepted; simdjson's own limit (1024) is above it.
  constexpr int kMaxValidateDepth = 512;
  return Json(v, nullptr, depth, kMaxValidateDepth);
}

absl::Status Canonicalizer::Impl::Message(od::value v, std::string* out) {
  od::object msg;
  if (v.get_object().get(msg)) {
    return absl::InvalidArgumentError("each message must be an object");
  }
  std::string_view role, name, tool_call_id, content_text;
  bool has_role = false, has_name = false, has_tool_call_id = false;
  enum class Content { kAbsent, kText, kNull, kParts } content = Content::kAbsent;
  content_.clear();
  calls_.clear();
  std::string function_call;
  for (auto field : msg) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "message key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    if (key == "role") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &role, &has_role));
    } else if (key == "name") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &name, &has_name));
    } else if (key == "tool_call_id") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &tool_call_id, &has_tool_call_id));
    } else if (key == "content") {
      od::json_type t;
      KVINDEX_STATUS_TRY(TypeOf(fv, &t, "content"));
      content_.clear();
      if (t == od::json_type::string) {
        KVINDEX_JSON_TRY(GetText(fv, &content_text), "content");
        content = Content::kText;
      } else if (t == od::json_type::array) {
        od::array parts;
        KVINDEX_JSON_TRY(fv.get_array().get(parts), "content");
        KVINDEX_STATUS_TRY(ContentParts(parts, &content_));
        content = Content::kParts;
      } else if (t == od::json_type::null) {
        content = Content::kNull;
      } else {
        return absl::InvalidArgumentError("message 'content' must be a string, array or null");
      }
    } else if (key == "tool_calls") {
      calls_.clear();
      KVINDEX_STATUS_TRY(ToolCalls(fv, &calls_));
    } else if (key == "function_call") {
      function_call.clear();
      od::json_type t;
      KVINDEX_STATUS_TRY(TypeOf(fv, &t, "function_call"));
      if (t == od::json_type::object) {
        KVINDEX_STATUS_TRY(FunctionCall(fv, &function_call));
      } else if (t != od::json_type::null) {
        return absl::InvalidArgumentError("'function_call' must be an object");
      }
    } else {
      KVINDEX_STATUS_TRY(Validate(fv, 3));
    }
  }
  out->push_back(canonical::kMessageBegin);
  out->push_back(kTagRole);
  if (has_role) {
    AppendEscaped(role, out);
  }
  if (has_name) {
    Field(kTagName, name, out);
  }
  switch (content) {
    case Content::kAbsent:
      break;
    case Content::kText:
      Field(kTagText, content_text, out);
      break;
    case Content::kNull:
      out->push_back(canonical::kField);
      out->push_back(kTagNullContent);
      break;
    case Content::kParts:
      out->append(content_);
      break;
  }
  out->append(calls_);
  out->append(function_call);
  if (has_tool_call_id) {
    Field(kTagToolResultId, tool_call_id, out);
  }
  out->push_back(canonical::kMessageEnd);
  return absl::OkStatus();
}

// Hash of a media payload: the string itself, else its "url" or "data" member, else its
// canonical JSON.
absl::Status Canonicalizer::Impl::PartPayloadHash(od::value v, uint64_t* hash) {
  od::json_type t;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "content part"));
  std::string_view s;
  if (t == od::json_type::string) {
    KVINDEX_JSON_TRY(GetText(v, &s), "content part");
    *hash = XXH3_64bits(s.data(), s.size());
    return absl::OkStatus();
  }
  if (t != od::json_type::object) {
    scratch_.clear();
    KVINDEX_STATUS_TRY(Json(v, &scratch_, 1, options_.max_nesting_depth));
    *hash = XXH3_64bits(scratch_.data(), scratch_.size());
    return absl::OkStatus();
  }
  od::object obj;
  KVINDEX_JSON_TRY(v.get_object().get(obj), "content part");
  std::string_view url, data;
  bool has_url = false, has_data = false;
  std::vector<std::pair<std::string_view, std::string>> rest;
  for (auto field : obj) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "content part key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    od::json_type ft;
    KVINDEX_STATUS_TRY(TypeOf(fv, &ft, key));
    if (key == "url" && ft == od::json_type::string) {
      KVINDEX_JSON_TRY(fv.get_string().get(url), key);
      has_url = true;
    } else if (key == "data" && ft == od::json_type::string) {
      KVINDEX_JSON_TRY(fv.get_string().get(data), key);
      has_data = true;
    } else {
      std::string value;
      KVINDEX_STATUS_TRY(Json(fv, &value, 2, options_.max_nesting_depth));
      rest.emplace_back(key, std::move(value));
    }
  }
  if (has_url) {
    *hash = XXH3_64bits(url.data(), url.size());
  } else if (has_data) {
    *hash = XXH3_64bits(data.data(), data.size());
  } else {
    std::stable_sort(rest.begin(), rest.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    scratch_.clear();
    for (const auto& [key, value] : rest) {
      AppendEscaped(key, &scratch_);
      scratch_.push_back(canonical::kStringEnd);
      scratch_.append(value);
    }
    *hash = XXH3_64bits(scratch_.data(), scratch_.size());
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::ContentParts(od::array parts, std::string* out) {
  for (auto element : parts) {
    od::value pv;
    KVINDEX_JSON_TRY(element.get(pv), "content[]");
    od::json_type t;
    KVINDEX_STATUS_TRY(TypeOf(pv, &t, "content[]"));
    if (t == od::json_type::string) {  // Lenient: a bare string part is text.
      std::string_view s;
      KVINDEX_JSON_TRY(GetText(pv, &s), "content[]");
      Field(kTagText, s, out);
      continue;
    }
    od::object part;
    if (pv.get_object().get(part)) {
      return absl::InvalidArgumentError("content parts must be objects");
    }
    std::string_view type, text;
    bool has_type = false, has_text = false;
    // Payloads are keyed by the part's type ({"type": "image_url", "image_url": {...}}); the
    // type may come after them, so hash every non-text member and pick afterwards.
    absl::InlinedVector<std::pair<std::string_view, uint64_t>, 2> payloads;
    for (auto field : part) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "content part key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      if (key == "type") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &type, &has_type));
      } else if (key == "text") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &text, &has_text));
      } else {
        uint64_t h = 0;
        KVINDEX_STATUS_TRY(PartPayloadHash(fv, &h));
        payloads.emplace_back(key, h);
      }
    }
    if (!has_type) {
      return absl::InvalidArgumentError("content part without a 'type'");
    }
    if (type == "text" || type == "input_text") {
      if (!has_text) {
        return absl::InvalidArgumentError("text content part without 'text'");
      }
      Field(kTagText, text, out);
      continue;
    }
    uint64_t h = 0;
    for (const auto& [key, value] : payloads) {
      if (key == type) {
        h = value;
      }
    }
    char tag = kTagOtherPart;
    if (type == "image_url") {
      tag = kTagImage;
    } else if (type == "input_audio") {
      tag = kTagAudio;
    } else if (type == "video_url") {
      tag = kTagVideo;
    }
    if (tag == kTagOtherPart) {
      Field(kTagOtherPart, type, out);
      out->push_back(canonical::kField);
      out->push_back(kTagPartHash);
    } else {
      out->push_back(canonical::kField);
      out->push_back(tag);
    }
    AppendHex(h, out);
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::FunctionCall(od::value v, std::string* out) {
  od::object fn;
  if (v.get_object().get(fn)) {
    return absl::InvalidArgumentError("'function' must be an object");
  }
  std::string_view name, args;
  bool has_name = false, has_args = false;
  std::string args_json;
  for (auto field : fn) {
    std::string_view key;
    KVINDEX_JSON_TRY(field.unescaped_key().get(key), "function key");
    od::value fv;
    KVINDEX_JSON_TRY(field.value().get(fv), key);
    if (key == "name") {
      KVINDEX_STATUS_TRY(StringOrNull(fv, key, &name, &has_name));
    } else if (key == "arguments") {
      od::json_type t;
      KVINDEX_STATUS_TRY(TypeOf(fv, &t, key));
      args_json.clear();
      has_args = false;
      if (t == od::json_type::string) {
        KVINDEX_JSON_TRY(GetText(fv, &args), key);
        has_args = true;
      } else {  // Some clients send arguments as an object.
        KVINDEX_STATUS_TRY(Json(fv, &args_json, 1, options_.max_nesting_depth));
      }
    } else {
      KVINDEX_STATUS_TRY(Validate(fv, 5));
    }
  }
  out->push_back(canonical::kField);
  out->push_back(kTagFunctionName);
  if (has_name) {
    AppendEscaped(name, out);
  }
  out->push_back(canonical::kField);
  out->push_back(kTagArguments);
  if (has_args) {
    AppendEscaped(args, out);
  } else {
    out->append(args_json);
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::ToolCalls(od::value v, std::string* out) {
  od::json_type t;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "tool_calls"));
  if (t == od::json_type::null) {
    return absl::OkStatus();
  }
  od::array calls;
  if (t != od::json_type::array || v.get_array().get(calls)) {
    return absl::InvalidArgumentError("'tool_calls' must be an array");
  }
  for (auto element : calls) {
    od::object call;
    if (element.get_object().get(call)) {
      return absl::InvalidArgumentError("each tool call must be an object");
    }
    std::string_view id;
    bool has_id = false, has_function = false;
    std::string function;
    for (auto field : call) {
      std::string_view key;
      KVINDEX_JSON_TRY(field.unescaped_key().get(key), "tool call key");
      od::value fv;
      KVINDEX_JSON_TRY(field.value().get(fv), key);
      if (key == "id") {
        KVINDEX_STATUS_TRY(StringOrNull(fv, key, &id, &has_id));
      } else if (key == "function") {
        function.clear();
        KVINDEX_STATUS_TRY(FunctionCall(fv, &function));
        has_function = true;
      } else {
        KVINDEX_STATUS_TRY(Validate(fv, 5));
      }
    }
    if (!has_function) {
      return absl::InvalidArgumentError("tool call without 'function'");
    }
    out->push_back(canonical::kField);
    out->push_back(kTagToolCallId);
    if (has_id) {
      AppendEscaped(id, out);
    }
    out->append(function);
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::Json(od::value v, std::string* out, int depth, int max_depth) {
  if (depth > max_depth) {
    return absl::InvalidArgumentError("JSON nesting too deep");
  }
  od::json_type t;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "value"));
  switch (t) {
    case od::json_type::object: {
      od::object obj;
      KVINDEX_JSON_TRY(v.get_object().get(obj), "object");
      std::vector<std::pair<std::string_view, std::string>> entries;
      for (auto field : obj) {
        std::string_view key;
        KVINDEX_JSON_TRY(field.unescaped_key().get(key), "object key");
        od::value fv;
        KVINDEX_JSON_TRY(field.value().get(fv), "object value");
        if (out == nullptr) {
          KVINDEX_STATUS_TRY(Json(fv, nullptr, depth + 1, max_depth));
          continue;
        }
        std::string value;
        KVINDEX_STATUS_TRY(Json(fv, &value, depth + 1, max_depth));
        entries.emplace_back(key, std::move(value));
      }
      if (out == nullptr) return absl::OkStatus();
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
    case od::json_type::array: {
      od::array arr;
      KVINDEX_JSON_TRY(v.get_array().get(arr), "array");
      if (out != nullptr) out->push_back(canonical::kArrayBegin);
      for (auto element : arr) {
        od::value ev;
        KVINDEX_JSON_TRY(element.get(ev), "array element");
        KVINDEX_STATUS_TRY(Json(ev, out, depth + 1, max_depth));
      }
      if (out != nullptr) out->push_back(canonical::kArrayEnd);
      return absl::OkStatus();
    }
    case od::json_type::string: {
      std::string_view s;
      KVINDEX_JSON_TRY(GetText(v, &s), "string");
      if (out == nullptr) return absl::OkStatus();
      out->push_back('s');
      AppendEscaped(s, out);
      out->push_back(canonical::kStringEnd);
      return absl::OkStatus();
    }
    case od::json_type::number: {
      // A token the number parser refuses (`0750`, `0"x"`) is invalid wherever it stands, in a
      // value only validated or in one kept (tools): the converter's chat body says the same.
      double d;
      const auto ec = v.get_double().get(d);
      if (ec && ec != simdjson::NUMBER_OUT_OF_RANGE) return JsonError(ec, "number");
      if (out == nullptr) return absl::OkStatus();
      out->push_back('#');
      od::number n;
      char buf[64];
      std::to_chars_result r{buf, {}};
      if (!v.get_number().get(n)) {
        if (n.is_int64()) {
          r = std::to_chars(buf, buf + sizeof(buf), n.get_int64());
        } else if (n.is_uint64()) {
          r = std::to_chars(buf, buf + sizeof(buf), n.get_uint64());
        } else {
          // simdjson 3.0's get_number() yields 0 for a double spelt with 19+ significant
          // digits (666...1500.0); its spelling, already validated, parses exactly.
          std::string_view raw = v.raw_json_token();
          double d = n.get_double();
          if (std::from_chars(raw.data(), raw.data() + raw.size(), d).ec != std::errc{}) {
            d = n.get_double();
          }
          r = std::to_chars(buf, buf + sizeof(buf), d);
        }
        out->append(buf, r.ptr - buf);
      } else {  // Out of range for 64-bit types: keep the spelling.
        std::string_view raw = v.raw_json_token();
        while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' ||
                                raw.back() == '\t')) {
          raw.remove_suffix(1);
        }
        AppendEscaped(raw, out);
      }
      out->push_back(canonical::kStringEnd);
      return absl::OkStatus();
    }
    case od::json_type::boolean: {
      bool b = false;
      KVINDEX_JSON_TRY(v.get_bool().get(b), "boolean");
      if (out != nullptr) out->push_back(b ? 'T' : 'F');
      return absl::OkStatus();
    }
    case od::json_type::null: {
      bool is_null = false;
      KVINDEX_JSON_TRY(v.is_null().get(is_null), "null");
      if (!is_null) {
        return absl::InvalidArgumentError("invalid JSON literal");
      }
      if (out != nullptr) out->push_back('N');
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown JSON value type");
}

Canonicalizer::Canonicalizer(CanonicalizeOptions options)
    : impl_(std::make_unique<Impl>(options)) {}
Canonicalizer::~Canonicalizer() = default;

absl::Status Canonicalizer::Canonicalize(std::string_view body, ApiKind api,
                                         CanonicalRequest* out) {
  return impl_->Run(body, 0, api, true, out);
}

absl::Status Canonicalizer::CanonicalizePadded(std::string_view body, size_t capacity, ApiKind api,
                                               CanonicalRequest* out) {
  return impl_->Run(body, capacity, api, true, out);
}

absl::Status Canonicalizer::Parse(std::string_view body, size_t capacity, ApiKind api,
                                  bool build_prompt, CanonicalRequest* out) {
  const bool prompt = build_prompt && api != ApiKind::kOther;
  absl::Status status = impl_->Run(body, capacity, api, prompt, out);
  if (status.ok() || !prompt) return status;
  // The walk stopped at the first problem. Without the prompt's schema checks a second walk
  // tells a malformed body (an error) from a valid body whose prompt kvgate cannot
  // canonicalise (routed without cache data; the worker judges it). Only this error path
  // reads the body twice.
  absl::Status json = impl_->Run(body, capacity, api, false, out);
  if (!json.ok()) return json;
  out->prompt_error = std::string(status.message());
  return absl::OkStatus();
}

const size_t Canonicalizer::kPaddingBytes = simdjson::SIMDJSON_PADDING;

absl::StatusOr<CanonicalRequest> Canonicalizer::Canonicalize(std::string_view body, ApiKind api) {
  CanonicalRequest out;
  absl::Status status = impl_->Run(body, 0, api, true, &out);
  if (!status.ok()) {
    return status;
  }
  return out;
}

absl::StatusOr<CanonicalRequest> CanonicalizeRequest(std::string_view body, ApiKind api) {
  Canonicalizer canonicalizer;
  return canonicalizer.Canonicalize(body, api);
}

}  // namespace kvgate::kvindex
