// File: kvevents/publisher.h
// vLLM's KV-event wire format and publisher (what an engine sends; kvgate-sim and kvgate-store
// publish with it) (shared/reference/protocols.md §1): msgpack event
// batches, a ZMQ PUB socket sending [topic, seq (8-byte big-endian), payload], and an optional
// ROUTER socket that replays the last N batches on request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvevents/endpoints.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace kvgate::kvevents {

/// Where a block lives: the `medium` field of the events.
enum class Medium : uint8_t { kGpu = 0, kCpu = 1, kStore = 2 };

/// "GPU" / "CPU" / "STORE".
std::string_view MediumName(Medium medium);

/// One KV event to publish, as vLLM's BlockStored / BlockRemoved / AllBlocksCleared. A value
/// type.
struct PublishedEvent {
  enum class Type : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = Type::kBlockStored;
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // BlockStored only; null at the prompt root.
  std::vector<uint32_t> token_ids;            // BlockStored only; block_size per hash.
  uint32_t block_size = 0;
  Medium medium = Medium::kGpu;
  // Hybrid models (vLLM PRs #37688, #40984): the KV-cache group the blocks belong to and, on
  // BlockStored, the group's kind ("full_attention", "sliding_window", "mamba") and window
  // (tokens). Unset fields are not sent, so an event without them encodes as before; with any
  // of them a BlockStored also carries extra_keys (one nil per block, as vLLM sends).
  std::optional<int64_t> group_idx;
  std::optional<std::string> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
};

/// How events are encoded: msgspec `array_like` (vLLM <= 0.23, the default) or tagged maps
/// (vLLM PR #42892). The outer batch is `[ts, [events...], data_parallel_rank]` in both.
enum class EventEncoding : uint8_t { kArray, kMap };

/// Appends the msgpack of one KVEventBatch to `*out`. Hashes are msgpack uints (0xcf for values
/// >= 2^32, so every value >= 2^63 too). Stateless; thread-safe.
void EncodeEventBatch(double ts, absl::Span<const PublishedEvent> events,
                      std::optional<int> dp_rank, EventEncoding encoding, std::string* out);

struct PublisherOptions {
  std::string endpoint;         // PUB address.
  std::string replay_endpoint;  // ROUTER address; empty: no replay.
  std::string topic;
  bool force_bind = false;  // Bind the PUB socket whatever ShouldBind() says.
  size_t buffer_steps = 10000;
  int hwm = 100000;
  EventEncoding encoding = EventEncoding::kArray;
  std::optional<int> dp_rank = 0;
  // Fault injection: this fraction of batches is not sent live (still kept for replay), as a
  // PUB past its high-water mark or a dropped subscriber connection loses them. Drawn
  // deterministically from (drop_seed, sequence).
  double drop_live_rate = 0;
  uint64_t drop_seed = 0;
};

/// One engine's publisher. Sequence numbers start at 0 per process, as vLLM's. Not a thread of
/// its own: Publish() and ServiceReplay() run on the caller's thread and never block.
/// Thread-compatible.
class KvEventPublisher {
 public:
  /// Creates the sockets. `context` must outlive the publisher.
  /// @return kInvalidArgument / kUnavailable when an endpoint cannot be bound or connected.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(zmq::context_t& context,
                                                                  PublisherOptions options);
  ~KvEventPublisher();

  /// Sends one batch (nothing when `events` is empty) and keeps it for replay.
  void Publish(double ts, absl::Span<const PublishedEvent> events);
  /// Answers pending replay requests (non-blocking).
  void ServiceReplay();

  /// The addresses actually bound or connected (a '*' port resolved).
  const std::string& endpoint() const;
  const std::string& replay_endpoint() const;
  uint64_t next_seq() const;
  bool has_replay() const;

 private:
  struct Impl;
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::kvevents
