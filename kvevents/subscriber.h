// File: kvevents/subscriber.h
// Subscribes to every engine's KV-event publisher (one ZMQ SUB per worker and DP rank) on one
// dedicated events thread, keeps each stream continuous and applies it to the precise index:
//  - the 8-byte sequence is tracked per source; on a gap the missing batches are fetched from the
//    engine's replay socket (a DEALER: [b"", seq8] -> [b"", seq8, payload]... until seq -1) and
//    applied in order, live batches held meanwhile;
//  - a new subscriber starts with a replay from sequence 0 (cold start), so a restarted kvgate
//    recovers what the engine still buffers before it applies live events;
//  - a sequence that goes backwards means the engine restarted: its blocks are dropped.
// See docs/precise-mode.md. Thread-safe: SetSources()/Status() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvevents/event_applier.h"
#include "kvindex/types.h"

namespace kvgate::kvevents {

/// One engine publisher (a worker, or one DP rank of it). A value type.
struct EventSource {
  kvindex::Holder holder;
  std::string name;             // For logs and status: "<worker url>" or "<url> rank N".
  std::string model;            // Namespace of blocks stored without a LoRA name.
  std::string endpoint;         // The engine's PUB address (connected to, or bound when `bind`).
  std::string replay_endpoint;  // The engine's ROUTER address; empty: gaps cannot be recovered.
  std::string topic;            // Subscription prefix ("" = everything).
  bool bind = false;            // Bind the SUB socket: engines connect to kvgate (vLLM's
                                // endpoint without '*' makes the engine connect).

  friend bool operator==(const EventSource&, const EventSource&) = default;
};

/// What the events thread knows about one source. A value type.
struct SourceStatus {
  EventSource source;
  std::optional<uint64_t> next_seq;  // Next sequence expected; nullopt until the first batch.
  bool replaying = false;
  bool view_complete = false;  // Every batch since the engine's sequence 0 was applied.
  uint64_t generation = 0;     // Bumped when the engine restarts (sequence went backwards).
  uint64_t batches = 0;        // Applied, live or replayed.
  uint64_t replayed_batches = 0;
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t cleared = 0;
  uint64_t orphan_blocks = 0;
  uint64_t gaps = 0;          // Sequence gaps seen on the live stream.
  uint64_t replays = 0;       // Replay requests sent.
  uint64_t lost_batches = 0;  // Batches neither received nor replayed.
  uint64_t restarts = 0;
  uint64_t bad_messages = 0;  // Wrong frame count or undecodable payload.
  double last_batch_ts = 0;   // The engine's clock on the last applied batch.
  std::string error;          // Why the sockets could not be opened, if they could not.
  std::chrono::steady_clock::time_point last_message{};  // Our clock; epoch: never.
};

/// Called on the events thread; implementations must be thread-safe against their readers.
class SubscriberObserver {
 public:
  virtual ~SubscriberObserver() = default;
  /// A batch was applied; `lag_s` is now minus the batch's timestamp (wall clocks).
  virtual void OnBatchApplied(const EventSource& source, const ApplyResult& result,
                              double lag_s) = 0;
  /// The engine restarted (or a new view starts): its blocks were dropped.
  virtual void OnRestart(const EventSource& source) = 0;
};

struct SubscriberOptions {
  std::chrono::milliseconds poll_interval{20};     // Longest wait between replay-timeout checks.
  std::chrono::milliseconds replay_timeout{2000};  // No end marker by then: give up that replay.
  size_t max_held_batches = 100000;                // Live batches held during one replay.
  int rcvhwm = 1000000;                            // SUB receive high-water mark (messages).
  size_t max_messages_per_turn = 4096;  // Read from one socket before turning to the others.
};

class KvEventSubscriber {
 public:
  /// `applier` and `observer` (may be null) must outlive the subscriber.
  KvEventSubscriber(EventApplier& applier, SubscriberObserver* observer,
                    SubscriberOptions options = {});
  ~KvEventSubscriber();  // Stop()s.
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  /// Starts the events thread.
  void Start();
  /// Stops and joins it; sockets are closed.
  void Stop();

  /// Replaces the set of sources. New ones are subscribed (starting with a replay from 0),
  /// removed ones closed and their blocks forgotten, changed ones reopened as new.
  void SetSources(std::vector<EventSource> sources);

  std::vector<SourceStatus> Status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::kvevents
