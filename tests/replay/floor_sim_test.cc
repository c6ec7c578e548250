// The TTFT floor against the simulator it is read with: a request alone on an idle kvgate-sim
// engine takes exactly its floor (so the floor is as high as a lower bound can be), and one
// sharing steps with other work takes more.
#include <vector>

#include "bench/replay/floor.h"
#include "gtest/gtest.h"
#include "sim/engine.h"
#include "sim/profile.h"

namespace kvgate::replay {
namespace {

std::vector<uint32_t> Tokens(uint32_t n, uint32_t first) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// Simulated seconds from `arrival` to the first token of request `id`, stepping `engine` until
// it has no work; `now` is advanced.
double FirstTokenAfter(sim::Engine& engine, uint64_t id, double arrival, double* now) {
  double first = -1;
  while (engine.HasWork()) {
    const sim::StepResult r = engine.Step(*now);
    *now += r.duration;
    for (const auto& out : r.outputs) {
      if (out.id == id && out.first_token_time >= 0 && first < 0) first = out.first_token_time;
    }
  }
  return first - arrival;
}

// bench/compare's floor for a profile, in simulated seconds (time scale 1).
FloorModel ModelOf(const sim::Profile& p) {
  return {1 / p.prefill_per_token_s, p.prefill_per_token_ctx_s / p.prefill_per_token_s,
          p.step_fixed_s, p.max_num_batched_tokens};
}

TEST(FloorSimTest, ALoneRequestTakesItsFloorToTheStep) {
  const sim::Profile p;  // kvgate-sim's built-in profile (the Llama-3-8B-on-H100 one)
  const FloorModel model = ModelOf(p);
  sim::Engine engine(p, "m", 1);
  double now = 0;

  // A cold 20,000-token first turn: three chunks of at most 8,192 tokens.
  const std::vector<uint32_t> first = Tokens(20000, 100);
  engine.AddRequest({1, first, 1, now});
  EXPECT_NEAR(FirstTokenAfter(engine, 1, 0, &now), FloorSeconds(model, 20000, 20000), 1e-9);

  // The follow-up: the whole first turn cached, 5,000 new tokens that attend to all of it.
  std::vector<uint32_t> second = first;
  const std::vector<uint32_t> added = Tokens(5000, 900000);
  second.insert(second.end(), added.begin(), added.end());
  double arrival = now;
  engine.AddRequest({2, second, 1, arrival});
  EXPECT_NEAR(FirstTokenAfter(engine, 2, arrival, &now), FloorSeconds(model, 5000, 25000), 1e-9);

  // The same request again: the partial last block is all that is left (25,000 = 1,562 blocks
  // of 16 and 8 tokens).
  arrival = now;
  engine.AddRequest({3, second, 1, arrival});
  EXPECT_NEAR(FirstTokenAfter(engine, 3, arrival, &now), FloorSeconds(model, 8, 25000), 1e-9);
}

TEST(FloorSimTest, WorkSharingTheStepsOnlyAddsToIt) {
  const sim::Profile p;
  const FloorModel model = ModelOf(p);
  sim::Engine engine(p, "m", 1);
  double now = 0;
  // Two cold prompts at once: the second shares its steps' token budget with the first.
  engine.AddRequest({1, Tokens(12000, 100), 1, 0});
  engine.AddRequest({2, Tokens(12000, 500000), 1, 0});
  double first = -1, second = -1;
  while (engine.HasWork()) {
    const sim::StepResult r = engine.Step(now);
    now += r.duration;
    for (const auto& out : r.outputs) {
      if (out.first_token_time < 0) continue;
      if (out.id == 1 && first < 0) first = out.first_token_time;
      if (out.id == 2 && second < 0) second = out.first_token_time;
    }
  }
  const double floor = FloorSeconds(model, 12000, 12000);
  EXPECT_GE(first, floor);
  EXPECT_GT(second, floor + p.step_fixed_s);
}

}  // namespace
}  // namespace kvgate::replay
