// File: tests/sim/sim_test_util.h
// Helpers the simulator's tests share: prompts for the engine, and for the end-to-end tests
// block text and the fields they read from response bodies.
#pragma once

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/strings.h"
#include "sim/engine.h"
#include "sim/server.h"

namespace kvgate::sim {

/// A prompt of `n` distinct token ids counting up from `first`.
inline std::vector<uint32_t> Prompt(uint32_t n, uint32_t first) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

/// `n` requests of a fixed pseudo-random workload, one every 20 ms: prompts of 20 tokens plus a
/// random length below 2^(64 - len_shift), starting with one of three shared prefixes, and up to
/// 2^(64 - out_shift) output tokens. The robustness replays push it through tiny pools.
inline std::vector<EngineRequest> RandomWorkload(uint64_t n, int len_shift, int out_shift) {
  std::vector<EngineRequest> reqs;
  uint64_t x = 12345;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t share = static_cast<uint32_t>(next() >> 60) % 3;
    reqs.push_back({i, Prompt(20 + static_cast<uint32_t>(next() >> len_shift), share * 1000),
                    1 + static_cast<uint32_t>(next() >> out_shift), static_cast<double>(i) * 0.02});
  }
  return reqs;
}

/// Steps `e` through `reqs` (each added at its arrival time) until every one is done, calling
/// `on_step(now, result)` after each step with the time the step ended.
inline void RunWorkload(Engine& e, const std::vector<EngineRequest>& reqs,
                        absl::FunctionRef<void(double, const StepResult&)> on_step) {
  size_t next_req = 0;
  double now = 0;
  while (next_req < reqs.size() || e.HasWork()) {
    while (next_req < reqs.size() && reqs[next_req].arrival <= now) e.AddRequest(reqs[next_req++]);
    if (!e.HasWork()) {
      now = reqs[next_req].arrival;
      continue;
    }
    StepResult r = e.Step(now);
    now += r.duration;
    on_step(now, r);
  }
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
