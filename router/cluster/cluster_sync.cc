// File: router/cluster/cluster_sync.cc
// The replica sync's two threads and its appliers (cluster_sync.h).
#include "router/cluster/cluster_sync.h"

#include <unistd.h>

#include <random>

#include "common/json_util.h"
#include "common/strings.h"
#include "router/cluster/cluster_internal.h"
#include "router/cluster/redis_link.h"
#include "router/runtime/gateway_state.h"
#include "spdlog/spdlog.h"

namespace kvgate::router::cluster {
namespace {

using std::chrono::milliseconds;

constexpr size_t kFrameTargetBytes = size_t{1} << 20;  // records per PUBLISH, about
constexpr size_t kMaxSnapshotKeys = 1024;
constexpr milliseconds kPollWait{200};
constexpr milliseconds kMaxBackoff{2000};

uint64_t RandomId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

std::string DefaultReplicaName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return common::StrCat(host[0] != '\0' ? host : "kvgate", ":", getpid());
}

}  // namespace

ClusterSync::ClusterSync(const config::ClusterConfig& config, GatewayState& state)
    : config_(config),
      state_(state),
      id_(RandomId()),
      replica_(config.replica.empty() ? DefaultReplicaName() : config.replica),
      channel_(common::StrCat("kvgate:", config.name, ":sync")),
      snapshot_prefix_(common::StrCat("kvgate:", config.name, ":snapshot:")),
      metrics_(std::make_unique<Metrics>(state.registry)) {
  // Validated by the config reader: redis://HOST:PORT.
  auto hp = common::ParseHostPort(std::string_view(config.redis).substr(8));
  if (hp.ok()) {
    host_ = hp->first;
    port_ = hp->second;
  }
  metrics_->degraded.Set(1);
}

ClusterSync::~ClusterSync() { Stop(); }

std::string ClusterSync::SnapshotKey(uint64_t replica) const {
  return common::StrCat(snapshot_prefix_, Hex(replica));
}

bool ClusterSync::connected() const { return pub_up_.load() && sub_up_.load(); }

void ClusterSync::Start() {
  sub_thread_ = std::thread([this] { SubscribeLoop(); });
  // Subscribed before the snapshots are read: whatever a peer publishes after its snapshot
  // reaches this replica one way or the other.
  const auto until = Clock::now() + milliseconds(config_.connect_timeout_ms) * 2;
  while (!sub_ready_.load() && Clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(1));  // start-up only
  }
  if (sub_ready_.load()) {
    auto link = RedisLink::Connect(host_, port_, config_.password,
                                   milliseconds(config_.connect_timeout_ms));
    if (link.ok()) {
      publisher_ = *std::move(link);
      LinkUp(pub_up_, "publishing");
      Rejoin();
      common::MutexLock lock(&out_mu_);
      need_rejoin_ = publisher_ == nullptr;
    } else {
      LinkFailed(link.status(), publisher_, pub_up_, "publishing");
    }
  } else {
    spdlog::warn(
        "cluster: redis {} not reachable within {} ms; replica {} routes alone until it is",
        config_.redis, config_.connect_timeout_ms * 2, replica_);
  }
  pub_thread_ = std::thread([this] { PublishLoop(); });
  spdlog::info("cluster: replica {} ({}) of cluster '{}' on {}, {} peers known", replica_, Hex(id_),
               config_.name, config_.redis, [this] {
                 common::MutexLock lock(&peers_mu_);
                 return peers_.size();
               }());
}

