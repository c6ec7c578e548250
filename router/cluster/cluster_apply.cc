// File: router/cluster/cluster_apply.cc
// The replica sync's receiving side (cluster_sync.h): frames from the channel and snapshots
// from Redis keys, checked, then applied to this replica's state — the others' load, the
// approximate index, Responses pins and drains.
#include "common/strings.h"
#include "router/cluster/cluster_internal.h"
#include "router/cluster/cluster_sync.h"
#include "router/runtime/gateway_state.h"
#include "spdlog/spdlog.h"

namespace kvgate::router::cluster {
namespace {

Worker* FindWorker(const Snapshot& fleet, std::string_view name) {
  for (const auto& w : fleet.workers) {
    if (w->name() == name) return w.get();
  }
  return nullptr;
}

}  // namespace

void ClusterSync::Apply(std::string_view bytes) {
  DecodeLimits limits;
  limits.max_blocks = config_.max_chain_blocks;
  auto frame = DecodeFrame(bytes, limits);
  if (!frame.ok()) {
    metrics_->decode_errors.Increment();
    spdlog::warn("cluster: refused a frame: {}", frame.status().message());
    return;
  }
  if (frame->sender == id_) return;  // our own, back from the channel
  metrics_->received.Increment();
  metrics_->bytes_received.Increment(static_cast<double>(bytes.size()));
  PeerTable::Heard heard;
  {
    common::MutexLock lock(&peers_mu_);
    heard = peers_.Hear(frame->sender, frame->seq, Clock::now());
  }
  if (heard.duplicate) return;
  last_heard_unix_us_.store(NowUnixUs());
  if (heard.lost > 0) {
    metrics_->lost.Increment(static_cast<double>(heard.lost));
    spdlog::warn("cluster: lost {} frames of replica {}; asking for its snapshot", heard.lost,
                 Hex(frame->sender));
    RequestSnapshot(frame->sender);
  }
  const auto fleet = state_.snapshot();
  for (const Record& rec : frame->records) ApplyRecord(*fleet, *frame, rec, false);
  if (heard.new_peer) {
    std::string name;
    {
      common::MutexLock lock(&peers_mu_);
      for (const auto& p : peers_.Peers()) {
        if (p.id == frame->sender) name = p.name;
      }
    }
    spdlog::info("cluster: replica {} ({}) joined", name.empty() ? "?" : name, Hex(frame->sender));
  }
}

void ClusterSync::MergeSnapshot(std::string_view bytes) {
  DecodeLimits limits;
  limits.max_blocks = kMaxHeldBlocksPerWorker;
  auto frame = DecodeFrame(bytes, limits);
  if (!frame.ok()) {
    metrics_->decode_errors.Increment();
    spdlog::warn("cluster: refused a snapshot: {}", frame.status().message());
    return;
  }
  if (frame->sender == id_) return;
  const auto fleet = state_.snapshot();
  for (const Record& rec : frame->records) ApplyRecord(*fleet, *frame, rec, true);
  metrics_->snapshots_merged.Increment();
  last_snapshot_merged_unix_us_.store(NowUnixUs());
}

void ClusterSync::ApplyRecord(const Snapshot& fleet, const Frame& frame, const Record& rec,
                              bool from_snapshot) {
  const auto now = SteadyClock::now();
  switch (rec.kind) {
    case RecordKind::kHello: {
      common::MutexLock lock(&peers_mu_);
      peers_.SetName(frame.sender, rec.text);
      return;
    }
    case RecordKind::kLoads: {
      {
        common::MutexLock lock(&peers_mu_);
        peers_.SetLoads(frame.sender, rec.loads, rec.flag);
      }
      RefreshRemoteLoads();
      if (rec.changed_unix_us > 0) {
        const int64_t lag = std::max<int64_t>(0, NowUnixUs() - rec.changed_unix_us);
        last_lag_us_.store(lag);
        metrics_->lag.Observe(static_cast<double>(lag) / 1e6);
      }
      return;
    }
    case RecordKind::kLearn:
    case RecordKind::kForget: {
      Worker* w = FindWorker(fleet, rec.worker);
      if (w == nullptr || rec.blocks.empty()) return;
      const kvindex::Holder holder = RoutePlanner::HolderOf(*w);
      if (rec.kind == RecordKind::kForget) {
        state_.planner.index().Remove(holder, rec.blocks, kvindex::Tier::kGpu);
        return;
      }
      if (auto s = state_.planner.index().Insert(holder, rec.blocks, kvindex::Tier::kGpu);
          !s.ok()) {
        spdlog::debug("cluster: learning for {} refused: {}", w->name(), s.message());
      }
      if (!from_snapshot && rec.prompt_tokens > 0) {
        const double half_life_s = fleet.config->routing.kvaware.balance_half_life_ms / 1000.0;
        w->AddRecentWork(rec.prompt_tokens, now, half_life_s);
      }
      return;
    }
    case RecordKind::kPin:
      if (Worker* w = FindWorker(fleet, rec.worker); w != nullptr) {
        state_.response_pins.Learn(rec.text, w->id(), now);
      }
      return;
    case RecordKind::kUnpin:
      state_.response_pins.Forget(rec.text);
      return;
    case RecordKind::kDrain:
      if (Worker* w = FindWorker(fleet, rec.worker); w != nullptr) {
        if (w->draining() != rec.flag) {
          w->SetDraining(rec.flag);
          spdlog::warn("worker {} {} (admin, on another replica)", w->name(),
                       rec.flag ? "draining" : "no longer draining");
        }
      }
      return;
    case RecordKind::kSnapshotReady:
      // Only the sender's own key: a frame cannot make this replica read another key.
      if (rec.flag && rec.text == SnapshotKey(frame.sender)) {
        common::MutexLock lock(&out_mu_);
        merge_keys_.insert(rec.text);
        out_cv_.Signal();
      }
      return;
    case RecordKind::kSnapshotRequest:
      if (!from_snapshot && (rec.text.empty() || rec.text == Hex(id_))) {
        common::MutexLock lock(&out_mu_);
        snapshot_due_ = true;
        out_cv_.Signal();
      }
      return;
    case RecordKind::kBye: {
      bool known = false;
      {
        common::MutexLock lock(&peers_mu_);
        known = peers_.Remove(frame.sender);
      }
      if (known) {
        spdlog::info("cluster: replica {} left", Hex(frame.sender));
        RefreshRemoteLoads();
      }
      return;
    }
  }
}

void ClusterSync::RefreshRemoteLoads() {
  absl::flat_hash_map<std::string, LoadSnapshot> totals;
  {
    common::MutexLock lock(&peers_mu_);
    totals = peers_.Totals();
  }
  const auto fleet = state_.snapshot();
  for (const auto& w : fleet->workers) {
    const auto it = totals.find(w->name());
    w->SetRemoteLoad(it != totals.end() ? it->second : LoadSnapshot{});
  }
}

}  // namespace kvgate::router::cluster
