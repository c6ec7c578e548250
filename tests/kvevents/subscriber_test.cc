// KvEventSubscriber against an in-test publisher (cppzmq PUB + replay ROUTER on loopback TCP,
// ephemeral ports): cold start from the replay buffer, a live gap recovered by replay, a gap
// with no replay socket counted as lost, an engine restart, other topics ignored; the wait cut
// short by source changes and Stop(), a backlog past one turn's cap read without a new message.
#include "kvevents/subscriber.h"

#include <msgpuck.h>

#include <atomic>
#include <deque>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace kvgate::kvevents {
namespace {

constexpr kvindex::Holder kHolder{3, 0};

// [ts, [["BlockStored", [id], null, [4 tokens], 4, null, "GPU", null]], 0] for each id (roots).
std::string StoredBatch(const std::vector<uint64_t>& ids) {
  std::string out(64 + ids.size() * 48, '\0');
  char* p = out.data();
  p = mp_encode_array(p, 3);
  static double ts = 1.7e9;  // Engine time moves on: a restarted engine's batch 0 is new.
  p = mp_encode_double(p, ts += 0.001);
  p = mp_encode_array(p, static_cast<uint32_t>(ids.size()));
  for (uint64_t id : ids) {
    p = mp_encode_array(p, 8);
    p = mp_encode_str(p, "BlockStored", 11);
    p = mp_encode_array(p, 1);
    p = mp_encode_uint(p, id);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, 4);
    for (uint32_t t = 0; t < 4; ++t) p = mp_encode_uint(p, static_cast<uint32_t>(id * 10 + t));
    p = mp_encode_uint(p, 4);
    p = mp_encode_nil(p);
    p = mp_encode_str(p, "GPU", 3);
    p = mp_encode_nil(p);
  }
  p = mp_encode_uint(p, 0);
  out.resize(static_cast<size_t>(p - out.data()));
  return out;
}

