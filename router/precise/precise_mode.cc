#include "router/precise/precise_mode.h"

#include <map>

#include "common/mutex.h"
#include "common/strings.h"
#include "kvevents/endpoints.h"
#include "kvindex/block_hash.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// Counters fed from the subscriber's cumulative per-source totals (deltas at each refresh), so
// the events thread never touches a label lookup.
struct PreciseMode::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : verified(BuildGauge()
                     .Name("kvgate_precise_mode_verified")
                     .Help("1 when the worker's KV events are proven in sync (precise routing)")
                     .Register(r)),
        api_verified(BuildGauge()
                         .Name("kvgate_precise_api_verified")
                         .Help("1 when the worker's engine converts the agent API (messages, "
                               "responses) as kvgate does; 0: that API routes approximately")
                         .Register(r)),
        batches(Counter(r, "kvgate_kv_events_batches_total", "KV event batches applied")),
        stored(Counter(r, "kvgate_kv_events_blocks_stored_total", "Blocks stored by events")),
        removed(Counter(r, "kvgate_kv_events_blocks_removed_total", "Blocks removed by events")),
        gaps(Counter(r, "kvgate_kv_events_gaps_total", "Sequence gaps on the live stream")),
        replays(Counter(r, "kvgate_kv_events_replays_total", "Replay requests sent")),
        lost(Counter(r, "kvgate_kv_events_lost_batches_total",
                     "Batches neither received nor replayed")),
        restarts(Counter(r, "kvgate_kv_events_restarts_total",
                         "Engine restarts seen (sequence went backwards)")),
        bad(Counter(r, "kvgate_kv_events_bad_messages_total", "Undecodable event messages")),
        orphans(Counter(r, "kvgate_kv_events_orphan_blocks_total",
                        "Stored blocks whose parent kvgate never saw (not indexed)")),
        store_up(BuildGauge()
                     .Name("kvgate_store_up")
                     .Help("1 while the store's health checks pass and routing counts its tier")
                     .Register(r)),
        blocks(BuildGauge()
                   .Name("kvgate_kv_blocks")
                   .Help("Blocks each worker holds per tier, from its KV events")
                   .Register(r)),
        lag(BuildHistogram()
                .Name("kvgate_kv_events_lag_seconds")
                .Help("Engine timestamp of a batch to applied in the precise index")
                .Register(r)
                .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                                 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                 5})) {}

  static prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& r,
                                                          const std::string& name,
                                                          const std::string& help) {
    return BuildCounter().Name(name).Help(help).Register(r);
  }

  struct Totals {
    uint64_t batches = 0, stored = 0, removed = 0, gaps = 0, replays = 0, lost = 0, restarts = 0,
             bad = 0, orphans = 0;
  };

  void Drop(const std::string& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const prometheus::Labels l = {{"worker", worker}};
    for (auto* f :
         {&batches, &stored, &removed, &gaps, &replays, &lost, &restarts, &bad, &orphans}) {
      if (f->Has(l)) f->Remove(&f->Add(l));
    }
    if (verified.Has(l)) verified.Remove(&verified.Add(l));
    for (int a = 0; a < kNumPreciseApis; ++a) {
      const prometheus::Labels al = {{"worker", worker},
                                     {"api", PreciseApiName(static_cast<PreciseApi>(a))}};
      if (api_verified.Has(al)) api_verified.Remove(&api_verified.Add(al));
    }
    for (int t = 0; t < kvindex::kNumTiers; ++t) {
      const prometheus::Labels lt = {
          {"worker", worker},
          {"tier", std::string(kvindex::TierName(static_cast<kvindex::Tier>(t)))}};
      if (blocks.Has(lt)) blocks.Remove(&blocks.Add(lt));
    }
    last.erase(worker);
  }

  prometheus::Family<prometheus::Gauge>& verified;
  prometheus::Family<prometheus::Gauge>& api_verified;
  prometheus::Family<prometheus::Counter>& batches;
  prometheus::Family<prometheus::Counter>& stored;
  prometheus::Family<prometheus::Counter>& removed;
  prometheus::Family<prometheus::Counter>& gaps;
  prometheus::Family<prometheus::Counter>& replays;
  prometheus::Family<prometheus::Counter>& lost;
  prometheus::Family<prometheus::Counter>& restarts;
  prometheus::Family<prometheus::Counter>& bad;
  prometheus::Family<prometheus::Counter>& orphans;
  prometheus::Family<prometheus::Gauge>& store_up;
  prometheus::Family<prometheus::Gauge>& blocks;
  prometheus::Histogram& lag;
  common::Mutex mu;  // Refresh vs reload.
  // Per worker name: totals already counted.
  std::map<std::string, Totals> last ABSL_GUARDED_BY(mu);
};

