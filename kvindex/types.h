// File: kvindex/types.h
// Vocabulary types shared by the kvindex library: block hashes, holders and tiers.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvgate::kvindex {

/// A chained block hash: h[i] = XXH3_64(block_i, seed = h[i-1]). Identifies a block and every
/// block before it in its prompt.
using BlockHash = uint64_t;

/// Where a holder keeps a block. Values are dense so they can index arrays.
enum class Tier : uint8_t { kGpu = 0, kHost = 1, kStore = 2 };
inline constexpr int kNumTiers = 3;

inline constexpr std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kHost:
      return "host";
    case Tier::kStore:
      return "store";
  }
  return "unknown";
}

/// One cache owner: an inference worker and a data-parallel rank inside it. A value type;
/// thread-compatible.
struct Holder {
  uint32_t worker = 0;
  uint16_t dp_rank = 0;

  friend bool operator==(const Holder& a, const Holder& b) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Holder& x) {
    return H::combine(std::move(h), x.worker, x.dp_rank);
  }
  /// Packs the holder into 48 bits (worker << 16 | dp_rank).
  constexpr uint64_t Key() const { return (uint64_t{worker} << 16) | dp_rank; }
};

}  // namespace kvgate::kvindex