// vLLM's publisher, reduced: PUB [topic, seq8, payload] and a ROUTER that replays its buffer.
class TestPublisher {
 public:
  explicit TestPublisher(bool replay) : pub_(ctx_, zmq::socket_type::pub) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.set(zmq::sockopt::sndhwm, 0);  // A burst is delivered whole, not dropped at 1,000.
    pub_.bind("tcp://127.0.0.1:*");
    endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    if (replay) {
      router_.emplace(ctx_, zmq::socket_type::router);
      router_->set(zmq::sockopt::linger, 0);
      router_->bind("tcp://127.0.0.1:*");
      replay_endpoint_ = router_->get(zmq::sockopt::last_endpoint);
      thread_ = std::thread([this] { ServeReplay(); });
    }
  }
  ~TestPublisher() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  // Buffers batch `seq` for replay; sends it live unless `drop_live` (a lost PUB message).
  void Publish(uint64_t seq, const std::string& payload, bool drop_live = false,
               const std::string& topic = "kv") {
    if (topic == "kv") {  // Another topic is another publisher's stream.
      common::MutexLock lock(&mu_);
      buffer_.emplace_back(seq, payload);
    }
    if (drop_live) return;
    const std::string seq8 = EncodeSequence(seq);
    pub_.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(seq8), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  // Sends buffered batch `seq` live again (the late live copy of a batch already replayed).
  void Resend(uint64_t seq) {
    std::string payload;
    {
      common::MutexLock lock(&mu_);
      for (const auto& [s, p] : buffer_) {
        if (s == seq) payload = p;
      }
    }
    const std::string seq8 = EncodeSequence(seq);
    pub_.send(zmq::buffer(std::string("kv")), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(seq8), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  // Sends raw frames on the live socket (malformed messages).
  void SendRaw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      pub_.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // A restarted engine: empty buffer, sequence from 0 again.
  void Restart() {
    common::MutexLock lock(&mu_);
    buffer_.clear();
  }

  EventSource Source(bool with_replay = true, kvindex::Holder holder = kHolder) const {
    EventSource s;
    s.holder = holder;
    s.name = "test-engine";
    s.model = "m";
    s.endpoint = endpoint_;
    s.replay_endpoint = with_replay ? replay_endpoint_ : "";
    s.topic = "kv";
    return s;
  }

 private:
  void ServeReplay() {
    while (!stop_) {
      zmq::pollitem_t item{router_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(*router_, std::back_inserter(req))) continue;
      if (req.size() != 3) continue;
      const uint64_t from =
          *DecodeSequence({static_cast<const char*>(req[2].data()), req[2].size()});
      common::MutexLock lock(&mu_);
      const std::string id(static_cast<const char*>(req[0].data()), req[0].size());
      for (const auto& [seq, payload] : buffer_) {
        if (seq < from) continue;
        const std::string seq8 = EncodeSequence(seq);
        router_->send(zmq::buffer(id), zmq::send_flags::sndmore);
        router_->send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
        router_->send(zmq::buffer(seq8), zmq::send_flags::sndmore);
        router_->send(zmq::buffer(payload), zmq::send_flags::none);
      }
      const std::string end = EncodeSequence(kReplayEndSequence);
      router_->send(zmq::buffer(id), zmq::send_flags::sndmore);
      router_->send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
      router_->send(zmq::buffer(end), zmq::send_flags::sndmore);
      router_->send(zmq::const_buffer("", 0), zmq::send_flags::none);
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t pub_;
  std::optional<zmq::socket_t> router_;
  std::string endpoint_, replay_endpoint_;
  common::Mutex mu_;
  std::deque<std::pair<uint64_t, std::string>> buffer_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class SubscriberTest : public ::testing::Test {
 protected:
  SourceStatus Status() {
    auto all = subscriber_.Status();
    return all.empty() ? SourceStatus{} : all[0];
  }
  // Starts the events thread on `pub`'s stream.
  void Subscribe(const TestPublisher& pub, bool with_replay = true) {
    subscriber_.Start();
    subscriber_.SetSources({pub.Source(with_replay)});
  }
  std::string Describe() {
    const SourceStatus s = Status();
    return "next_seq " + (s.next_seq ? std::to_string(*s.next_seq) : "none") + " batches " +
           std::to_string(s.batches) + " gaps " + std::to_string(s.gaps) + " replays " +
           std::to_string(s.replays) + " lost " + std::to_string(s.lost_batches) + " restarts " +
           std::to_string(s.restarts) + " replaying " + std::to_string(s.replaying);
  }
  std::vector<EngineBlockId> Blocks() {
    return applier_.EngineBlocks(kHolder, kvindex::Tier::kGpu);
  }
  // Waits until the subscriber holds exactly `ids`.
  bool Holds(std::vector<EngineBlockId> ids) {
    std::sort(ids.begin(), ids.end());
    return testing::WaitFor([&] {
      auto b = Blocks();
      std::sort(b.begin(), b.end());
      return b == ids;
    });
  }
  // Publishes on the live socket until the subscriber has joined (PUB drops messages sent before
  // a subscriber's connection completes: ZeroMQ's slow joiner).
  void Join(TestPublisher& pub, uint64_t* seq) {
    ASSERT_TRUE(testing::WaitFor([&] {
      pub.Publish(*seq, StoredBatch({1000 + *seq}));
      ++*seq;
      // Joined once a batch arrived on the live socket (the replay socket does not count).
      return testing::WaitFor(
          [&] {
            const SourceStatus s = Status();
            return s.last_message != std::chrono::steady_clock::time_point{} && !s.replaying &&
                   s.next_seq == *seq;
          },
          std::chrono::milliseconds(50));
    }));
  }

  kvindex::PrefixIndex index_;
  EventApplier applier_{index_};
  KvEventSubscriber subscriber_{applier_, nullptr};
};

// The events thread waits on every socket at once; a wait is no longer than it takes a source
// list change or Stop() to arrive, however long the configured interval.
TEST(SubscriberWaitTest, ASourceChangeAndStopCutTheWaitShort) {
  kvindex::PrefixIndex index;
  EventApplier applier{index};
  SubscriberOptions options;
  options.poll_interval = std::chrono::seconds(30);
  KvEventSubscriber subscriber{applier, nullptr, options};
  TestPublisher first(/*replay=*/true), second(/*replay=*/true);
  constexpr kvindex::Holder kSecond{4, 0};
  first.Publish(0, StoredBatch({1}));
  second.Publish(0, StoredBatch({2}));
  subscriber.Start();
  subscriber.SetSources({first.Source()});
  ASSERT_TRUE(testing::WaitFor([&] {
    auto all = subscriber.Status();
    return !all.empty() && all[0].replayed_batches == 1 && !all[0].replaying;
  }));
  // Nothing more comes from the first source: only the change can end the wait.
  subscriber.SetSources({first.Source(), second.Source(true, kSecond)});
  EXPECT_TRUE(testing::WaitFor(
      [&] { return applier.EngineBlocks(kSecond, kvindex::Tier::kGpu).size() == 1; },
      std::chrono::seconds(5)));
  const auto before_stop = std::chrono::steady_clock::now();
  subscriber.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before_stop, std::chrono::seconds(5));
}

// A socket left with messages at the per-turn cap is read again without waiting: its descriptor
// signals new arrivals, not messages already queued.
TEST(SubscriberWaitTest, ABacklogPastOneTurnIsReadWithoutAnotherMessage) {
  kvindex::PrefixIndex index;
  EventApplier applier{index};
  SubscriberOptions options;
  options.max_messages_per_turn = 1;
  KvEventSubscriber subscriber{applier, nullptr, options};
  TestPublisher pub(/*replay=*/false);
  subscriber.Start();
  subscriber.SetSources({pub.Source(/*with_replay=*/false)});
  uint64_t seq = 0;
  // Joined once a batch arrived (PUB drops what it sends before the connection completes).
  ASSERT_TRUE(testing::WaitFor([&] {
    pub.Publish(seq, StoredBatch({1000 + seq}));
    ++seq;
    return testing::WaitFor(
        [&] {
          auto all = subscriber.Status();
          return !all.empty() && all[0].next_seq == seq;
        },
        std::chrono::milliseconds(50));
  }));
  constexpr uint64_t kBurst = 200;
  for (uint64_t i = 0; i < kBurst; ++i) pub.Publish(seq + i, StoredBatch({5000 + i}));
  EXPECT_TRUE(testing::WaitFor([&] {
    auto all = subscriber.Status();
    return !all.empty() && all[0].next_seq == seq + kBurst;
  })) << "read up to "
      << *subscriber.Status()[0].next_seq << " of " << seq + kBurst;
}

TEST_F(SubscriberTest, ColdStartRecoversTheReplayBufferThenFollowsLive) {
  TestPublisher pub(/*replay=*/true);
  pub.Publish(0, StoredBatch({1}));  // Before kvgate listens: only the replay has them.
  pub.Publish(1, StoredBatch({2, 3}));
  Subscribe(pub);
  ASSERT_TRUE(Holds({1, 2, 3}));
  // The status is published once per loop turn, just after the blocks are applied.
  ASSERT_TRUE(testing::WaitFor([&] { return Status().replayed_batches == 2; })) << Describe();
  const SourceStatus s = Status();
  EXPECT_TRUE(s.view_complete);
  EXPECT_EQ(s.replayed_batches, 2u);
  EXPECT_EQ(*s.next_seq, 2u);
  uint64_t seq = 2;
  Join(pub, &seq);
  EXPECT_EQ(Status().lost_batches, 0u);
  EXPECT_TRUE(Status().view_complete);
}

TEST_F(SubscriberTest, LiveGapIsReplayedInOrder) {
  TestPublisher pub(/*replay=*/true);
  Subscribe(pub);
  uint64_t seq = 0;
  Join(pub, &seq);
  const uint64_t replays_before = Status().replays;
  pub.Publish(seq, StoredBatch({77}), /*drop_live=*/true);  // Lost on PUB, kept for replay.
  pub.Publish(seq + 1, StoredBatch({78}));
  pub.Publish(seq + 2, StoredBatch({79}), false, "other-topic");  // Not subscribed.
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == seq + 2; })) << Describe();
  const SourceStatus s = Status();
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.replays, replays_before + 1);
  EXPECT_EQ(s.lost_batches, 0u);
  EXPECT_TRUE(s.view_complete);
  auto b = Blocks();
  EXPECT_NE(std::find(b.begin(), b.end(), 77u), b.end());
  EXPECT_NE(std::find(b.begin(), b.end(), 78u), b.end());
  EXPECT_EQ(std::find(b.begin(), b.end(), 79u), b.end());
  // The live copy of the replayed batch arriving late is a duplicate, not an engine restart.
  pub.Resend(seq);
  pub.Publish(seq + 2, StoredBatch({80}));
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == seq + 3; }));
  EXPECT_EQ(Status().restarts, 0u);
  b = Blocks();
  EXPECT_NE(std::find(b.begin(), b.end(), 77u), b.end());
}