class PreciseMode::Observer final : public kvevents::SubscriberObserver {
 public:
  explicit Observer(PreciseMode& owner) : owner_(owner) {}
  void OnBatchApplied(const kvevents::EventSource&, const kvevents::ApplyResult&,
                      double lag_s) override {
    owner_.metrics_->lag.Observe(std::max(0.0, lag_s));
  }
  void OnRestart(const kvevents::EventSource& source) override {
    owner_.speculative_.Forget(source.holder);
    common::MutexLock lock(&owner_.mu_);
    ++owner_.restarts_[source.holder.worker];
  }

 private:
  PreciseMode& owner_;
};

namespace {

kvevents::ApplierOptions ApplierOptionsFrom(const config::RoutingConfig& routing) {
  kvevents::ApplierOptions o;
  o.media.emplace_back("STORE", kvindex::Tier::kStore);  // kvgate-store's events
  for (const auto& [medium, tier] : routing.precise.media) {
    o.media.emplace_back(medium, tier == "host"  ? kvindex::Tier::kHost
                                 : tier == "gpu" ? kvindex::Tier::kGpu
                                                 : kvindex::Tier::kStore);
  }
  return o;
}

kvevents::SubscriberOptions SubscriberOptionsFrom(const config::RoutingConfig& routing) {
  kvevents::SubscriberOptions o;
  o.replay_timeout = std::chrono::milliseconds(routing.precise.replay_timeout_ms);
  return o;
}

}  // namespace

PreciseMode::PreciseMode(prometheus::Registry& registry, const config::RoutingConfig& routing)
    : index_(kvindex::PrefixIndexOptions{.num_shards = 64,
                                         // The engines say what they evict: no LRU guessing.
                                         .default_capacity_blocks = uint64_t{1} << 26,
                                         .max_memory_bytes = routing.index_memory_bytes}),
      applier_(index_, ApplierOptionsFrom(routing), &groups_),
      observer_(std::make_unique<Observer>(*this)),
      metrics_(std::make_unique<Metrics>(registry)),
      subscriber_(applier_, observer_.get(), SubscriberOptionsFrom(routing)) {}

PreciseMode::~PreciseMode() { Stop(); }

void PreciseMode::Start() { subscriber_.Start(); }

void PreciseMode::Stop() { subscriber_.Stop(); }

