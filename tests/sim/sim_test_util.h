// File: tests/sim/sim_test_util.h
// Helpers the simulator's tests share: prompts for the engine, and for the end-to-end tests
// block text and the fields they read from response bodies.
#pragma once

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "common/strings.h"
#include "sim/server.h"

namespace kvgate::sim {

/// A prompt of `n` distinct token ids counting up from `first`.
inline std::vector<uint32_t> Prompt(uint32_t n, uint32_t first) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

/// Two simulated workers on free ports, serving on a thread of their own, at time scale 0.02
/// with 4096 blocks each: the fleet the end-to-end tests put kvgate in front of. Null (the
/// test failed) when they cannot start.
inline std::unique_ptr<SimProcess> StartTwoWorkerSim() {
  SimOptions o;
  o.base_port = 0;
  o.workers = 2;
  o.time_scale = 0.02;
  o.profile.num_gpu_blocks = 4096;
  auto sim = std::make_unique<SimProcess>(o);
  if (!sim->Start().ok()) return nullptr;
  sim->StartThread();
  return sim;
}

/// The integer field `name` of a JSON body (the first one), -1 when absent.
inline int64_t Field(const std::string& body, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(body, m, std::regex("\"" + name + "\":(-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

/// The string field `name` of a JSON body (the first one, without escapes), "" when absent.
inline std::string StringField(const std::string& body, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(body, m, std::regex("\"" + name + "\":\"([^\"]*)\""))) return "";
  return m[1];
}

/// Block text: `n` distinct words, so that prompts are long enough to fill prefix blocks.
inline std::string Words(const std::string& seed, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) common::StrAppend(&out, seed, i, " ");
  return out;
}

}  // namespace kvgate::sim
