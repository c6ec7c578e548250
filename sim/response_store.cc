#include "sim/response_store.h"

namespace kvgate::sim {

const StoredResponse* ResponseStore::Find(std::string_view id) {
  auto it = index_.find(std::string(id));
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &it->second->second;
}

void ResponseStore::Put(const std::string& id, StoredResponse response) {
  if (capacity_ == 0) return;
  Erase(id);
  lru_.emplace_front(id, std::move(response));
  index_[id] = lru_.begin();
  while (index_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

bool ResponseStore::Erase(std::string_view id) {
  auto it = index_.find(std::string(id));
  if (it == index_.end()) return false;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

}  // namespace kvgate::sim