void PreciseMode::Configure(const WorkerList& workers,
                            const std::vector<config::StoreConfig>& stores) {
  std::vector<kvevents::EventSource> sources;
  bool any = !stores.empty();
  for (size_t i = 0; i < stores.size(); ++i) {
    kvevents::EventSource s;
    s.holder = StoreHolder(i);
    s.name = common::StrCat("store ", stores[i].name);
    s.model = stores[i].model;
    s.endpoint = stores[i].kv_events.endpoint;
    s.replay_endpoint = stores[i].kv_events.replay_endpoint;
    s.topic = stores[i].kv_events.topic;
    s.bind = stores[i].kv_events.bind;
    sources.push_back(std::move(s));
  }
  {
    common::MutexLock lock(&mu_);
    // A store keeps its health across a reload that leaves it in place.
    for (size_t i = 0; i < kMaxStores; ++i) {
      if (i < stores.size() && i < stores_->size() && (*stores_)[i] == stores[i]) continue;
      store_down_[i].store(false, std::memory_order_relaxed);
      store_failures_[i] = store_successes_[i] = 0;
    }
    for (size_t i = stores.size(); i < stores_->size(); ++i) {
      const prometheus::Labels l = {{"store", (*stores_)[i].name}};
      if (metrics_->store_up.Has(l)) metrics_->store_up.Remove(&metrics_->store_up.Add(l));
    }
    for (size_t i = 0; i < stores.size(); ++i) {
      metrics_->store_up.Add({{"store", stores[i].name}}).Set(StoreUp(i) ? 1 : 0);
    }
    stores_ = std::make_shared<const std::vector<config::StoreConfig>>(stores);
  }
  for (const auto& w : workers) {
    const auto& ke = w->config().kv_events;
    if (!ke) continue;
    any = true;
    const auto models = w->Models();
    // Root blocks are namespaced by the served model: wait until config or /v1/models names it
    // (the prober re-configures when it does).
    if (models.empty()) continue;
    for (uint32_t r = 0; r < w->config().dp_size; ++r) {
      kvevents::EventSource s;
      s.holder = HolderOf(*w, r);
      s.name = w->config().dp_size > 1 ? common::StrCat(w->name(), " rank ", r) : w->name();
      s.model = models.front();
      s.endpoint = kvevents::OffsetEndpoint(ke->endpoint, r);
      s.replay_endpoint =
          ke->replay_endpoint.empty() ? "" : kvevents::OffsetEndpoint(ke->replay_endpoint, r);
      s.topic = ke->topic;
      s.bind = ke->bind;
      sources.push_back(std::move(s));
    }
  }
  enabled_.store(any, std::memory_order_release);
  // Series of workers that left.
  {
    common::MutexLock lock(&metrics_->mu);
    std::vector<std::string> gone;
    for (const auto& [name, _] : metrics_->last) {
      bool kept = false;
      for (const auto& w : workers) kept |= w->name() == name && w->config().kv_events;
      if (!kept) gone.push_back(name);
    }
    for (const auto& name : gone) metrics_->Drop(name);
  }
  subscriber_.SetSources(std::move(sources));
}

PreciseMode::StoreList PreciseMode::Stores() const {
  common::MutexLock lock(&mu_);
  return stores_;
}

bool PreciseMode::RecordStoreHealth(size_t i, bool ok, const config::HealthCheckConfig& cfg) {
  if (i >= kMaxStores) return false;
  const StoreList stores = Stores();
  if (i >= stores->size()) return false;
  const bool down = store_down_[i].load(std::memory_order_relaxed);
  bool changed = false;
  if (ok) {
    store_failures_[i] = 0;
    if (down && ++store_successes_[i] >= cfg.healthy_threshold) changed = true;
  } else {
    store_successes_[i] = 0;
    if (!down && ++store_failures_[i] >= cfg.unhealthy_threshold) changed = true;
  }
  if (!changed) return false;
  store_down_[i].store(!down, std::memory_order_relaxed);
  const std::string& name = (*stores)[i].name;
  if (down) {
    spdlog::info("store {} is up again: routing counts its tier", name);
  } else {
    spdlog::error(
        "store {} failed {} health checks: routing stops counting its tier (workers "
        "recompute what they would have loaded)",
        name, cfg.unhealthy_threshold);
  }
  common::MutexLock lock(&mu_);
  metrics_->store_up.Add({{"store", name}}).Set(down ? 1 : 0);
  return true;
}

const tokenizer::Tokenizer* PreciseMode::TokenizerFor(const config::PreciseConfig& config,
                                                      std::string_view model) {
  for (const auto& [m, name] : config.model_tokenizers) {
    if (m == model) return tokenizer::TokenizerByName(name);
  }
  return tokenizer::TokenizerByName(config.tokenizer);
}

void PreciseMode::TokenChain(absl::Span<const uint32_t> tokens, std::string_view model,
                             uint32_t block_size, std::vector<kvindex::BlockHash>* out) {
  out->clear();
  kvindex::HashTokenBlocks(tokens, kvevents::TokenRootSeed(model), block_size, out);
}

void PreciseMode::SetState(Worker& worker, PreciseState state, std::string reason) {
  const PreciseState old = worker.precise_state();
  {
    // Reason first, state inside the same lock: a reader that sees the new state and then asks
    // for the reason gets this one, not the previous state's.
    common::MutexLock lock(&mu_);
    reasons_[worker.id()] = reason;
    worker.set_precise_state(state);
  }
  if (old != state) {
    if (state == PreciseState::kUnverified) {
      spdlog::error("precise mode: worker {} NOT verified, routing it in approximate mode: {}",
                    worker.name(), reason);
    } else if (state == PreciseState::kVerified) {
      spdlog::info("precise mode: worker {} verified: {}", worker.name(), reason);
    } else if (old == PreciseState::kVerified) {
      spdlog::warn("precise mode: worker {} re-verifying ({}): {}", worker.name(),
                   PreciseStateName(state), reason);
    }
  }
  metrics_->verified.Add({{"worker", worker.name()}}).Set(state == PreciseState::kVerified);
}

