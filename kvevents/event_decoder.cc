#include "kvevents/event_decoder.h"

#include <msgpuck.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xxhash.h"

namespace kvgate::kvevents {
namespace {

// mp_next() counts pending elements in an int. In a payload Validate() accepted, no count exceeds
// the payload size, so this cap keeps mp_next() from wrapping. Real batches are kilobytes.
constexpr size_t kMaxPayloadBytes = size_t{1} << 30;

// Every decoded event takes more bytes than this (the shortest, `["BlockRemoved", []]`, 15), so
// reserving at most bytes / kMinEventBytes events never allocates for events that cannot be there.
constexpr size_t kMinEventBytes = 8;

// absl::string_view is not std::string_view in Debian's Abseil build: messages use Abseil's.
absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Validates one msgpack value at *p and moves *p past it. mp_check() alone is not enough: it
// counts pending elements in an int, and a header claiming >= 2^31 elements wraps it, so
// mp_check() passes e.g. `dd ff ff ff ff` (an array32 of 2^32-1 items, no items). This counts in
// uint64 and leaves scalars (and str/bin/ext lengths) to mp_check(). Every pending element takes
// at least one byte, so a count above the bytes left fails at once instead of at the end.
// Iterative, like mp_next(): nesting depth costs no stack.
bool Validate(const char** p, const char* end) {
  uint64_t pending = 1;
  while (pending > 0) {
    if (*p >= end) {
      return false;
    }
    --pending;
    switch (mp_typeof(**p)) {
      case MP_ARRAY:
        if (mp_check_array(*p, end) > 0) {
          return false;
        }
        pending += mp_decode_array(p);
        break;
      case MP_MAP:
        if (mp_check_map(*p, end) > 0) {
          return false;
        }
        pending += uint64_t{2} * mp_decode_map(p);
        break;
      default:
        if (mp_check(p, end) != 0) {
          return false;
        }
        break;
    }
    if (pending > static_cast<uint64_t>(end - *p)) {
      return false;
    }
  }
  return true;
}

// Everything below walks a payload that Validate() accepted, so the mp_decode_*() calls stay
// in bounds; they only check types. Each returns a message without its location, which the
// caller prefixes.

bool IsStr(const char* p, std::string_view s) {
  if (mp_typeof(*p) != MP_STR) {
    return false;
  }
  uint32_t len = 0;
  const char* data = mp_decode_str(&p, &len);
  return len == s.size() && std::memcmp(data, s.data(), len) == 0;
}

absl::StatusOr<EngineBlockId> DecodeBlockId(const char** p) {
  switch (mp_typeof(**p)) {
    case MP_UINT:
      return mp_decode_uint(p);
    case MP_INT:
      return static_cast<uint64_t>(mp_decode_int(p));
    case MP_STR:
    case MP_BIN: {
      uint32_t len = 0;
      const char* data = mp_decode_strbin(p, &len);
      return XXH3_64bits(data, len);
    }
    default:
      return absl::InvalidArgumentError("expected int, bin or str");
  }
}

absl::Status DecodeBlockIds(const char** p, absl::string_view name,
                            std::vector<EngineBlockId>* out) {
  if (mp_typeof(**p) != MP_ARRAY) {
    return Invalid(name, "expected array");
  }
  const uint32_t n = mp_decode_array(p);
  out->reserve(n);  // Validated: n <= bytes left.
  for (uint32_t i = 0; i < n; ++i) {
    absl::StatusOr<EngineBlockId> id = DecodeBlockId(p);
    if (!id.ok()) {
      return Invalid(absl::StrCat(name, "[", i, "]"), id.status().message());
    }
    out->push_back(*id);
  }
  return absl::OkStatus();
}

absl::Status DecodeOptBlockId(const char** p, absl::string_view name,
                              std::optional<EngineBlockId>* out) {
  if (mp_typeof(**p) == MP_NIL) {
    mp_decode_nil(p);
    out->reset();
    return absl::OkStatus();
  }
  absl::StatusOr<EngineBlockId> id = DecodeBlockId(p);
  if (!id.ok()) {
    return Invalid(name, "expected int, bin, str or nil");
  }
  *out = *id;
  return absl::OkStatus();
}

absl::Status DecodeUint32(const char** p, absl::string_view name, uint32_t* out) {
  if (mp_typeof(**p) != MP_UINT) {
    return Invalid(name, "expected uint32");
  }
  const uint64_t v = mp_decode_uint(p);
  if (v > std::numeric_limits<uint32_t>::max()) {
    return Invalid(name, absl::StrCat("expected uint32, got ", v));
  }
  *out = static_cast<uint32_t>(v);
  return absl::OkStatus();
}

absl::Status DecodeTokenIds(const char** p, std::vector<uint32_t>* out) {
  if (mp_typeof(**p) != MP_ARRAY) {
    return Invalid("token_ids", "expected array");
  }
  const uint32_t n = mp_decode_array(p);
  out->reserve(n);  // Validated: n <= bytes left.
  for (uint32_t i = 0; i < n; ++i) {
    // The hot loop of the events thread: name the element only when it is wrong.
    if (mp_typeof(**p) == MP_UINT) {
      const uint64_t v = mp_decode_uint(p);
      if (v <= std::numeric_limits<uint32_t>::max()) {
        out->push_back(static_cast<uint32_t>(v));
        continue;
      }
      return Invalid(absl::StrCat("token_ids[", i, "]"), absl::StrCat("expected uint32, got ", v));
    }
    return Invalid(absl::StrCat("token_ids[", i, "]"), "expected uint32");
  }
  return absl::OkStatus();
}

absl::Status DecodeOptInt64(const char** p, absl::string_view name, std::optional<int64_t>* out) {
  switch (mp_typeof(**p)) {
    case MP_NIL:
      mp_decode_nil(p);
      out->reset();
      return absl::OkStatus();
    case MP_UINT: {
      const uint64_t v = mp_decode_uint(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Invalid(name, absl::StrCat("expected int64, got ", v));
      }
      *out = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
    case MP_INT:
      *out = mp_decode_int(p);
      return absl::OkStatus();
    default:
      return Invalid(name, "expected int or nil");
  }
}

absl::Status DecodeOptString(const char** p, absl::string_view name,
                             std::optional<std::string>* out) {
  switch (mp_typeof(**p)) {
    case MP_NIL:
      mp_decode_nil(p);
      out->reset();
      return absl::OkStatus();
    case MP_STR: {
      uint32_t len = 0;
      const char* data = mp_decode_str(p, &len);
      out->emplace(data, len);
      return absl::OkStatus();
    }
    default:
      return Invalid(name, "expected str or nil");
  }
}

// --- Events ---

enum class Field : uint8_t {
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kGroupIdx,
  kSpecKind,
  kSlidingWindow,
  kIgnored,  // Known but unused (extra_keys).
};

struct FieldSpec {
  absl::string_view name;
  Field field;
};

// Declaration order (protocols.md §1.4) = slot order in the positional form, after the tag.
// Fields after these are extra trailing fields and skipped.
constexpr FieldSpec kBlockStoredFields[] = {
    {"block_hashes", Field::kBlockHashes},
    {"parent_block_hash", Field::kParentBlockHash},
    {"token_ids", Field::kTokenIds},
    {"block_size", Field::kBlockSize},
    {"lora_id", Field::kLoraId},
    {"medium", Field::kMedium},
    {"lora_name", Field::kLoraName},
    {"extra_keys", Field::kIgnored},
    {"group_idx", Field::kGroupIdx},
    {"kv_cache_spec_kind", Field::kSpecKind},
    {"kv_cache_spec_sliding_window", Field::kSlidingWindow},
};
constexpr FieldSpec kBlockRemovedFields[] = {
    {"block_hashes", Field::kBlockHashes},
    {"medium", Field::kMedium},
    {"group_idx", Field::kGroupIdx},
};
// vLLM's AllBlocksCleared has no fields; some forks add `medium`.
constexpr FieldSpec kAllBlocksClearedFields[] = {
    {"medium", Field::kMedium},
};

enum class Kind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared, kUnknown };

Kind KindOf(std::string_view tag) {
  if (tag == "BlockStored") {
    return Kind::kBlockStored;
  }
  if (tag == "BlockRemoved") {
    return Kind::kBlockRemoved;
  }
  if (tag == "AllBlocksCleared") {
    return Kind::kAllBlocksCleared;
  }
  return Kind::kUnknown;
}

std::span<const FieldSpec> FieldsOf(Kind kind) {
  switch (kind) {
    case Kind::kBlockStored:
      return kBlockStoredFields;
    case Kind::kBlockRemoved:
      return kBlockRemovedFields;
    case Kind::kAllBlocksCleared:
      return kAllBlocksClearedFields;
    case Kind::kUnknown:
      break;
  }
  return {};
}

// Every field of every event kind, filled as the fields arrive (in slot or key order).
struct EventFields {
  BlockStored stored;  // Also holds BlockRemoved's and AllBlocksCleared's fields.
  bool has_block_hashes = false;
  bool has_token_ids = false;
  bool has_block_size = false;
};

absl::Status DecodeField(const FieldSpec& spec, const char** p, EventFields* e) {
  BlockStored& s = e->stored;
  switch (spec.field) {
    case Field::kBlockHashes:
      s.block_hashes.clear();
      e->has_block_hashes = true;
      return DecodeBlockIds(p, spec.name, &s.block_hashes);
    case Field::kParentBlockHash:
      return DecodeOptBlockId(p, spec.name, &s.parent_block_hash);
    case Field::kTokenIds:
      s.token_ids.clear();
      e->has_token_ids = true;
      return DecodeTokenIds(p, &s.token_ids);
    case Field::kBlockSize:
      e->has_block_size = true;
      return DecodeUint32(p, spec.name, &s.block_size);
    case Field::kLoraId:
      return DecodeOptInt64(p, spec.name, &s.lora_id);
    case Field::kMedium:
      return DecodeOptString(p, spec.name, &s.medium);
    case Field::kLoraName:
      return DecodeOptString(p, spec.name, &s.lora_name);
    case Field::kGroupIdx:
      return DecodeOptInt64(p, spec.name, &s.group_idx);
    case Field::kSpecKind:
      return DecodeOptString(p, spec.name, &s.kv_cache_spec_kind);
    case Field::kSlidingWindow:
      return DecodeOptInt64(p, spec.name, &s.kv_cache_spec_sliding_window);
    case Field::kIgnored:
      mp_next(p);
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<KvEvent> BuildEvent(Kind kind, EventFields&& e) {
  BlockStored& s = e.stored;
  if (kind == Kind::kAllBlocksCleared) {
    return AllBlocksCleared{std::move(s.medium)};
  }
  if (!e.has_block_hashes) {
    return absl::InvalidArgumentError("missing block_hashes");
  }
  if (kind == Kind::kBlockRemoved) {
    return BlockRemoved{std::move(s.block_hashes), std::move(s.medium), s.group_idx};
  }
  if (!e.has_token_ids) {
    return absl::InvalidArgumentError("missing token_ids");
  }
  if (!e.has_block_size) {
    return absl::InvalidArgumentError("missing block_size");
  }
  // vLLM sends the tokens of exactly the new blocks; anything else would misplace them.
  const uint64_t expected = uint64_t{s.block_hashes.size()} * s.block_size;
  if (s.block_size > 0 && s.token_ids.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_ids: ", s.token_ids.size(), " ids, expected block_hashes.size() * block_size = ",
        s.block_hashes.size(), " * ", s.block_size, " = ", expected));
  }
  return std::move(s);
}

// Positional event: `[tag, field...]`; *p is past the array header, `n` slots remain.
absl::Status DecodeArrayEvent(const char** p, uint32_t n, Kind kind, EventFields* e) {
  const std::span<const FieldSpec> fields = FieldsOf(kind);
  for (uint32_t i = 0; i < n; ++i) {
    if (i < fields.size()) {
      absl::Status s = DecodeField(fields[i], p, e);
      if (!s.ok()) {
        return s;
      }
    } else {
      mp_next(p);  // Extra trailing field from a newer schema.
    }
  }
  return absl::OkStatus();
}

// Map event: `{"type": tag, name: field, ...}`; *p is past the map header, `n` pairs remain.
absl::Status DecodeMapEvent(const char** p, uint32_t n, Kind kind, EventFields* e) {
  const std::span<const FieldSpec> fields = FieldsOf(kind);
  for (uint32_t i = 0; i < n; ++i) {
    const FieldSpec* spec = nullptr;
    if (mp_typeof(**p) == MP_STR) {
      uint32_t len = 0;
      const char* key_data = mp_decode_str(p, &len);
      const absl::string_view key(key_data, len);
      auto it = std::find_if(fields.begin(), fields.end(),
                             [&](const FieldSpec& f) { return f.name == key; });
      if (it != fields.end()) {
        spec = &*it;
      }
    } else {
      mp_next(p);  // A non-string key cannot name a field.
    }
    if (spec == nullptr) {
      mp_next(p);  // "type" (already read), or a key from a newer schema or from SGLang.
      continue;
    }
    absl::Status s = DecodeField(*spec, p, e);
    if (!s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Decodes one event at *p into `out`; unknown tags leave `out` empty. *p ends past the event.
absl::Status DecodeEvent(const char** p, std::optional<KvEvent>* out) {
  std::string_view tag;
  Kind kind = Kind::kUnknown;
  EventFields fields;
  absl::Status status;
  switch (mp_typeof(**p)) {
    case MP_ARRAY: {
      uint32_t n = mp_decode_array(p);
      if (n == 0 || mp_typeof(**p) != MP_STR) {
        return absl::InvalidArgumentError("expected a str tag in slot 0");
      }
      uint32_t len = 0;
      const char* data = mp_decode_str(p, &len);
      tag = std::string_view(data, len);
      kind = KindOf(tag);
      if (kind == Kind::kUnknown) {
        for (--n; n > 0; --n) {
          mp_next(p);
        }
        return absl::OkStatus();
      }
      status = DecodeArrayEvent(p, n - 1, kind, &fields);
      break;
    }
    case MP_MAP: {
      const uint32_t n = mp_decode_map(p);
      // The tag can be under any key position: find it first, then decode the fields.
      const char* pairs = *p;
      bool has_tag = false;
      for (uint32_t i = 0; i < n; ++i) {
        const bool is_type_key = !has_tag && IsStr(*p, "type");
        mp_next(p);
        if (is_type_key) {
          if (mp_typeof(**p) != MP_STR) {
            return absl::InvalidArgumentError("type: expected str");
          }
          uint32_t len = 0;
          const char* data = mp_decode_str(p, &len);
          tag = std::string_view(data, len);
          has_tag = true;
        } else {
          mp_next(p);
        }
      }
      if (!has_tag) {
        return absl::InvalidArgumentError("missing type");
      }
      kind = KindOf(tag);
      if (kind == Kind::kUnknown) {
        return absl::OkStatus();  // *p is already past the map.
      }
      *p = pairs;
      status = DecodeMapEvent(p, n, kind, &fields);
      break;
    }
    default:
      return absl::InvalidArgumentError("expected array or map");
  }
  if (!status.ok()) {
    return status;
  }
  absl::StatusOr<KvEvent> event = BuildEvent(kind, std::move(fields));
  if (!event.ok()) {
    return event.status();
  }
  *out = std::move(*event);
  return absl::OkStatus();
}

absl::Status DecodeEvents(const char** p, const char* end, EventBatch* batch) {
  if (mp_typeof(**p) != MP_ARRAY) {
    return absl::InvalidArgumentError("batch: events: expected array");
  }
  const uint32_t n = mp_decode_array(p);
  batch->events.reserve(std::min<size_t>(n, static_cast<size_t>(end - *p) / kMinEventBytes));
  for (uint32_t i = 0; i < n; ++i) {
    std::optional<KvEvent> event;
    absl::Status s = DecodeEvent(p, &event);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("event ", i, ": ", s.message()));
    }
    if (event.has_value()) {
      batch->events.push_back(std::move(*event));
    } else {
      ++batch->ignored_events;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeTs(const char** p, double* out) {
  switch (mp_typeof(**p)) {
    case MP_DOUBLE:
      *out = mp_decode_double(p);
      return absl::OkStatus();
    case MP_FLOAT:
      *out = mp_decode_float(p);
      return absl::OkStatus();
    case MP_UINT:
      *out = static_cast<double>(mp_decode_uint(p));
      return absl::OkStatus();
    case MP_INT:
      *out = static_cast<double>(mp_decode_int(p));
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("batch: ts: expected number");
  }
}

absl::Status DecodeDpRank(const char** p, EventBatch* batch) {
  return DecodeOptInt64(p, "batch: data_parallel_rank", &batch->data_parallel_rank);
}

}  // namespace

absl::StatusOr<EventBatch> DecodeEventBatch(std::string_view payload) {
  if (payload.size() > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", payload.size(), " bytes > ", kMaxPayloadBytes));
  }
  const char* const begin = payload.data();
  const char* const end = begin + payload.size();
  const char* p = begin;
  if (!Validate(&p, end)) {
    return absl::InvalidArgumentError("invalid or truncated msgpack");
  }
  if (p != end) {
    return absl::InvalidArgumentError(
        absl::StrCat("trailing bytes after the batch (", end - p, " of ", payload.size(), ")"));
  }
  p = begin;
  EventBatch batch;
  absl::Status s;
  switch (mp_typeof(*p)) {
    case MP_ARRAY: {
      // [ts, events, data_parallel_rank]; old vLLM (before PR #18925) sends no rank.
      const uint32_t n = mp_decode_array(&p);
      if (n < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: expected [ts, events, data_parallel_rank?], got ", n, " items"));
      }
      s = DecodeTs(&p, &batch.ts);
      if (s.ok()) {
        s = DecodeEvents(&p, end, &batch);
      }
      if (s.ok() && n >= 3) {
        s = DecodeDpRank(&p, &batch);
      }
      break;
    }
    case MP_MAP: {
      const uint32_t n = mp_decode_map(&p);
      bool has_ts = false;
      bool has_events = false;
      for (uint32_t i = 0; i < n && s.ok(); ++i) {
        if (IsStr(p, "ts")) {
          mp_next(&p);
          s = DecodeTs(&p, &batch.ts);
          has_ts = true;
        } else if (IsStr(p, "events")) {
          mp_next(&p);
          batch.events.clear();
          batch.ignored_events = 0;
          s = DecodeEvents(&p, end, &batch);
          has_events = true;
        } else if (IsStr(p, "data_parallel_rank")) {
          mp_next(&p);
          s = DecodeDpRank(&p, &batch);
        } else {
          mp_next(&p);
          mp_next(&p);
        }
      }
      if (s.ok() && !has_ts) {
        s = absl::InvalidArgumentError("batch: missing ts");
      }
      if (s.ok() && !has_events) {
        s = absl::InvalidArgumentError("batch: missing events");
      }
      break;
    }
    default:
      return absl::InvalidArgumentError("batch: expected array or map");
  }
  if (!s.ok()) {
    return s;
  }
  return batch;
}

std::optional<uint64_t> DecodeSequence(std::string_view frame) {
  if (frame.size() != 8) {
    return std::nullopt;
  }
  uint64_t seq = 0;
  for (char c : frame) {
    seq = (seq << 8) | static_cast<uint8_t>(c);
  }
  return seq;
}

std::string EncodeSequence(uint64_t seq) {
  std::string frame(8, '\0');
  for (int i = 7; i >= 0; --i) {
    frame[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return frame;
}

}  // namespace kvgate::kvevents