TEST_F(SubscriberTest, GapWithoutReplaySocketIsCountedLost) {
  TestPublisher pub(/*replay=*/false);
  Subscribe(pub, /*with_replay=*/false);
  uint64_t seq = 5;  // Joined mid-stream: batches 0-4 are unrecoverable.
  Join(pub, &seq);
  EXPECT_FALSE(Status().view_complete);
  pub.Publish(seq, StoredBatch({50}), /*drop_live=*/true);
  pub.Publish(seq + 1, StoredBatch({51}));
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == seq + 2; }));
  EXPECT_EQ(Status().gaps, 1u);
  EXPECT_GE(Status().lost_batches, 1u);
  auto b = Blocks();
  EXPECT_EQ(std::find(b.begin(), b.end(), 50u), b.end());
  EXPECT_NE(std::find(b.begin(), b.end(), 51u), b.end());
}

TEST_F(SubscriberTest, SequenceGoingBackwardsIsARestart) {
  TestPublisher pub(/*replay=*/true);
  Subscribe(pub);
  uint64_t seq = 0;
  Join(pub, &seq);
  pub.Publish(seq, StoredBatch({10, 11}));
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == seq + 1; }));
  pub.Restart();
  pub.Publish(0, StoredBatch({500}));
  ASSERT_TRUE(Holds({500}));
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == 1u; })) << Describe();
  EXPECT_EQ(Status().restarts, 1u);
  EXPECT_EQ(Status().generation, 1u);
  EXPECT_EQ(*Status().next_seq, 1u);
  EXPECT_TRUE(Status().view_complete);
}

