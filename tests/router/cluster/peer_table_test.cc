// What a replica knows of the others: lost frames counted from sequence gaps, duplicates
// ignored, silent replicas forgotten with their load, loads summed per worker.
#include "router/cluster/peer_table.h"

#include "gtest/gtest.h"

namespace kvgate::router::cluster {
namespace {

using Clock = PeerTable::Clock;
using std::chrono::milliseconds;

TEST(PeerTable, GapsAreLostFramesAndRepeatsAreDuplicates) {
  PeerTable t;
  const auto now = Clock::now();
  EXPECT_TRUE(t.Hear(7, 1, now).new_peer);
  EXPECT_EQ(t.Hear(7, 2, now).lost, 0u);
  EXPECT_EQ(t.Hear(7, 5, now).lost, 2u);
  EXPECT_TRUE(t.Hear(7, 5, now).duplicate);
  EXPECT_TRUE(t.Hear(7, 3, now).duplicate);
  ASSERT_EQ(t.Peers().size(), 1u);
  EXPECT_EQ(t.Peers()[0].lost, 2u);
  EXPECT_EQ(t.Peers()[0].frames, 3u);
}

TEST(PeerTable, LoadsAreSummedAndASilentReplicaTakesItsLoadAway) {
  PeerTable t;
  const auto t0 = Clock::now();
  t.Hear(1, 1, t0);
  t.Hear(2, 1, t0 + milliseconds(400));
  t.SetLoads(1, {{"w", {2, 100, 2, 10}}, {"v", {1, 0, 1, 1}}}, true);
  t.SetLoads(2, {{"w", {1, 50, 1, 5}}}, true);
  auto totals = t.Totals();
  EXPECT_EQ(totals["w"].in_flight, 3);
  EXPECT_EQ(totals["w"].pending_prefill_tokens, 150);
  EXPECT_EQ(totals["v"].active_kv_blocks, 1);
  // A full table replaces: v is no longer loaded by replica 1.
  t.SetLoads(1, {{"w", {1, 0, 1, 1}}}, true);
  EXPECT_FALSE(t.Totals().contains("v"));
  t.SetName(1, "r1");
  const auto gone = t.Expire(t0 + milliseconds(700), milliseconds(500));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], "r1");
  EXPECT_EQ(t.Totals()["w"].in_flight, 1);
  EXPECT_TRUE(t.Remove(2));
  EXPECT_FALSE(t.Remove(2));
  EXPECT_TRUE(t.Totals().empty());
}

TEST(PeerTable, LoadsOfAnUnknownReplicaAreIgnored) {
  PeerTable t;
  t.SetLoads(9, {{"w", {1, 1, 1, 1}}}, true);
  EXPECT_TRUE(t.Totals().empty());
}

}  // namespace
}  // namespace kvgate::router::cluster
