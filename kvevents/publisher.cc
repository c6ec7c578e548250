// File: kvevents/publisher.cc
#include "kvevents/publisher.h"

#include <msgpuck.h>

#include <algorithm>
#include <deque>
#include <zmq.hpp>

#include "common/strings.h"
#include "kvevents/event_decoder.h"
#include "spdlog/spdlog.h"

namespace kvgate::kvevents {
namespace {

// msgpuck encodes into a raw buffer; each Put* makes room for the worst case first. The
// string grows by doubling and is cut to what was written by Finish(): a step's batch holds a
// value per token id (hundreds of thousands for a long prefill), and resizing the string for
// each of them (zero-filling, then shrinking) cost more than encoding.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out), used_(out->size()) {}
  void Reserve(size_t bytes) {
    if (out_->size() < used_ + bytes) out_->resize(used_ + bytes);
  }
  void Finish() { out_->resize(used_); }
  void Array(uint32_t n) {
    Put(mp_sizeof_array(n), [&](char* p) { return mp_encode_array(p, n); });
  }
  void Map(uint32_t n) {
    Put(mp_sizeof_map(n), [&](char* p) { return mp_encode_map(p, n); });
  }
  void Uint(uint64_t v) {
    Put(mp_sizeof_uint(v), [&](char* p) { return mp_encode_uint(p, v); });
  }
  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    Put(mp_sizeof_int(v), [&](char* p) { return mp_encode_int(p, v); });
  }
  void Double(double v) {
    Put(mp_sizeof_double(v), [&](char* p) { return mp_encode_double(p, v); });
  }
  void Nil() {
    Put(mp_sizeof_nil(), [&](char* p) { return mp_encode_nil(p); });
  }
  void Str(std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    Put(mp_sizeof_str(n), [&](char* p) { return mp_encode_str(p, s.data(), n); });
  }
  void OptUint(std::optional<uint64_t> v) { v ? Uint(*v) : Nil(); }

 private:
  template <typename F>
  void Put(size_t max, F encode) {
    if (out_->size() - used_ < max) out_->resize(std::max(2 * out_->size(), used_ + max + 64));
    char* end = encode(out_->data() + used_);
    used_ = static_cast<size_t>(end - out_->data());
  }
  std::string* out_;
  size_t used_;  // Bytes written; out_ holds more, unwritten, until Finish().
};

// An upper bound of the bytes EncodeEvent writes for `e` (names and keys included).
size_t MaxEncodedSize(const PublishedEvent& e) {
  return 256 + 18 * e.block_hashes.size() + 5 * e.token_ids.size() +
         (e.kv_cache_spec_kind ? e.kv_cache_spec_kind->size() : 0);
}