void ClusterSync::Stop() {
  {
    common::MutexLock lock(&out_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_.store(true);
  out_cv_.SignalAll();
  if (pub_thread_.joinable()) pub_thread_.join();
  if (sub_thread_.joinable()) sub_thread_.join();
}

// ---- The sink: queue only ------------------------------------------------------------------

void ClusterSync::Queue(std::string record) {
  common::MutexLock lock(&out_mu_);
  if (stopping_ || !pub_up_.load(std::memory_order_relaxed) ||
      out_bytes_ + record.size() > config_.max_queue_bytes) {
    metrics_->dropped.Increment();  // a rejoin's snapshot makes up for it
    return;
  }
  const bool idle = out_.empty() && !load_dirty_;
  if (out_.empty() || out_.back().first.size() >= kFrameTargetBytes) out_.emplace_back();
  out_.back().first += record;
  ++out_.back().second;
  out_bytes_ += record.size();
  if (idle) out_cv_.Signal();
}

void ClusterSync::LoadChanged() {
  common::MutexLock lock(&out_mu_);
  if (load_dirty_) return;
  load_dirty_ = true;
  load_changed_unix_us_ = NowUnixUs();
  if (out_.empty()) out_cv_.Signal();
}

void ClusterSync::Learned(const Worker& worker, absl::Span<const kvindex::BlockHash> chain,
                          uint32_t prompt_tokens) {
  if (chain.empty()) return;
  // A longer prompt is learned by its first max_chain_blocks: its prefix is what others match.
  chain = chain.subspan(0, std::min<size_t>(chain.size(), config_.max_chain_blocks));
  std::string rec;
  AppendBlocksRecord(&rec, RecordKind::kLearn, worker.name(), prompt_tokens, chain);
  Queue(std::move(rec));
}

void ClusterSync::Forgot(const Worker& worker, absl::Span<const kvindex::BlockHash> blocks) {
  if (blocks.empty()) return;
  blocks = blocks.subspan(0, std::min<size_t>(blocks.size(), config_.max_chain_blocks));
  std::string rec;
  AppendBlocksRecord(&rec, RecordKind::kForget, worker.name(), 0, blocks);
  Queue(std::move(rec));
}

void ClusterSync::Pinned(std::string_view response_id, const Worker& worker) {
  Record r;
  r.kind = RecordKind::kPin;
  r.text = std::string(response_id);
  r.worker = worker.name();
  std::string rec;
  AppendRecord(&rec, r);
  Queue(std::move(rec));
}

void ClusterSync::Unpinned(std::string_view response_id) {
  Record r;
  r.kind = RecordKind::kUnpin;
  r.text = std::string(response_id);
  std::string rec;
  AppendRecord(&rec, r);
  Queue(std::move(rec));
}

void ClusterSync::Drained(const Worker& worker, bool draining) {
  Record r;
  r.kind = RecordKind::kDrain;
  r.worker = worker.name();
  r.flag = draining;
  std::string rec;
  AppendRecord(&rec, r);
  Queue(std::move(rec));
}

// ---- Links ---------------------------------------------------------------------------------

void ClusterSync::LinkUp(std::atomic<bool>& up, const char* which) {
  if (up.exchange(true)) return;
  spdlog::info("cluster: {} link to redis {} up", which, config_.redis);
  metrics_->connected.Set(connected() ? 1 : 0);
  metrics_->degraded.Set(connected() ? 0 : 1);
}

void ClusterSync::LinkFailed(const absl::Status& status, std::unique_ptr<RedisLink>& link,
                             std::atomic<bool>& up, const char* which) {
  link.reset();
  if (up.exchange(false)) {
    spdlog::warn(
        "cluster: {} link to redis {} down ({}); replica {} routes on its own state "
        "until it is back",
        which, config_.redis, status.message(), replica_);
  }
  metrics_->connected.Set(0);
  metrics_->degraded.Set(1);
  RequestRejoin();
}

void ClusterSync::RequestRejoin() {
  common::MutexLock lock(&out_mu_);
  need_rejoin_ = true;
}

void ClusterSync::RequestSnapshot(uint64_t replica) {
  Record r;
  r.kind = RecordKind::kSnapshotRequest;
  r.text = replica == 0 ? "" : Hex(replica);
  std::string rec;
  AppendRecord(&rec, r);
  Queue(std::move(rec));
}

// ---- Publisher -----------------------------------------------------------------------------

void ClusterSync::PublishLoop() {
  const milliseconds heartbeat(config_.heartbeat_ms);
  const milliseconds snapshot_interval(config_.snapshot_interval_ms);
  auto next_heartbeat = Clock::now();
  auto next_snapshot = Clock::now() + snapshot_interval;
  auto retry_at = Clock::now();
  milliseconds backoff(100);
  for (;;) {
    std::vector<std::pair<std::string, uint32_t>> frames;
    std::vector<std::string> merges;
    bool loads = false;
    bool rejoin = false;
    bool snapshot_asked = false;
    int64_t changed_us = 0;
    {
      common::MutexLock lock(&out_mu_);
      auto deadline = std::min(next_heartbeat, next_snapshot);
      if (publisher_ == nullptr) deadline = retry_at;
      while (!stopping_ && out_.empty() && !load_dirty_ && merge_keys_.empty() && !snapshot_due_ &&
             !(need_rejoin_ && publisher_ != nullptr && sub_up_.load()) &&
             Clock::now() < deadline) {
        out_cv_.WaitUntil(&out_mu_, deadline);
      }
      if (stopping_) break;
      frames.swap(out_);
      out_bytes_ = 0;
      loads = load_dirty_;
      load_dirty_ = false;
      changed_us = load_changed_unix_us_;
      // A rejoin needs both links: the subscriber's first, so nothing published after the
      // snapshots are read is missed.
      if (sub_up_.load()) {
        rejoin = need_rejoin_;
        need_rejoin_ = false;
      }
      merges.assign(merge_keys_.begin(), merge_keys_.end());
      merge_keys_.clear();
      snapshot_asked = snapshot_due_;
      snapshot_due_ = false;
    }
    const auto now = Clock::now();
    ExpirePeers(now);  // with Redis down too: a silent replica's load must not stay
    if (publisher_ == nullptr) {
      for (const auto& f : frames) metrics_->dropped.Increment(f.second);
      if (now < retry_at) {
        if (rejoin) RequestRejoin();
        continue;
      }
      auto link = RedisLink::Connect(host_, port_, config_.password,
                                     milliseconds(config_.connect_timeout_ms));
      if (!link.ok()) {
        LinkFailed(link.status(), publisher_, pub_up_, "publishing");
        retry_at = Clock::now() + backoff;
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
      publisher_ = *std::move(link);
      backoff = milliseconds(100);
      LinkUp(pub_up_, "publishing");
      RequestRejoin();  // the state published meanwhile was dropped: resync through snapshots
      continue;
    }
    if (rejoin) {
      Rejoin();
      if (publisher_ == nullptr) continue;
    }
    const bool beat = now >= next_heartbeat;
    if (beat) next_heartbeat = now + heartbeat;
    if (beat || loads) {
      // The load table goes first: it is small and what other replicas' decisions wait for.
      std::string head;
      uint32_t count = 1;
      if (beat) {
        Record hello;
        hello.kind = RecordKind::kHello;
        hello.text = replica_;
        AppendRecord(&head, hello);
        ++count;
      }
      head += LoadsRecord(true, loads ? changed_us : 0);
      frames.insert(frames.begin(), {std::move(head), count});
    }
    std::vector<std::string> wire;
    wire.reserve(frames.size());
    const int64_t sent_us = NowUnixUs();
    for (const auto& [records, count] : frames) {
      if (count == 0) continue;
      wire.push_back(EncodeFrame(id_, seq_.fetch_add(1) + 1, sent_us, count, records));
    }
    if (!wire.empty()) {
      if (auto s = publisher_->Publish(channel_, wire); !s.ok()) {
        LinkFailed(s, publisher_, pub_up_, "publishing");
        continue;
      }
      for (const auto& w : wire) metrics_->bytes_sent.Increment(static_cast<double>(w.size()));
      metrics_->sent.Increment(static_cast<double>(wire.size()));
    }
    for (const std::string& key : merges) MergeSnapshotKey(key);
    if (publisher_ != nullptr && (snapshot_asked || now >= next_snapshot)) {
      WriteSnapshot(snapshot_asked);  // one asked for is merged by every replica
      next_snapshot = now + snapshot_interval;
    }
  }
  if (publisher_ != nullptr) {
    Record bye;
    bye.kind = RecordKind::kBye;
    std::string rec;
    AppendRecord(&rec, bye);
    (void)publisher_->Publish(channel_,
                              {EncodeFrame(id_, seq_.fetch_add(1) + 1, NowUnixUs(), 1, rec)});
    publisher_.reset();
  }
}

std::string ClusterSync::LoadsRecord(bool full, int64_t changed_unix_us) const {
  Record r;
  r.kind = RecordKind::kLoads;
  r.flag = full;
  r.changed_unix_us = changed_unix_us;
  const auto fleet = state_.snapshot();
  for (const auto& w : fleet->workers) r.loads.push_back({w->name(), w->local_load()});
  std::string out;
  AppendRecord(&out, r);
  return out;
}

void ClusterSync::Rejoin() {
  WriteSnapshot(true);
  if (publisher_ == nullptr) return;
  auto keys = publisher_->Keys(snapshot_prefix_ + "*", kMaxSnapshotKeys);
  if (!keys.ok()) {
    LinkFailed(keys.status(), publisher_, pub_up_, "publishing");
    return;
  }
  const std::string own = SnapshotKey(id_);
  for (const std::string& key : *keys) {
    if (key != own) MergeSnapshotKey(key);
  }
  // The keys are up to snapshot_interval_ms old: the peers' fresh state follows.
  RequestSnapshot(0);
}

void ClusterSync::WriteSnapshot(bool merge_now) {
  if (publisher_ == nullptr) return;
  std::string records;
  uint32_t count = 0;
  const auto fleet = state_.snapshot();
  const kvindex::PrefixIndex& index = state_.planner.index();
  for (const auto& w : fleet->workers) {
    const auto held =
        index.Held(RoutePlanner::HolderOf(*w), kvindex::Tier::kGpu, kMaxHeldBlocksPerWorker);
    if (!held.empty()) {
      AppendBlocksRecord(&records, RecordKind::kLearn, w->name(), 0, held);
      ++count;
    }
    if (w->draining()) {
      Record d;
      d.kind = RecordKind::kDrain;
      d.worker = w->name();
      d.flag = true;
      AppendRecord(&records, d);
      ++count;
    }
  }
  for (const auto& [id, worker_id] : state_.response_pins.Live(SteadyClock::now())) {
    for (const auto& w : fleet->workers) {
      if (w->id() != worker_id) continue;
      Record p;
      p.kind = RecordKind::kPin;
      p.text = id;
      p.worker = w->name();
      AppendRecord(&records, p);
      ++count;
    }
  }
  const std::string key = SnapshotKey(id_);
  const std::string frame = EncodeFrame(id_, 0, NowUnixUs(), count, records);
  // Kept a little longer than the replica is remembered, so a peer that noticed loss finds it.
  const milliseconds ttl(
      std::max<uint64_t>(uint64_t{config_.snapshot_interval_ms} * 3, config_.peer_timeout_ms));
  Record ready;
  ready.kind = RecordKind::kSnapshotReady;
  ready.text = key;
  ready.flag = merge_now;
  Record hello;  // a joining replica's first frame names it
  hello.kind = RecordKind::kHello;
  hello.text = replica_;
  std::string rec;
  AppendRecord(&rec, hello);
  AppendRecord(&rec, ready);
  absl::Status s = publisher_->Set(key, frame, ttl);
  if (s.ok()) {
    s = publisher_->Publish(channel_,
                            {EncodeFrame(id_, seq_.fetch_add(1) + 1, NowUnixUs(), 2, rec)});
  }
  if (!s.ok()) {
    LinkFailed(s, publisher_, pub_up_, "publishing");
    return;
  }
  metrics_->snapshots_written.Increment();
  metrics_->bytes_sent.Increment(static_cast<double>(frame.size()));
}

void ClusterSync::MergeSnapshotKey(const std::string& key) {
  if (publisher_ == nullptr) return;
  auto bytes = publisher_->Get(key);
  if (!bytes.ok()) {
    LinkFailed(bytes.status(), publisher_, pub_up_, "publishing");
    return;
  }
  if (!bytes->has_value()) return;  // expired: its replica is gone
  metrics_->bytes_received.Increment(static_cast<double>((*bytes)->size()));
  MergeSnapshot(**bytes);
}

void ClusterSync::ExpirePeers(Clock::time_point now) {
  std::vector<std::string> gone;
  size_t left = 0;
  {
    common::MutexLock lock(&peers_mu_);
    gone = peers_.Expire(now, milliseconds(config_.peer_timeout_ms));
    left = peers_.size();
  }
  metrics_->peers.Set(static_cast<double>(left));
  if (gone.empty()) return;
  for (const std::string& name : gone) {
    spdlog::warn("cluster: replica {} silent for {} ms; its reservations are dropped", name,
                 config_.peer_timeout_ms);
  }
  RefreshRemoteLoads();
}

// ---- Subscriber ----------------------------------------------------------------------------

void ClusterSync::SubscribeLoop() {
  std::unique_ptr<RedisLink> link;
  milliseconds backoff(100);
  bool was_up = false;
  while (!stop_.load()) {
    if (link == nullptr) {
      auto c = RedisLink::Connect(host_, port_, config_.password,
                                  milliseconds(config_.connect_timeout_ms));
      absl::Status s = c.status();
      if (c.ok()) {
        link = *std::move(c);
        s = link->Subscribe(channel_);
      }
      if (!s.ok()) {
        LinkFailed(s, link, sub_up_, "subscribing");
        for (auto until = Clock::now() + backoff; Clock::now() < until && !stop_.load();) {
          std::this_thread::sleep_for(milliseconds(20));  // a background thread's retry wait
        }
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
      backoff = milliseconds(100);
      LinkUp(sub_up_, "subscribing");
      sub_ready_.store(true);
      if (was_up) RequestRejoin();  // frames were missed while it was down
      was_up = true;
      out_cv_.SignalAll();
    }
    auto m = link->NextMessage(kPollWait, kMaxFrameBytes);
    if (!m.ok()) {
      LinkFailed(m.status(), link, sub_up_, "subscribing");
      continue;
    }
    if (m->has_value()) Apply(**m);
  }
}

std::string ClusterSync::StatusJson() const {
  const int64_t now_us = NowUnixUs();
  const auto ago_ms = [now_us](int64_t us) { return us > 0 ? (now_us - us) / 1000 : -1; };
  std::string out = "{\"enabled\":true,\"redis\":";
  common::AppendJsonString(out, config_.redis);
  out += ",\"cluster\":";
  common::AppendJsonString(out, config_.name);
  out += ",\"replica\":";
  common::AppendJsonString(out, replica_);
  common::StrAppend(&out, ",\"id\":\"", Hex(id_),
                    "\",\"connected\":", connected() ? "true" : "false", ",\"peers\":[");
  {
    common::MutexLock lock(&peers_mu_);
    const auto steady_now = Clock::now();
    bool first = true;
    for (const auto& p : peers_.Peers()) {
      out += first ? "{\"replica\":" : ",{\"replica\":";
      first = false;
      common::AppendJsonString(out, p.name);
      common::StrAppend(&out, ",\"id\":\"", Hex(p.id), "\",\"last_heard_ms\":",
                        std::chrono::duration_cast<milliseconds>(steady_now - p.last_heard).count(),
                        ",\"seq\":", p.seq, ",\"frames\":", p.frames, ",\"lost\":", p.lost, "}");
    }
  }
  size_t queued = 0;
  {
    common::MutexLock lock(&out_mu_);
    queued = out_bytes_;
  }
  common::StrAppend(
      &out, "],\"messages_sent\":", static_cast<uint64_t>(metrics_->sent.Value()),
      ",\"messages_received\":", static_cast<uint64_t>(metrics_->received.Value()),
      ",\"messages_lost\":", static_cast<uint64_t>(metrics_->lost.Value()),
      ",\"messages_dropped\":", static_cast<uint64_t>(metrics_->dropped.Value()),
      ",\"decode_errors\":", static_cast<uint64_t>(metrics_->decode_errors.Value()),
      ",\"snapshots_merged\":", static_cast<uint64_t>(metrics_->snapshots_merged.Value()),
      ",\"queue_bytes\":", queued, ",\"last_sync_ms\":", ago_ms(last_heard_unix_us_.load()),
      ",\"last_snapshot_merged_ms\":", ago_ms(last_snapshot_merged_unix_us_.load()),
      ",\"last_lag_us\":", last_lag_us_.load(), "}");
  return out;
}

}  // namespace kvgate::router::cluster
