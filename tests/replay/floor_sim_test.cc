// The TTFT floor against the simulator it is read with: a request alone on an idle kvgate-sim
// engine takes exactly its floor (so the floor is as high as a lower bound can be), and one
// sharing steps with other work takes more.
#include <map>
#include <vector>

#include "bench/replay/floor.h"
#include "gtest/gtest.h"
#include "sim/engine.h"
#include "sim/profile.h"
#include "tests/sim/sim_test_util.h"

namespace kvgate::replay {
namespace {

// Steps `engine` from `*now` until it has no work; each request's first token time (simulated
// seconds), by id.
std::map<uint64_t, double> FirstTokens(sim::Engine& engine, double* now) {
  std::map<uint64_t, double> first;
  while (engine.HasWork()) {
    const sim::StepResult r = engine.Step(*now);
    *now += r.duration;
    for (const auto& out : r.outputs) {
      if (out.first_token_time >= 0) first.try_emplace(out.id, out.first_token_time);
    }
  }
  return first;
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
  const std::vector<uint32_t> first = sim::Prompt(20000, 100);
  engine.AddRequest({1, first, 1, now});
  EXPECT_NEAR(FirstTokens(engine, &now).at(1), FloorSeconds(model, 20000, 20000), 1e-9);

  // The follow-up: the whole first turn cached, 5,000 new tokens that attend to all of it.
  std::vector<uint32_t> second = first;
  const std::vector<uint32_t> added = sim::Prompt(5000, 900000);
  second.insert(second.end(), added.begin(), added.end());
  double arrival = now;
  engine.AddRequest({2, second, 1, arrival});
  EXPECT_NEAR(FirstTokens(engine, &now).at(2) - arrival, FloorSeconds(model, 5000, 25000), 1e-9);

  // The same request again: the partial last block is all that is left (25,000 = 1,562 blocks
  // of 16 and 8 tokens).
  arrival = now;
  engine.AddRequest({3, second, 1, arrival});
  EXPECT_NEAR(FirstTokens(engine, &now).at(3) - arrival, FloorSeconds(model, 8, 25000), 1e-9);
}

TEST(FloorSimTest, WorkSharingTheStepsOnlyAddsToIt) {
  const sim::Profile p;
  const FloorModel model = ModelOf(p);
  sim::Engine engine(p, "m", 1);
  double now = 0;
  // Two cold prompts at once: the second shares its steps' token budget with the first.
  engine.AddRequest({1, sim::Prompt(12000, 100), 1, 0});
  engine.AddRequest({2, sim::Prompt(12000, 500000), 1, 0});
  const std::map<uint64_t, double> first = FirstTokens(engine, &now);
  ASSERT_EQ(first.size(), 2u);
  const double floor = FloorSeconds(model, 12000, 12000);
  EXPECT_GE(first.at(1), floor);
  EXPECT_GT(first.at(2), floor + p.step_fixed_s);
}

}  // namespace
}  // namespace kvgate::replay