void EncodeEvent(const PublishedEvent& e, EventEncoding encoding, Writer& w) {
  const bool map = encoding == EventEncoding::kMap;
  auto key = [&](std::string_view k) {
    if (map) w.Str(k);
  };
  switch (e.type) {
    case PublishedEvent::Type::kBlockStored: {
      // Fields in declaration order: block_hashes, parent_block_hash, token_ids, block_size,
      // lora_id, medium, lora_name, then (hybrid models) extra_keys, group_idx,
      // kv_cache_spec_kind, kv_cache_spec_sliding_window. As msgspec's omit_defaults, unset
      // trailing fields are omitted (arrays end early, maps lack the key); an unset field before
      // a set one is nil in an array.
      const uint32_t tail = e.kv_cache_spec_sliding_window ? 4
                            : e.kv_cache_spec_kind         ? 3
                            : e.group_idx                  ? 2
                                                           : 0;
      if (map) {
        w.Map(8 + (tail > 0 ? 1 : 0) + (e.group_idx ? 1 : 0) + (e.kv_cache_spec_kind ? 1 : 0) +
              (e.kv_cache_spec_sliding_window ? 1 : 0));
        w.Str("type");
      } else {
        w.Array(8 + tail);
      }
      w.Str("BlockStored");
      key("block_hashes");
      w.Array(static_cast<uint32_t>(e.block_hashes.size()));
      for (uint64_t h : e.block_hashes) w.Uint(h);
      key("parent_block_hash");
      w.OptUint(e.parent_block_hash);
      key("token_ids");
      w.Array(static_cast<uint32_t>(e.token_ids.size()));
      for (uint32_t t : e.token_ids) w.Uint(t);
      key("block_size");
      w.Uint(e.block_size);
      key("lora_id");
      w.Nil();
      key("medium");
      w.Str(MediumName(e.medium));
      key("lora_name");
      w.Nil();
      if (tail == 0) break;
      key("extra_keys");
      w.Array(static_cast<uint32_t>(e.block_hashes.size()));
      for (size_t i = 0; i < e.block_hashes.size(); ++i) w.Nil();
      if (e.group_idx || !map) {
        key("group_idx");
        e.group_idx ? w.Int(*e.group_idx) : w.Nil();
      }
      if (tail < 3) break;
      if (e.kv_cache_spec_kind || !map) {
        key("kv_cache_spec_kind");
        e.kv_cache_spec_kind ? w.Str(*e.kv_cache_spec_kind) : w.Nil();
      }
      if (tail < 4) break;
      key("kv_cache_spec_sliding_window");
      w.Int(*e.kv_cache_spec_sliding_window);
      break;
    }
    case PublishedEvent::Type::kBlockRemoved:
      if (map) {
        w.Map(e.group_idx ? 4 : 3);
        w.Str("type");
      } else {
        w.Array(e.group_idx ? 4 : 3);
      }
      w.Str("BlockRemoved");
      key("block_hashes");
      w.Array(static_cast<uint32_t>(e.block_hashes.size()));
      for (uint64_t h : e.block_hashes) w.Uint(h);
      key("medium");
      w.Str(MediumName(e.medium));
      if (e.group_idx) {
        key("group_idx");
        w.Int(*e.group_idx);
      }
      break;
    case PublishedEvent::Type::kAllBlocksCleared:
      if (map) {
        w.Map(1);
        w.Str("type");
      } else {
        w.Array(1);
      }
      w.Str("AllBlocksCleared");
      break;
  }
}

// Whether batch `seq` is dropped on the live socket (fault injection): a splitmix64 draw.
bool DropLive(const PublisherOptions& o, uint64_t seq) {
  if (o.drop_live_rate <= 0) return false;
  uint64_t z = o.drop_seed + (seq + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < o.drop_live_rate;
}

}  // namespace

std::string_view MediumName(Medium medium) {
  switch (medium) {
    case Medium::kGpu:
      return "GPU";
    case Medium::kCpu:
      return "CPU";
    case Medium::kStore:
      return "STORE";
  }
  return "GPU";
}

void EncodeEventBatch(double ts, absl::Span<const PublishedEvent> events,
                      std::optional<int> dp_rank, EventEncoding encoding, std::string* out) {
  Writer w(out);
  size_t bound = 32;
  for (const PublishedEvent& e : events) bound += MaxEncodedSize(e);
  w.Reserve(bound);  // One allocation for the batch.
  w.Array(dp_rank ? 3 : 2);
  w.Double(ts);
  w.Array(static_cast<uint32_t>(events.size()));
  for (const PublishedEvent& e : events) EncodeEvent(e, encoding, w);
  if (dp_rank) w.Int(*dp_rank);
  w.Finish();
}

