#include <map>

#include "gtest/gtest.h"
#include "router/basic_policies.h"

namespace kvgate::router {
namespace {

std::vector<WorkerSharedPtr> MakeWorkers(std::vector<double> weights) {
  std::vector<WorkerSharedPtr> out;
  for (size_t i = 0; i < weights.size(); ++i) {
    config::WorkerConfig c;
    c.url = *common::ParseHttpUrl("http://w" + std::to_string(i) + ":8000");
    c.weight = weights[i];
    out.push_back(std::make_shared<Worker>(c, WorkerMetrics{}));
  }
  return out;
}

std::vector<Worker*> Raw(const std::vector<WorkerSharedPtr>& ws) {
  std::vector<Worker*> out;
  for (const auto& w : ws) out.push_back(w.get());
  return out;
}

TEST(RoundRobin, CyclesThroughCandidatesInOrder) {
  auto ws = MakeWorkers({1, 1, 1});
  auto c = Raw(ws);
  RoundRobinPolicy p;
  RouteRequest r;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(p.Choose(r, c), c[i]);
  }
}

TEST(RoundRobin, WeightsGiveProportionalInterleavedShares) {
  auto ws = MakeWorkers({1, 3});
  auto c = Raw(ws);
  RoundRobinPolicy p;
  RouteRequest r;
  std::map<Worker*, int> count;
  int longest_run = 0;
  int run = 0;
  Worker* prev = nullptr;
  for (int i = 0; i < 4000; ++i) {
    Worker* w = p.Choose(r, c);
    ++count[w];
    run = w == prev ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
    prev = w;
  }
  EXPECT_NEAR(count[c[0]], 1000, 20);
  EXPECT_NEAR(count[c[1]], 3000, 20);
  EXPECT_LE(longest_run, 4);  // interleaved, not 3000 in a row
}

TEST(LeastRequest, PicksFewestInFlight) {
  auto ws = MakeWorkers({1, 1, 1});
  ws[0]->AddInFlight(3);
  ws[1]->AddInFlight(1);
  ws[2]->AddInFlight(2);
  LeastRequestPolicy p;
  RouteRequest r;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(p.Choose(r, Raw(ws)), ws[1].get());
}

TEST(LeastRequest, WeightScalesLoad) {
  auto ws = MakeWorkers({1, 4});
  ws[0]->AddInFlight(1);  // 1.0 per weight
  ws[1]->AddInFlight(3);  // 0.75 per weight
  LeastRequestPolicy p;
  RouteRequest r;
  EXPECT_EQ(p.Choose(r, Raw(ws)), ws[1].get());
}

TEST(LeastRequest, TiesSpreadAcrossWorkers) {
  auto ws = MakeWorkers({1, 1, 1, 1});
  LeastRequestPolicy p;
  RouteRequest r;
  std::map<Worker*, int> count;
  for (int i = 0; i < 400; ++i) ++count[p.Choose(r, Raw(ws))];
  EXPECT_EQ(count.size(), 4u);
  for (const auto& [w, n] : count) EXPECT_GT(n, 50);
}

TEST(LeastRequest, ReservationSpreadsABurst) {
  // The proxy reserves (AddInFlight) right after Choose: a burst then fills workers evenly.
  auto ws = MakeWorkers({1, 1, 1, 1});
  LeastRequestPolicy p;
  RouteRequest r;
  for (int i = 0; i < 40; ++i) p.Choose(r, Raw(ws))->AddInFlight(1);
  for (const auto& w : ws) EXPECT_EQ(w->in_flight(), 10);
}

TEST(PolicyFactory, KnownAndUnknownNames) {
  EXPECT_EQ(MakeRoutingPolicy("round_robin")->name(), "round_robin");
  EXPECT_EQ(MakeRoutingPolicy("least_request")->name(), "least_request");
  EXPECT_EQ(MakeRoutingPolicy("nope"), nullptr);
}

}  // namespace
}  // namespace kvgate::router
