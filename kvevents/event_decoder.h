// File: kvevents/event_decoder.h
// Decodes vLLM/SGLang KV-cache events (shared/reference/protocols.md §1): the msgpack payload of
// one ZMQ message (one EventBatch) and the 8-byte sequence frame. Pure decoding: no sockets, no
// state. Accepts every encoding seen in the wild: the legacy positional form (`array_like`
// batches and events) and the map form (events, and possibly the batch, as msgpack maps), with
// integer (uint64 or negative int64) or byte-string block hashes.
//
// Example:
//   absl::StatusOr<EventBatch> batch = DecodeEventBatch(frames[2]);
//   if (!batch.ok()) { /* count and drop the message */ }
//   for (const KvEvent& event : batch->events) {
//     if (const auto* stored = std::get_if<BlockStored>(&event)) { ... }
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace kvgate::kvevents {

/// The engine's block hash as an opaque 64-bit id. A msgpack uint64 is taken as is; a negative
/// int64 (old vLLM sent Python hash()) is bit-cast; bin or str bytes
/// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: the raw 32-byte sha256) are folded with XXH3-64, so
/// equal bytes give equal ids. Ids are comparable only within one engine's event stream.
using EngineBlockId = uint64_t;

/// New full blocks cached by the engine, in chain order (vLLM `BlockStored`).
struct BlockStored {
  std::vector<EngineBlockId> block_hashes;
  std::optional<EngineBlockId> parent_block_hash;  // nullopt at the prompt root.
  std::vector<uint32_t> token_ids;  // All new blocks' tokens: block_hashes.size() * block_size.
  uint32_t block_size = 0;
  std::optional<int64_t> lora_id;     // Deprecated by vLLM in favour of lora_name.
  std::optional<std::string> medium;  // "GPU", "cpu", ...; nullopt: the engine's default (GPU).
  std::optional<std::string> lora_name;
  std::optional<int64_t> group_idx;  // KV-cache group of hybrid models.
  // The group's layer kind ("full_attention", "sliding_window", "mamba", ...) and, for a
  // sliding window, its width in tokens (vLLM PR #40984).
  std::optional<std::string> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
};

/// Blocks evicted from `medium` (vLLM `BlockRemoved`).
struct BlockRemoved {
  std::vector<EngineBlockId> block_hashes;
  std::optional<std::string> medium;
  std::optional<int64_t> group_idx;
};

/// The whole cache (or one medium, when set) was cleared (vLLM `AllBlocksCleared`).
struct AllBlocksCleared {
  std::optional<std::string> medium;
};

using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

/// One engine step's events (vLLM `KVEventBatch`).
struct EventBatch {
  double ts = 0;  // The engine's wall clock (time.time()), seconds.
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;  // nullopt: old vLLM, or not sent.
  size_t ignored_events = 0;                  // Events with an unknown tag, skipped.
};

/// Decodes one msgpack EventBatch. The batch is `[ts, events, dp_rank?]` or a map with keys
/// "ts", "events", "data_parallel_rank". Each event is an array with its tag in slot 0 and the
/// fields in declaration order (missing trailing fields are null, extra ones ignored), or a map
/// with the tag under "type". Unknown map keys are ignored; events with unknown tags are skipped
/// and counted in `ignored_events`. Never reads outside `payload` and allocates at most in
/// proportion to its size. Pure; thread-safe.
/// @return kInvalidArgument, with a message saying what and where (e.g. "event 2: block_hashes:
///         expected array"), on invalid or truncated msgpack, trailing bytes, a missing required
///         field, a field of the wrong type, a token id above 2^32-1, or a BlockStored whose
///         token_ids size is not block_hashes.size() * block_size (when block_size > 0).
absl::StatusOr<EventBatch> DecodeEventBatch(std::string_view payload);

/// The sequence number of frame 1 of a PUB message or of a replay reply: exactly 8 bytes,
/// big-endian. nullopt for any other size.
std::optional<uint64_t> DecodeSequence(std::string_view frame);

/// The 8-byte big-endian frame for `seq` (what a replay request carries).
std::string EncodeSequence(uint64_t seq);

/// The sequence number of the replay end marker (the publisher sends -1 as signed 8 bytes).
inline constexpr uint64_t kReplayEndSequence = ~uint64_t{0};

}  // namespace kvgate::kvevents
