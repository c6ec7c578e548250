// File: sim/response_store.h
// The /v1/responses responses one kvgate-sim worker keeps (`store`), as vLLM keeps them in
// memory: what previous_response_id continues from and what GET /v1/responses/{id} answers. A
// store of its own per worker is what makes kvgate's pinning observable (a continuation sent to
// another worker is a 404). Thread-compatible: io thread only.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvgate::sim {

/// One stored response's turn of a conversation. A continuation (`previous_response_id`)
/// drops every system message of the stored prompt, so what it re-uses is, turn after turn,
/// each turn's non-system input and its output; turns share their history instead of copying
/// it. Immutable once stored.
struct StoredTurn {
  std::shared_ptr<const StoredTurn> previous;  // the response this one continued, or null
  std::vector<std::string> input;              // its new non-system chat messages (JSON)
  std::vector<std::string> outputs;            // the texts of its output message items
};

/// A /v1/responses response a worker keeps (`store`).
struct StoredResponse {
  std::string response;  // the final response object (GET answers it)
  std::shared_ptr<const StoredTurn> turn;
  std::vector<std::string> input_items;  // its input items (JSON objects with an "id")
  std::vector<std::string> input_item_ids;
};

/// A worker's stored responses, bounded: the least recently used goes first.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  /// nullptr when unknown; marks it as used.
  const StoredResponse* Find(std::string_view id);
  /// Adds or replaces; a no-op when the capacity is 0.
  void Put(const std::string& id, StoredResponse response);
  bool Erase(std::string_view id);
  size_t size() const { return index_.size(); }

 private:
  using Entry = std::pair<std::string, StoredResponse>;
  size_t capacity_;
  std::list<Entry> lru_;  // most recently used first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace kvgate::sim
