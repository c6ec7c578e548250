// The canonicaliser's side of prefix reuse (kvindex/prefix_reuse.h): recording what a long
// body's messages were while they are walked, and publishing it for the session's next turn.
#include <cstring>
#include <utility>

#include "kvindex/canonicalize_impl.h"
#include "kvindex/prefix_reuse.h"
#include "xxhash.h"

namespace kvgate::kvindex {

using walk::JsonError;
namespace {

// What a walk that skipped the fields before the conversation reads in their place.
std::string_view ConversationKey(ApiKind api) {
  return api == ApiKind::kResponses ? R"("input":[)" : R"("messages":[)";
}

// The request fields the top-level keys set (ReusablePrefix::Fields and CanonicalRequest name
// them alike), from one to the other.
template <typename From, typename To>
void CopyRequestFields(const From& from, To& to) {
  to.model = from.model;
  to.cache_salt = from.cache_salt;
  to.user = from.user;
  to.metadata_user_id = from.metadata_user_id;
  to.prompt_cache_key = from.prompt_cache_key;
  to.previous_response_id = from.previous_response_id;
  to.conversation = from.conversation;
  to.stream = from.stream;
  to.store = from.store;
}

}  // namespace

absl::Status Canonicalizer::Impl::RunReusing(std::string_view body, size_t capacity, ApiKind api,
                                             CanonicalRequest* out) {
  PrefixMatch match = options_.reuse->Find(body, static_cast<uint8_t>(api));
  if (match.messages < 0) {
    options_.reuse->CountMiss();
    const char* data = Padded(body, &capacity);
    return WalkAndPublish(body, data, body.size(), capacity, api, match, out);
  }
  // The body without the reused messages: [0, cut_begin) and [cut_end, end). When the entry
  // kept what the fields before the conversation made, those go too, and the conversation's
  // key takes their place: `{"messages":[<the new messages>], <the fields after>}`.
  const std::string_view key = ConversationKey(api);
  size_t inserted = 0;
  if (match.prefix->has_fields) {
    match.cut_begin = match.prefix->fields.begin;
    inserted = key.size();
  }
  const size_t length = body.size() - (match.cut_end - match.cut_begin) + inserted;
  padded_.resize(length + simdjson::SIMDJSON_PADDING);
  std::memcpy(padded_.data(), body.data(), match.cut_begin);
  std::memcpy(padded_.data() + match.cut_begin, key.data(), inserted);
  std::memcpy(padded_.data() + match.cut_begin + inserted, body.data() + match.cut_end,
              body.size() - match.cut_end);
  std::memset(padded_.data() + length, 0, simdjson::SIMDJSON_PADDING);
  absl::Status status =
      WalkAndPublish(body, padded_.data(), length, padded_.size(), api, match, out);
  if (status.ok()) return status;
  if (std::exchange(late_changed_, false)) {
    // Tools after the messages that are not the reused turn's: this body is walked whole,
    // and published for the next turn.
    ClearRequest(out);
    options_.reuse->CountMiss();
    const char* data = Padded(body, &capacity);
    return WalkAndPublish(body, data, body.size(), capacity, api, PrefixMatch{}, out);
  }
  // Whatever went wrong is the whole body's to report, as a full pass reports it.
  whole_ = true;
  status = Run(body, 0, api, true, out);
  whole_ = false;
  return status;
}

absl::Status Canonicalizer::Impl::WalkAndPublish(std::string_view body, const char* data,
                                                 size_t length, size_t capacity, ApiKind api,
                                                 const PrefixMatch& match, CanonicalRequest* out) {
  ReusablePrefix next;
  const ReusablePrefix* prev = match.prefix.get();
  if (match.messages >= 0) {
    const size_t reused = static_cast<size_t>(match.messages) + 1;
    next.separators.assign(prev->separators.begin(), prev->separators.begin() + reused);
    next.segment_hashes.assign(prev->segment_hashes.begin(), prev->segment_hashes.begin() + reused);
    next.canonical_ends.assign(prev->canonical_ends.begin(), prev->canonical_ends.begin() + reused);
    next.states.assign(prev->states.begin(), prev->states.begin() + reused);
  }
  Recorder rec{&next, &match, data};
  if (match.messages >= 0 && prev->has_fields) {
    rec.restore = &prev->fields;
    rec.inserted = ConversationKey(api).size();
    next.fields = prev->fields;
    next.has_fields = true;
  }
  KVINDEX_STATUS_TRY(Walk(body, data, length, capacity, api, true, &rec, out));
  if (match.messages >= 0) options_.reuse->CountHit(match.cut_end - match.cut_begin);
  // (A Responses body whose input is a string has no messages to keep.)
  if (!rec.ok || next.separators.empty()) return absl::OkStatus();
  for (size_t i = next.segment_hashes.size(); i < next.separators.size(); ++i) {
    next.segment_hashes.push_back(
        SegmentHash(body, i == 0 ? 0 : next.separators[i - 1], next.separators[i]));
  }
  CanonicalPrompt& prompt = out->prompts.back();
  // The previous prompt's block hashes hold for this one as far as both are the same bytes:
  // through the reused messages when the header before them is the same too.
  // (Borrowed bytes are the previous entry's, its header included.)
  if (match.messages >= 0 && prev->header_bytes == next.header_bytes &&
      (prompt.borrowed != nullptr ||
       prev->CanonicalStartsWith(std::string_view(prompt.bytes).substr(0, next.header_bytes)))) {
    prompt.reused_blocks = prev->blocks;
    prompt.reused_bytes = next.header_bytes + prev->canonical_ends[match.messages];
  }
  // The same bytes are shared with the previous entry, not copied again.
  next.KeepCanonical(prompt, prev, prompt.reused_bytes);
  next.blocks = std::make_shared<BlockMemo>(ReusablePrefix::MaxHashes(next.canonical_size));
  prompt.blocks_memo = next.blocks;
  next.key = PrefixReuseCache::KeyOf(body, static_cast<uint8_t>(api));
  out->messages_layout = std::make_shared<const ReusablePrefix>(std::move(next));
  options_.reuse->Publish(out->messages_layout);
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::HashLateSection(const Recorder& rec, const char* begin,
                                                  uint64_t tag, uint64_t* hash) {
  const char* end = nullptr;
  KVINDEX_JSON_TRY(rec.doc->current_location().get(end), "tools");
  *hash = XXH3_64bits_withSeed(begin, static_cast<size_t>(end - begin), *hash ^ tag);
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::SkipArray(od::value v) {
  od::array array;
  std::string_view raw;
  KVINDEX_JSON_TRY(v.get_array().get(array), "tools");
  KVINDEX_JSON_TRY(array.raw_json().get(raw), "tools");
  return absl::OkStatus();
}

void Canonicalizer::Impl::Recorder::PlaceReused(CanonicalPrompt* prompt, bool entrys_header) const {
  const ReusablePrefix& prev = *match->prefix;
  // A 400 KB turn's reused messages are ~390 KB that nothing reads whole in approximate mode
  // (hashing resumes after them): borrowing them spares the copy.
  if (entrys_header ||
      (prompt->bytes.size() == prev.header_bytes && prev.CanonicalStartsWith(prompt->bytes))) {
    prompt->borrowed = match->prefix;
    prompt->borrowed_bytes = prev.header_bytes + prev.canonical_ends[match->messages];
    prompt->bytes.clear();
  } else {
    prev.AppendMessagesThrough(match->messages, &prompt->bytes);
  }
}

void Canonicalizer::Impl::Recorder::Begin(CanonicalPrompt* prompt, bool entrys_header) {
  if (match->messages >= 0) {
    const ReusablePrefix& prev = *match->prefix;
    if (prompt != nullptr) PlaceReused(prompt, entrys_header);
    next->messages_begin = prev.messages_begin;
    return;
  }
  const char* at = nullptr;
  if (doc->current_location().get(at)) {
    ok = false;
    return;
  }
  next->messages_begin = static_cast<size_t>(at - data);
}

void Canonicalizer::Impl::Recorder::FieldsBegin() {
  if (restore != nullptr) return;
  const char* at = nullptr;
  // The cut must start where a key does (after `{` and whitespace).
  if (!doc->current_location().get(at) && *at == '"') {
    next->fields.begin = static_cast<size_t>(at - data);
    next->has_fields = true;
  }
}

void Canonicalizer::Impl::Recorder::KeepFields(const CanonicalRequest& out, std::string_view system,
                                               bool has_tools, std::string_view tools,
                                               std::string_view functions) {
  ReusablePrefix::Fields& f = next->fields;
  CopyRequestFields(out, f);
  f.system.assign(system);
  f.has_tools = has_tools;
  f.tools.assign(tools);
  f.functions.assign(functions);
}

void Canonicalizer::Impl::Recorder::RestoreFields(CanonicalRequest* out) const {
  CopyRequestFields(*restore, *out);
}

void Canonicalizer::Impl::Recorder::MessageEnd(size_t canonical_end, uint8_t state) {
  const char* at = nullptr;
  if (!ok || doc->current_location().get(at) || (*at != ',' && *at != ']')) {
    ok = false;
    return;
  }
  next->separators.push_back(static_cast<uint32_t>(BodyOffset(static_cast<size_t>(at - data))));
  next->canonical_ends.push_back(static_cast<uint32_t>(canonical_end));
  next->states.push_back(state);
}

void Canonicalizer::Impl::AgentCanonical(Recorder* rec, CanonicalPrompt* prompt) {
  std::string* out = &prompt->bytes;
  if (rec == nullptr) {
    agent::AppendCanonical(conv_, out);
    return;
  }
  agent::AppendCanonicalHeader(conv_, out);
  const size_t header = out->size();
  size_t reused = 0;
  if (rec->match->messages >= 0) {
    reused = static_cast<size_t>(rec->match->messages) + 1;
    rec->PlaceReused(prompt);
  }
  // ends[j]: where the canonical bytes of the first j converted messages end.
  std::vector<uint32_t> ends;
  ends.reserve(conv_.messages.size() + 1);
  ends.push_back(static_cast<uint32_t>(prompt->size() - header));
  for (const agent::Message& m : conv_.messages) {
    agent::AppendCanonicalMessage(conv_, m, out);
    ends.push_back(static_cast<uint32_t>(prompt->size() - header));
  }
  if (!rec->ok) return;
  std::vector<uint32_t>& recorded = rec->next->canonical_ends;  // message counts until now
  for (size_t i = reused; i < recorded.size(); ++i) recorded[i] = ends[recorded[i]];
  rec->next->header_bytes = header;
}

}  // namespace kvgate::kvindex
