// EngineRunner's KV events: a step's batch is sent on the event executor (as vLLM's
// ZmqEventPublisher sends on a thread of its own), never on the io thread that steps every
// engine of the process, and the batches go out in the order the steps made them.
#include "sim/engine_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <variant>
#include <zmq.hpp>

#include "kvevents/event_decoder.h"
#include "tests/sim/sim_test_util.h"

namespace kvgate::sim {
namespace {

TEST(EngineRunnerEvents, BatchesAreSentOnTheEventExecutorInStepOrder) {
  zmq::context_t ctx(1);
  PublisherOptions po;
  po.endpoint = "tcp://127.0.0.1:*";
  auto pub = KvEventPublisher::Create(ctx, po);
  ASSERT_TRUE(pub.ok()) << pub.status();
  KvEventPublisher* publisher = pub->get();
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 20);
  sub.set(zmq::sockopt::linger, 0);
  sub.connect(publisher->endpoint());
  // PUB drops what it sends before the subscription has arrived: publish until one gets through.
  KvEvent warm;
  warm.type = KvEvent::Type::kAllBlocksCleared;
  auto receive = [&](std::vector<zmq::message_t>* frames) {
    frames->clear();
    zmq::message_t m;
    if (!sub.recv(m)) return false;
    frames->push_back(std::move(m));
    while (frames->back().more()) {
      zmq::message_t next;
      if (!sub.recv(next)) return false;
      frames->push_back(std::move(next));
    }
    return true;
  };
  std::vector<zmq::message_t> frames;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool joined = false;
  while (!joined && std::chrono::steady_clock::now() < deadline) {
    publisher->Publish(0, {&warm, 1});
    joined = receive(&frames);
  }
  ASSERT_TRUE(joined) << "the subscriber never joined";
  while (receive(&frames)) {
  }
  const uint64_t warmed = publisher->next_seq();

  net::io_context io, events;
  SimOptions o;
  o.profile.num_gpu_blocks = 64;
  o.profile.max_num_batched_tokens = 64;  // A 256-token prompt prefills in four steps.
  o.profile.step_fixed_s = 0.001;
  const SimClock clock(std::chrono::steady_clock::now(), 0.001);
  EngineRunner runner(io, events.get_executor(), o, 0, clock, std::move(*pub));
  auto pending = std::make_shared<Pending>(io.get_executor());
  runner.Submit(pending, {1, Prompt(256, 7), 2});
  while (!pending->finished && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(5));
    io.restart();
  }
  ASSERT_TRUE(pending->finished);
  EXPECT_EQ(publisher->next_seq(), warmed) << "a batch was sent on the engines' io thread";

  events.run();  // Every batch handed over, now sent.
  ASSERT_GE(publisher->next_seq(), warmed + 4);
  std::vector<uint64_t> stored;  // Block hashes in the order the batches carried them.
  std::optional<uint64_t> last_parent;
  for (uint64_t seq = warmed; seq < publisher->next_seq(); ++seq) {
    ASSERT_TRUE(receive(&frames)) << "batch " << seq;
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(kvevents::DecodeSequence(frames[1].to_string_view()), seq);
    auto batch = kvevents::DecodeEventBatch(frames[2].to_string_view());
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const auto& event : batch->events) {
      const auto* s = std::get_if<kvevents::BlockStored>(&event);
      if (s == nullptr) continue;
      // Each chunk's blocks hang below the previous chunk's last block: sent in step order.
      if (!stored.empty()) EXPECT_EQ(s->parent_block_hash, stored.back()) << "batch " << seq;
      last_parent = s->parent_block_hash;
      stored.insert(stored.end(), s->block_hashes.begin(), s->block_hashes.end());
    }
  }
  EXPECT_EQ(stored.size(), 256u / 16);
  EXPECT_TRUE(last_parent.has_value());
}

}  // namespace
}  // namespace kvgate::sim