void PreciseMode::SetApiAgreement(Worker& worker, PreciseApi api, bool agrees, std::string reason) {
  const bool was = worker.precise_api_agrees(api);
  {
    common::MutexLock lock(&mu_);
    api_reasons_[worker.id()][static_cast<int>(api)] = reason;
    worker.set_precise_api_agrees(api, agrees);
  }
  if (!agrees) {
    spdlog::error(
        "precise mode: worker {} converts the {} API differently, routing those "
        "requests in approximate mode (other APIs stay precise): {}",
        worker.name(), PreciseApiName(api), reason);
  } else if (!was) {
    spdlog::info("precise mode: worker {} agrees on the {} API again: {}", worker.name(),
                 PreciseApiName(api), reason);
  }
  metrics_->api_verified.Add({{"worker", worker.name()}, {"api", PreciseApiName(api)}})
      .Set(agrees ? 1 : 0);
}

std::string PreciseMode::ApiReason(const Worker& worker, PreciseApi api) const {
  common::MutexLock lock(&mu_);
  auto it = api_reasons_.find(worker.id());
  return it == api_reasons_.end() ? "" : it->second[static_cast<int>(api)];
}

std::string PreciseMode::Reason(const Worker& worker) const {
  common::MutexLock lock(&mu_);
  auto it = reasons_.find(worker.id());
  return it == reasons_.end() ? "" : it->second;
}

uint64_t PreciseMode::Restarts(const Worker& worker) const {
  common::MutexLock lock(&mu_);
  auto it = restarts_.find(worker.id());
  return it == restarts_.end() ? 0 : it->second;
}

void PreciseMode::RefreshMetrics(const WorkerList& workers) {
  const auto sources = subscriber_.Status();
  common::MutexLock lock(&metrics_->mu);
  for (const auto& w : workers) {
    if (!w->config().kv_events) continue;
    Metrics::Totals now;
    for (const auto& s : sources) {
      if (s.source.holder.worker != w->id()) continue;
      now.batches += s.batches;
      now.stored += s.stored_blocks;
      now.removed += s.removed_blocks;
      now.gaps += s.gaps;
      now.replays += s.replays;
      now.lost += s.lost_batches;
      now.restarts += s.restarts;
      now.bad += s.bad_messages;
      now.orphans += s.orphan_blocks;
    }
    Metrics::Totals& was = metrics_->last[w->name()];
    const prometheus::Labels l = {{"worker", w->name()}};
    // A reopened source restarts its totals: count from zero again.
    auto add = [&](prometheus::Family<prometheus::Counter>& f, uint64_t n, uint64_t& seen) {
      f.Add(l).Increment(static_cast<double>(n >= seen ? n - seen : n));
      seen = n;
    };
    add(metrics_->batches, now.batches, was.batches);
    add(metrics_->stored, now.stored, was.stored);
    add(metrics_->removed, now.removed, was.removed);
    add(metrics_->gaps, now.gaps, was.gaps);
    add(metrics_->replays, now.replays, was.replays);
    add(metrics_->lost, now.lost, was.lost);
    add(metrics_->restarts, now.restarts, was.restarts);
    add(metrics_->bad, now.bad, was.bad);
    add(metrics_->orphans, now.orphans, was.orphans);
    std::array<uint64_t, kvindex::kNumTiers> tiers{};
    for (uint32_t r = 0; r < w->config().dp_size; ++r) {
      const auto c = applier_.BlockCounts(HolderOf(*w, r));
      for (int t = 0; t < kvindex::kNumTiers; ++t) tiers[t] += c[t];
    }
    for (int t = 0; t < kvindex::kNumTiers; ++t) {
      metrics_->blocks
          .Add({{"worker", w->name()},
                {"tier", std::string(kvindex::TierName(static_cast<kvindex::Tier>(t)))}})
          .Set(static_cast<double>(tiers[t]));
    }
    metrics_->verified.Add(l).Set(w->precise_state() == PreciseState::kVerified);
  }
}

}  // namespace kvgate::router
