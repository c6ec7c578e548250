#include "absl/strings/str_cat.h"
#include "kvindex/prefix_index.h"
#include "kvindex/prefix_index_storage.h"

// PrefixIndex's statistics and their JSON for the admin endpoint.
namespace kvgate::kvindex {

uint64_t PrefixIndex::MemoryBytes() const {
  common::MutexLock lock(&writer_mu_);
  uint64_t bytes = sizeof(*this) + sizeof(List) * kMaxHolders * kNumTiers;
  for (const auto& s : shards_) {
    bytes += sizeof(Shard) + s->table.MemoryBytes() +
             s->chunks.size() * (Shard::kChunkSize * sizeof(Record) + sizeof(void*)) +
             s->free_recs.capacity() * sizeof(uint32_t) + s->ovf.capacity() * sizeof(Overflow);
  }
  return bytes;
}

IndexStats PrefixIndex::Stats() const {
  IndexStats stats;
  stats.memory_bytes = MemoryBytes();
  common::MutexLock lock(&writer_mu_);
  for (const auto& s : shards_) {
    stats.distinct_blocks += s->table.size();
  }
  stats.residencies = residencies_;
  stats.max_residencies = max_residencies_;
  stats.global_evictions = global_evictions_;
  std::vector<std::pair<Holder, int>> holders(slots_.begin(), slots_.end());
  std::sort(holders.begin(), holders.end(),
            [](const auto& a, const auto& b) { return a.first.Key() < b.first.Key(); });
  const uint64_t d[kNumTiers] = {dirty_[0].load(), dirty_[1].load(), dirty_[2].load()};
  for (const auto& [holder, slot] : holders) {
    HolderStats hs;
    hs.holder = holder;
    for (int t = 0; t < kNumTiers; ++t) {
      const List& l = lists_[slot * kNumTiers + t];
      TierStats& ts = hs.tiers[t];
      ts.blocks = l.count;
      ts.capacity_blocks = l.capacity;
      ts.inserted_blocks = l.inserted;
      ts.removed_blocks = l.removed;
      ts.evicted_blocks = l.evicted;
      ts.global_evicted_blocks = l.global_evicted;
      ts.prefix_closed = (d[t] & (uint64_t{1} << slot)) == 0;
    }
    stats.holders.push_back(hs);
  }
  return stats;
}

std::string StatsToJson(const IndexStats& stats) {
  std::string out = absl::StrCat(
      "{\"distinct_blocks\":", stats.distinct_blocks, ",\"residencies\":", stats.residencies,
      ",\"max_residencies\":", stats.max_residencies, ",\"memory_bytes\":", stats.memory_bytes,
      ",\"global_evictions\":", stats.global_evictions, ",\"holders\":[");
  for (size_t i = 0; i < stats.holders.size(); ++i) {
    const HolderStats& h = stats.holders[i];
    absl::StrAppend(&out, i == 0 ? "" : ",", "{\"worker\":", h.holder.worker,
                    ",\"dp_rank\":", h.holder.dp_rank, ",\"tiers\":{");
    for (int t = 0; t < kNumTiers; ++t) {
      const TierStats& ts = h.tiers[t];
      absl::StrAppend(&out, t == 0 ? "" : ",", "\"", std::string(TierName(static_cast<Tier>(t))),
                      "\":{\"blocks\":", ts.blocks, ",\"capacity_blocks\":", ts.capacity_blocks,
                      ",\"inserted_blocks\":", ts.inserted_blocks,
                      ",\"removed_blocks\":", ts.removed_blocks,
                      ",\"evicted_blocks\":", ts.evicted_blocks,
                      ",\"global_evicted_blocks\":", ts.global_evicted_blocks,
                      ",\"prefix_closed\":", ts.prefix_closed ? "true" : "false", "}");
    }
    absl::StrAppend(&out, "}}");
  }
  absl::StrAppend(&out, "]}");
  return out;
}

}  // namespace kvgate::kvindex
