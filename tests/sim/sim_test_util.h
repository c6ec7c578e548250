// File: tests/sim/sim_test_util.h
// Helpers the simulator's engine tests share.
#pragma once

#include <cstdint>
#include <vector>

namespace kvgate::sim {

/// A prompt of `n` distinct token ids counting up from `first`.
inline std::vector<uint32_t> Prompt(uint32_t n, uint32_t first) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

}  // namespace kvgate::sim
