// File: store/event_stream.h
// The store's KV events: every committed object is a vLLM BlockStored and every removal or
// eviction a BlockRemoved, with `medium` "STORE", published on a ZMQ PUB socket with a replay
// ROUTER (kvevents/publisher.h, the framing kvgate's subscriber already reads), so that a
// router knows what any worker could pull from the store. The master queues events under its
// lock; a thread of this class sends them in batches. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "kvevents/publisher.h"
#include "store/master.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace kvgate::store {

class EventStream final : public StoreEventSink {
 public:
  /// Binds `endpoint` (e.g. "tcp://*:5557") and `replay_endpoint` (may be empty).
  static absl::StatusOr<std::unique_ptr<EventStream>> Start(const std::string& endpoint,
                                                            const std::string& replay_endpoint);
  ~EventStream() override;

  void Stored(const ObjectKey& key, std::optional<uint64_t> parent,
              const std::vector<uint32_t>& token_ids) override;
  void Removed(const ObjectKey& key) override;

  std::string endpoint() const;
  std::string replay_endpoint() const;
  uint64_t published_batches() const;

 private:
  EventStream() = default;
  void Run();

  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<kvevents::KvEventPublisher> publisher_;  // Run() only, after Start().
  mutable common::Mutex mu_;
  common::CondVar cv_;
  std::vector<kvevents::PublishedEvent> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvgate::store
