// The canonicaliser's side of prefix reuse (kvindex/prefix_reuse.h): recording what a long chat
// body's messages were while they are walked, and publishing it for the session's next turn.
#include <cstring>

#include "kvindex/canonicalize_impl.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::kvindex {

absl::Status Canonicalizer::Impl::RunReusing(std::string_view body, size_t capacity,
                                             CanonicalRequest* out) {
  const PrefixMatch match = options_.reuse->Find(body);
  if (match.messages < 0) {
    options_.reuse->CountMiss();
    const char* data = Padded(body, &capacity);
    return WalkAndPublish(body, data, body.size(), capacity, match, out);
  }
  // The body without the reused messages: [0, cut_begin) and [cut_end, end).
  const size_t length = body.size() - (match.cut_end - match.cut_begin);
  padded_.resize(length + simdjson::SIMDJSON_PADDING);
  std::memcpy(padded_.data(), body.data(), match.cut_begin);
  std::memcpy(padded_.data() + match.cut_begin, body.data() + match.cut_end,
              body.size() - match.cut_end);
  std::memset(padded_.data() + length, 0, simdjson::SIMDJSON_PADDING);
  absl::Status status = WalkAndPublish(body, padded_.data(), length, padded_.size(), match, out);
  if (status.ok()) return status;
  // Whatever went wrong is the whole body's to report, as a full pass reports it.
  whole_ = true;
  status = Run(body, 0, ApiKind::kChatCompletions, true, out);
  whole_ = false;
  return status;
}

absl::Status Canonicalizer::Impl::WalkAndPublish(std::string_view body, const char* data,
                                                 size_t length, size_t capacity,
                                                 const PrefixMatch& match, CanonicalRequest* out) {
  ReusablePrefix next;
  const ReusablePrefix* prev = match.prefix.get();
  if (match.messages >= 0) {
    const size_t reused = static_cast<size_t>(match.messages) + 1;
    next.separators.assign(prev->separators.begin(), prev->separators.begin() + reused);
    next.segment_hashes.assign(prev->segment_hashes.begin(), prev->segment_hashes.begin() + reused);
    next.canonical_ends.assign(prev->canonical_ends.begin(), prev->canonical_ends.begin() + reused);
  }
  Recorder rec{&next, &match, data};
  KVINDEX_STATUS_TRY(
      Walk(body, data, length, capacity, ApiKind::kChatCompletions, true, &rec, out));
  if (match.messages >= 0) options_.reuse->CountHit(match.cut_end - match.cut_begin);
  if (!rec.ok) return absl::OkStatus();
  for (size_t i = next.segment_hashes.size(); i < next.separators.size(); ++i) {
    next.segment_hashes.push_back(
        SegmentHash(body, i == 0 ? 0 : next.separators[i - 1], next.separators[i]));
  }
  next.key = PrefixReuseCache::KeyOf(body);
  options_.reuse->Publish(std::make_shared<const ReusablePrefix>(std::move(next)));
  return absl::OkStatus();
}

void Canonicalizer::Impl::Recorder::Begin(od::document& doc, std::string* canonical) {
  if (match->messages >= 0) {
    const ReusablePrefix& prev = *match->prefix;
    canonical->append(prev.canonical, 0, prev.canonical_ends[match->messages]);
    next->messages_begin = prev.messages_begin;
    return;
  }
  const char* at = nullptr;
  if (doc.current_location().get(at)) {
    ok = false;
    return;
  }
  next->messages_begin = static_cast<size_t>(at - data);
}

void Canonicalizer::Impl::Recorder::MessageEnd(od::document& doc, size_t canonical_end) {
  const char* at = nullptr;
  if (!ok || doc.current_location().get(at) || (*at != ',' && *at != ']')) {
    ok = false;
    return;
  }
  next->separators.push_back(static_cast<uint32_t>(BodyOffset(static_cast<size_t>(at - data))));
  next->canonical_ends.push_back(static_cast<uint32_t>(canonical_end));
}

}  // namespace kvgate::kvindex