struct KvEventPublisher::Impl {
  PublisherOptions options;
  zmq::socket_t pub;
  std::optional<zmq::socket_t> router;
  std::string endpoint;
  std::string replay_endpoint;
  uint64_t next_seq = 0;
  std::deque<std::pair<uint64_t, std::string>> buffer;
  std::string scratch;
};

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvEventPublisher::~KvEventPublisher() = default;

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    zmq::context_t& context, PublisherOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const PublisherOptions& o = impl->options;
  try {
    impl->pub = zmq::socket_t(context, zmq::socket_type::pub);
    impl->pub.set(zmq::sockopt::sndhwm, o.hwm);
    impl->pub.set(zmq::sockopt::linger, 0);
    if (o.force_bind || ShouldBind(o.endpoint)) {
      impl->pub.bind(o.endpoint);
      impl->endpoint = impl->pub.get(zmq::sockopt::last_endpoint);
    } else {
      impl->pub.connect(o.endpoint);
      impl->endpoint = o.endpoint;
    }
    if (!o.replay_endpoint.empty()) {
      impl->router.emplace(context, zmq::socket_type::router);
      impl->router->set(zmq::sockopt::linger, 0);
      impl->router->bind(o.replay_endpoint);
      impl->replay_endpoint = impl->router->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(
        common::StrCat("kv events: ", o.endpoint, " / ", o.replay_endpoint, ": ", e.what()));
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

void KvEventPublisher::Publish(double ts, absl::Span<const PublishedEvent> events) {
  Impl& s = *impl_;
  if (!events.empty()) {
    // The buffer of the batch that leaves the replay buffer now, or of the last one sent: a
    // batch's size varies little from step to step, so its pages are reused, not faulted in
    // again (a long prefill's batch is megabytes).
    std::string payload;
    if (!s.router) {
      payload = std::move(s.scratch);
    } else if (s.buffer.size() >= s.options.buffer_steps && !s.buffer.empty()) {
      payload = std::move(s.buffer.front().second);
      s.buffer.pop_front();
    }
    payload.clear();
    EncodeEventBatch(ts, events, s.options.dp_rank, s.options.encoding, &payload);
    const uint64_t seq = s.next_seq++;
    const std::string seq8 = EncodeSequence(seq);
    // PUB never blocks: past the high-water mark ZMQ drops, as it does for vLLM.
    if (!DropLive(s.options, seq)) {
      s.pub.send(zmq::buffer(s.options.topic),
                 zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(seq8), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    }
    if (s.router) {
      s.buffer.emplace_back(seq, std::move(payload));
      while (s.buffer.size() > s.options.buffer_steps) s.buffer.pop_front();
    } else {
      s.scratch = std::move(payload);
    }
  }
  ServiceReplay();
}

void KvEventPublisher::ServiceReplay() {
  Impl& s = *impl_;
  if (!s.router) return;
  for (;;) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t msg;
      auto r = s.router->recv(msg, zmq::recv_flags::dontwait);
      if (!r) break;
      const bool more = msg.more();
      frames.push_back(std::move(msg));
      if (!more) break;
    }
    if (frames.empty()) return;
    if (frames.size() != 3 || frames[1].size() != 0 || frames[2].size() != 8) {
      spdlog::warn("kv events: invalid replay request ({} frames)", frames.size());
      continue;
    }
    const uint64_t start = *DecodeSequence({static_cast<const char*>(frames[2].data()), 8});
    const std::string id(static_cast<const char*>(frames[0].data()), frames[0].size());
    auto send = [&](const std::string& seq8, const std::string& payload) {
      constexpr auto kMore = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
      s.router->send(zmq::buffer(id), kMore);
      s.router->send(zmq::const_buffer("", 0), kMore);
      s.router->send(zmq::buffer(seq8), kMore);
      s.router->send(zmq::buffer(payload), zmq::send_flags::dontwait);
    };
    for (const auto& [seq, payload] : s.buffer) {
      if (seq >= start) send(EncodeSequence(seq), payload);
    }
    send(EncodeSequence(kReplayEndSequence), std::string());
  }
}

const std::string& KvEventPublisher::endpoint() const { return impl_->endpoint; }
const std::string& KvEventPublisher::replay_endpoint() const { return impl_->replay_endpoint; }
uint64_t KvEventPublisher::next_seq() const { return impl_->next_seq; }
bool KvEventPublisher::has_replay() const { return impl_->router.has_value(); }

}  // namespace kvgate::kvevents