TEST_F(SubscriberTest, MalformedMessagesAreCountedAndTheStreamGoesOn) {
  TestPublisher pub(/*replay=*/true);
  Subscribe(pub);
  uint64_t seq = 0;
  Join(pub, &seq);
  pub.SendRaw({"kv", EncodeSequence(seq)});                  // Two frames.
  pub.SendRaw({"kv", "short", StoredBatch({1})});            // A 5-byte sequence.
  pub.SendRaw({"kv", EncodeSequence(seq), "\x93\xcb\x41"});  // Truncated msgpack.
  pub.Publish(seq + 1, StoredBatch({42}));
  ASSERT_TRUE(testing::WaitFor([&] { return Status().next_seq == seq + 2; })) << Describe();
  EXPECT_EQ(Status().bad_messages, 3u);
  EXPECT_EQ(Status().restarts, 0u);
  auto b = Blocks();
  EXPECT_NE(std::find(b.begin(), b.end(), 42u), b.end());
}

TEST_F(SubscriberTest, RemovingTheSourceForgetsItsBlocksAndBadEndpointsReportAnError) {
  TestPublisher pub(/*replay=*/true);
  pub.Publish(0, StoredBatch({1}));
  Subscribe(pub);
  ASSERT_TRUE(Holds({1}));
  EventSource bad = pub.Source();
  bad.endpoint = "tcp://not an endpoint";
  subscriber_.SetSources({bad});
  ASSERT_TRUE(testing::WaitFor([&] { return !Status().error.empty(); }));
  EXPECT_TRUE(Blocks().empty());
  subscriber_.SetSources({});
  ASSERT_TRUE(testing::WaitFor([&] { return subscriber_.Status().empty(); }));
}

}  // namespace
}  // namespace kvgate::kvevents
