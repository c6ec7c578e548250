#include "router/http/thread_context.h"

#include "common/assert.h"

namespace kvgate::router {

using namespace std::chrono_literals;

SnapshotLease& SnapshotLease::operator=(SnapshotLease&& o) noexcept {
  if (this != &o) {
    if (tc_ != nullptr) tc_->ReleaseEntry(entry_);
    tc_ = o.tc_;
    entry_ = o.entry_;
    o.tc_ = nullptr;
  }
  return *this;
}

SnapshotLease::~SnapshotLease() {
  if (tc_ != nullptr) tc_->ReleaseEntry(entry_);
}

ThreadContext::ThreadContext(GatewayState& state, uint32_t index)
    : index(index),
      state_(state),
      scratch_(std::make_unique_for_overwrite<char[]>(kScratchBytes)) {}

ThreadContext::~ThreadContext() = default;

void ThreadContext::Refresh() {
  const uint64_t v = state_.version();
  if (v == seen_version_) return;
  seen_version_ = v;
  snapshots_.push_back(SnapshotLease::Entry{state_.snapshot(), 0});
  // Older snapshots stay while a request of this thread still leases them.
  while (snapshots_.size() > 1 && snapshots_.front().users == 0) snapshots_.pop_front();
}

SnapshotLease ThreadContext::Lease() {
  Refresh();
  SnapshotLease::Entry* e = &snapshots_.back();
  ++e->users;
  return SnapshotLease(this, e);
}

void ThreadContext::ReleaseEntry(SnapshotLease::Entry* e) {
  KVGATE_ASSERT(e->users > 0, "a snapshot lease ended twice");
  --e->users;
  while (snapshots_.size() > 1 && snapshots_.front().users == 0) snapshots_.pop_front();
}

const config::Config& ThreadContext::config() {
  Refresh();
  return *snapshots_.back().snapshot->config;
}

ShardedFamily::Series& ThreadContext::RequestSeries(EndpointLabel endpoint, int code,
                                                    int64_t worker_id, std::string_view worker) {
  // A worker's id is stable for its URL, so it stands for the name in the key.
  const uint64_t key = (uint64_t{static_cast<uint8_t>(endpoint)} << 56) |
                       (uint64_t{static_cast<uint16_t>(code)} << 40) |
                       static_cast<uint64_t>(worker_id + 1);
  auto it = requests_.find(key);
  if (it != requests_.end()) return *it->second;
  const std::string code_text = std::to_string(code);
  const std::string_view values[] = {EndpointLabelName(endpoint), EndpointLabelApi(endpoint),
                                     code_text, worker};
  ShardedFamily::Series* s = state_.metrics.requests.Get(index, values);
  requests_.emplace(key, s);
  return *s;
}

prometheus::Counter& ThreadContext::ApiKeySeries(const std::string& key, int code) {
  prometheus::Counter*& c = api_key_series_[std::make_pair(key, code)];
  if (c == nullptr) c = &state_.metrics.ApiKeyRequests(key, code);
  return *c;
}

ShardedFamily::Series& ThreadContext::DurationSeries(EndpointLabel endpoint) {
  ShardedFamily::Series*& s = durations_[static_cast<int>(endpoint)];
  if (s == nullptr) {
    const std::string_view values[] = {EndpointLabelName(endpoint), EndpointLabelApi(endpoint)};
    s = state_.metrics.request_duration.Get(index, values);
  }
  return *s;
}

ShardedFamily::Series& ThreadContext::OverheadSeries() {
  if (overhead_ == nullptr) overhead_ = state_.metrics.router_overhead.Get(index, {});
  return *overhead_;
}

const WorkerSeries& ThreadContext::ForWorker(uint32_t worker_id, std::string_view name) {
  auto [it, inserted] = worker_series_.try_emplace(worker_id);
  if (inserted) {
    const std::string_view values[] = {name};
    RouterMetrics& m = state_.metrics;
    it->second = WorkerSeries{m.ttfb.Get(index, values),
                              m.ttft.Get(index, values),
                              m.ttft_error.Get(index, values),
                              m.ttft_predicted.Get(index, values),
                              m.ttft_observed.Get(index, values),
                              m.predicted_tokens.Get(index, values),
                              m.actual_tokens.Get(index, values),
                              m.overestimated_tokens.Get(index, values),
                              m.underestimated_tokens.Get(index, values)};
  }
  return it->second;
}

void ThreadContext::MarkIdle(ClientConnection& c) {
  c.idle = true;
  if (c.in_idle_list) return;
  auto& list = c.reserve ? idle_reserve_ : idle_;
  c.idle_pos = list.insert(list.end(), &c);
  c.in_idle_list = true;
  if (!c.reserve) idle_count_.fetch_add(1, std::memory_order_relaxed);
}

void ThreadContext::MarkBusy(ClientConnection& c) {
  c.idle = false;
  if (!c.in_idle_list) return;
  (c.reserve ? idle_reserve_ : idle_).erase(c.idle_pos);
  c.in_idle_list = false;
  if (!c.reserve) idle_count_.fetch_sub(1, std::memory_order_relaxed);
}

bool ThreadContext::ReapOldestIdle(bool reserve) {
  auto& list = reserve ? idle_reserve_ : idle_;
  if (list.empty()) return false;
  ClientConnection& c = *list.front();
  MarkBusy(c);
  c.reaped = true;
  ReleasePlace(c);
  // Shut down, not closed: the descriptor stays the session's until it closes it (a TLS session
  // writes its close_notify to it), so a new connection cannot be given the same number. The
  // session's wait ends (cancelled, or EOF if it has not started waiting yet).
  error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_both, ignored);
  c.socket.cancel(ignored);
  state_.metrics.ConnectionsReaped().Increment();
  return true;
}

void ThreadContext::CountClientTlsFailure() {
  state_.metrics.TlsHandshakeErrors("client").Increment();
}

void ThreadContext::ReleasePlace(ClientConnection& c) {
  if (!c.holds_place) return;
  c.holds_place = false;
  state_.client_connections.Remove(c.peer);
  state_.open_connections.fetch_sub(1, std::memory_order_relaxed);
}

void ThreadContext::StartSweep() {
  if (sweeping_) return;
  sweeping_ = true;
  net::co_spawn(ioc, Sweep(), net::detached);
}

net::awaitable<void> ThreadContext::Sweep() {
  net::steady_timer timer(ioc);
  for (;;) {
    timer.expires_after(100ms);
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (ec) break;
    const auto now = SteadyClock::now();
    for (const ClientConnectionPtr& c : connections) {
      if (c->deadline <= now) c->Expire();
      if (c->watch_wanted && !c->watch_armed) ArmDisconnectWatch(*c);
    }
    pool.WatchIdle();
  }
}

}  // namespace kvgate::router
