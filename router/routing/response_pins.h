// File: router/routing/response_pins.h
// Which worker stored which OpenAI Responses response. With `store` (the API's default) a
// response lives on the worker that made it, so a continuation (`previous_response_id`) and
// /v1/responses/{id}* must reach that worker and no other. The gateway learns id -> worker from
// each relayed response and keeps the pins in a bounded map: at most `max_pins` (the least
// recently used go first), each for `ttl` after it was last used. Sharded by the id's hash, one
// mutex per shard, never held across I/O. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvgate::router {

class ResponsePins {
 public:
  using Clock = std::chrono::steady_clock;

  struct Pin {
    uint32_t worker_id = 0;  // Worker::id(): stable while the worker stays in the fleet
  };

  /// `max_pins` >= 1; `ttl` > 0.
  ResponsePins(size_t max_pins, std::chrono::seconds ttl);
  ~ResponsePins();

  /// Pins `response_id` to a worker (replacing an older pin). Ids longer than kMaxIdBytes are
  /// refused (a worker's ids are short; a longer one is not an id kvgate should keep).
  void Learn(std::string_view response_id, uint32_t worker_id, Clock::time_point now);
  /// The pin of `response_id`, refreshed (its TTL starts again); nullopt when unknown or
  /// expired.
  std::optional<Pin> Find(std::string_view response_id, Clock::time_point now);
  /// Every unexpired pin (id, worker id), least recently used first: what a replica hands a
  /// joining one (router/cluster/).
  std::vector<std::pair<std::string, uint32_t>> Live(Clock::time_point now) const;
  /// Forgets `response_id` (after a successful DELETE).
  void Forget(std::string_view response_id);
  /// Changes the bounds (reload); extra pins go at the next Learn.
  void Configure(size_t max_pins, std::chrono::seconds ttl);

  size_t size() const;
  /// Bytes the pins hold: map slots, list nodes and the ids' copies (an estimate from
  /// capacities; about 150 bytes a pin for a 40-byte id, docs/agent-apis.md).
  size_t memory_bytes() const;
  uint64_t evicted() const;

  static constexpr size_t kMaxIdBytes = 256;

 private:
  struct Shard;
  Shard& ShardOf(std::string_view id) const;

  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace kvgate::router
