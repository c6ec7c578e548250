#include "router/server/gateway.h"

#include <sys/socket.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/cpu_count.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "net/tls_socket.h"
#include "router/cluster/cluster_sync.h"
#include "router/control/health_checker.h"
#include "router/control/precise_prober.h"
#include "router/discovery/discovery_source.h"
#include "router/dispatch/pd_dispatcher.h"
#include "router/handlers/admin.h"
#include "router/handlers/admission_control.h"
#include "router/handlers/auth.h"
#include "router/handlers/local_endpoints.h"
#include "router/handlers/proxy_handler.h"
#include "router/http/route_table.h"
#include "router/http/session.h"
#include "router/http/thread_context.h"
#include "router/server/address_claim.h"
#include "router/upstream/http1_upstream.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

// `threads: 0` is one thread per CPU the process may use: its affinity and cgroup quota, so
// that a pod limited to 2 CPUs on a 64-core node runs 2 loops, not 64.
uint32_t ThreadCount(const config::Config& cfg) {
  return cfg.threads > 0 ? cfg.threads : static_cast<uint32_t>(common::UsableCpus());
}

// Every route the gateway serves, in match order, for the thread whose dispatcher is
// `dispatcher`. Each handler is given the gateway's state here, as the proxy is given its
// dispatcher, rather than finding them through the thread's context.
std::unique_ptr<RouteTable> MakeRoutes(bool separate_admin, GatewayState& state,
                                       Dispatcher& dispatcher, const config::Config& cfg) {
  const auto with_state = [&state](auto* handler) -> RouteHandler {
    return [&state, handler](ThreadContext& tc, Exchange& ex) { return handler(state, tc, ex); };
  };
  const RouteHandler proxy = [&state, &dispatcher](ThreadContext& tc, Exchange& ex) {
    return HandleProxy(state, tc, ex, dispatcher);
  };
  const RouteHandler stored = [&state, &dispatcher](ThreadContext& tc, Exchange& ex) {
    return HandleStoredResponse(state, tc, ex, dispatcher);
  };
  std::vector<Route> routes = {
      {"/health", false, kGetOrHead, with_state(&HandleHealth)},
      {"/ready", false, kGetOrHead, with_state(&HandleReady)},
      {"/metrics", false, kGetOrHead, with_state(&HandleMetrics)},
      {"/version", false, kGetOrHead, with_state(&HandleVersion)},
      {"/v1/models", false, kGetOrHead, with_state(&HandleModels)},
      {"/v1/models/", true, kGetOrHead, with_state(&HandleModel)},
      // Stored OpenAI responses: to the worker that holds them (POST .../cancel goes through
      // HandleProxy).
      {"/v1/responses/", true, kGetOrHead | kDelete, stored, false, true},
      {"/v1/", true, kPost, proxy, false, true},
      {"/generate", false, kPost, proxy, false, true},  // SGLang's native API
      {"/admin/workers", false, kGetOrHead, with_state(&HandleAdminWorkers), true},
      {"/admin/explain", false, kPost, with_state(&HandleAdminExplain), true},
      {"/admin/drain", false, kPost, with_state(&HandleAdminDrain), true},
      {"/admin/cluster", false, kGetOrHead, with_state(&HandleAdminCluster), true},
  };
  // The engines' own root routes (/tokenize, /score, ...), proxied as /v1/ routes are.
  for (const std::string& path : cfg.engine_routes) {
    routes.push_back({path, false, kPost, proxy, false, true});
  }
  std::vector<PreHandlerPtr> pre;
  pre.push_back(MakeAdminTokenCheck());
  pre.push_back(MakeApiKeyCheck(state));
  pre.push_back(MakeAdmissionControl(state));
  return std::make_unique<RouteTable>(
      std::move(routes), std::vector<std::string_view>{"/health", "/ready", "/metrics", "/version"},
      separate_admin, std::move(pre));
}

}  // namespace

struct Gateway::Impl {
  explicit Impl(config::ConfigConstSharedPtr cfg)
      : state(cfg, ThreadCount(*cfg)), initial(cfg), base(std::move(cfg)) {
    discovered.resize(DiscoverySourceCount(base->discovery));
  }

  // `base` (the file's config) with the workers discovery found added after its own; a URL
  // already listed keeps its static entry.
  config::ConfigConstSharedPtr Merged() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu) {
    bool any = false;
    for (const auto& d : discovered) any |= !d.empty();
    if (!any) return base;
    auto cfg = std::make_shared<config::Config>(*base);
    std::set<std::string> urls;
    for (const auto& w : cfg->workers) urls.insert(w.url.ToString());
    for (const auto& source : discovered) {
      for (const auto& w : source) {
        if (cfg->workers.size() >= kvindex::PrefixIndex::kMaxHolders) {
          spdlog::error("discovery: more than {} workers; {} and later ones are left out",
                        kvindex::PrefixIndex::kMaxHolders, w.config.url.ToString());
          return cfg;
        }
        if (urls.insert(w.config.url.ToString()).second) cfg->workers.push_back(w.config);
      }
    }
    return cfg;
  }

  // Publishes the snapshot of Merged(). Workers discovery added get traffic only once health
  // checks admit them (BuildSnapshot).
  absl::Status Apply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu) {
    const config::ConfigConstSharedPtr cfg = Merged();
    KVGATE_ASSIGN_OR_RETURN(SnapshotConstSharedPtr snapshot,
                            BuildSnapshot(cfg, /*read_certificates=*/false));
    ApplyDiscoveryStates(*snapshot);
    state.Publish(std::move(snapshot));
    HealthChecker::RefreshModelsJson(state);
    return absl::OkStatus();
  }

  // Gives each worker of `snapshot` the state its discovery source reports; a URL also listed
  // statically is always ready.
  void ApplyDiscoveryStates(const Snapshot& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu) {
    for (const auto& w : snapshot.workers) {
      EndpointState st = EndpointState::kReady;
      const bool is_static =
          std::any_of(base->workers.begin(), base->workers.end(),
                      [&w](const config::WorkerConfig& s) { return s.url == w->config().url; });
      for (const auto& source : discovered) {
        for (const auto& d : source) {
          if (!is_static && d.config.url == w->config().url) st = d.state;
        }
      }
      if (st != w->discovery_state()) {
        spdlog::info("worker {}: {} (discovery)", w->name(), EndpointStateName(st));
        w->SetDiscoveryState(st);
      }
    }
  }

  // A discovery source found a new set of workers (on the control thread).
  void Discovered(size_t source, std::vector<DiscoveredWorker> workers) {
    common::MutexLock lock(&apply_mu);
    discovered[source] = std::move(workers);
    if (auto s = Apply(); !s.ok()) spdlog::error("discovery: {}", s.message());
  }

  // The snapshot for `cfg`: live Worker objects (with their health and load) are kept for
  // URLs whose settings did not change; policies are built for the new worker list.
  // With `read_certificates` (start, reload) the TLS files are read again; otherwise (a
  // discovery change) the contexts are kept unless the TLS settings changed.
  absl::StatusOr<SnapshotConstSharedPtr> BuildSnapshot(config::ConfigConstSharedPtr cfg,
                                                       bool read_certificates)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu) {
    const SnapshotConstSharedPtr old = state.snapshot();
    std::shared_ptr<const TlsContexts> tls = old->tls;
    if (read_certificates || tls == nullptr || cfg->tls != old->config->tls ||
        cfg->upstream.tls != old->config->upstream.tls) {
      KVGATE_ASSIGN_OR_RETURN(
          tls, MakeTlsContexts({cfg->tls.cert_file, cfg->tls.key_file, cfg->tls.client_ca_file,
                                cfg->upstream.tls.ca_file, cfg->upstream.tls.cert_file,
                                cfg->upstream.tls.key_file}));
    }
    WorkerList workers;
    std::vector<WorkerIdentity> identities;
    for (const auto& wc : cfg->workers) {
      WorkerSharedPtr reuse;
      for (const auto& w : old->workers) {
        if (w->config() == wc) reuse = w;
      }
      if (!reuse) {
        auto [it, inserted] = worker_ids.emplace(wc.url.ToString(), next_worker_id);
        if (inserted) ++next_worker_id;
        reuse = std::make_shared<Worker>(wc, it->second);
        // Unknown until checked; a worker whose settings changed keeps what was known.
        const WorkerSharedPtr* same_url = nullptr;
        for (const auto& w : old->workers) {
          if (w->config().url == wc.url) same_url = &w;
        }
        if (same_url != nullptr) {
          reuse->InheritHealth(**same_url);
        } else if (cfg->health_check.enabled) {
          reuse->MarkUnchecked();
        }
      }
      identities.push_back(reuse->identity());
      workers.push_back(std::move(reuse));
    }
    KVGATE_ASSIGN_OR_RETURN(PolicySetConstSharedPtr policies,
                            MakePolicySet(cfg->routing, identities));
    // The index forgets removed workers before new ones take holder slots.
    for (const auto& w : old->workers) {
      bool kept = false;
      for (const auto& n : workers) kept |= n->name() == w->name();
      if (!kept) state.planner.RemoveWorker(*w);
    }
    for (const auto& w : workers) {
      if (w->config().kv_capacity_tokens > 0) {
        state.planner.SetCapacity(*w, w->config().kv_capacity_tokens, cfg->routing.block_tokens);
      }
      state.planner.SetGroups(*w, w->config().kv_groups, cfg->routing.block_tokens);
    }
    return std::make_shared<const Snapshot>(
        Snapshot{std::move(cfg), std::move(workers), std::move(policies), std::move(tls)});
  }

  // A client over its connection limit: logged at most once a second, not once a connection.
  void RefuseClient(const std::string& peer, uint32_t max) {
    const auto now = SteadyClock::now().time_since_epoch().count();
    auto last = last_refusal_log.load(std::memory_order_relaxed);
    if (now - last > 1'000'000'000 && last_refusal_log.compare_exchange_strong(last, now)) {
      spdlog::warn(
          "client {} holds {} connections (limits.max_connections_per_client); "
          "refusing more",
          peer, max);
    }
  }

  // The connection table is full: the connection idle longest (no request in progress) on
  // `tc` is closed to make room, else one on the thread with the most idle ones (asked by a
  // post, so the table may be one over its size for a moment). False when no thread has one.
  bool ReapIdle(ThreadContext& tc) {
    if (tc.ReapOldestIdle(/*reserve=*/false)) {
      LogReap(tc.config().limits.max_connections);
      return true;
    }
    ThreadContext* most = nullptr;
    for (const auto& t : threads) {
      if (t->idle_count() > 0 && (most == nullptr || t->idle_count() > most->idle_count())) {
        most = t.get();
      }
    }
    if (most == nullptr) return false;
    net::post(most->ioc, [most] { most->ReapOldestIdle(/*reserve=*/false); });
    LogReap(tc.config().limits.max_connections);
    return true;
  }

  void LogReap(uint32_t max_connections) {
    uint64_t suppressed = 0;
    if (!reap_log.Allow(SteadyClock::now(), &suppressed)) return;
    spdlog::warn(
        "{} connections open (limits.max_connections): closed the one idle longest to make room "
        "({} more since the last such line; kvgate_http_idle_connections_reaped_total)",
        max_connections, suppressed);
  }

  // Accepts on `acc` (owned by thread `tc`) forever; connections stay on that thread.
  void Accept(tcp::acceptor& acc, ThreadContext& tc, bool admin) {
    acc.async_accept([this, &acc, &tc, admin](error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acc.is_open()) return;
        spdlog::warn("accept failed: {}", ec.message());
      } else if (state.draining.load()) {
        return;
      } else {
        const config::LimitsConfig& limits = tc.config().limits;
        error_code ec;
        const auto remote = socket.remote_endpoint(ec);
        std::string peer = ec ? std::string("?") : remote.address().to_string();
        error_code ignored;
        bool reserve = false;
        bool admit = state.client_connections.TryAdd(peer, limits.max_connections_per_client);
        if (!admit) {
          RefuseClient(peer, limits.max_connections_per_client);
        } else if (state.open_connections.load() >= static_cast<int64_t>(limits.max_connections) &&
                   !ReapIdle(tc)) {
          // Full, and every place has a request in progress: the probes' reserve, and when
          // that is full too, its longest-idle connection gives way.
          reserve = true;
          admit = state.open_connections.load() < static_cast<int64_t>(limits.max_connections) +
                                                      static_cast<int64_t>(limits.health_reserve) ||
                  tc.ReapOldestIdle(/*reserve=*/true);
          if (!admit) state.client_connections.Remove(peer);
        }
        if (!admit) {
          socket.close(ignored);
        } else {
          state.open_connections.fetch_add(1);
          auto conn = std::make_shared<ClientConnection>(std::move(socket), admin);
          conn->holds_place = true;
          // TLS on the API listener; the admin listener stays plain (loopback or pod-local).
          if (!admin) {
            const SnapshotLease lease = tc.Lease();
            if (lease->tls && lease->tls->server) conn->tls_context = lease->tls->server;
          }
          conn->peer = std::move(peer);
          conn->reserve = reserve;
          tc.connections.insert(conn);
          tc.MarkIdle(*conn);  // until its first request (or TLS handshake) is done
          tc.StartSweep();
          net::co_spawn(tc.ioc, RunSession(tc, *stages[tc.index]->routes, conn), net::detached);
        }
      }
      Accept(acc, tc, admin);
    });
  }

  // Binds host:port on `tc`'s io_context; with `reuse_port` several threads may bind the
  // same port and the kernel spreads connections over them.
  absl::StatusOr<std::unique_ptr<tcp::acceptor>> Listen(ThreadContext& tc, const std::string& host,
                                                        uint16_t port, bool reuse_port) {
    error_code ec;
    const auto addr = net::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(common::StrCat("'", host, "' is not an IP address"));
    }
    auto acc = std::make_unique<tcp::acceptor>(tc.ioc);
    const tcp::endpoint ep(addr, port);
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec && reuse_port) {
      const int one = 1;
      if (::setsockopt(acc->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        ec = error_code(errno, boost::system::system_category());
      }
    }
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          common::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
    }
    return acc;
  }

  GatewayState state;
  config::ConfigConstSharedPtr initial;
  common::Mutex apply_mu;  // reloads and discovery updates, one at a time
  // The config file's (or the flags') latest.
  config::ConfigConstSharedPtr base ABSL_GUARDED_BY(apply_mu);
  // Per discovery source.
  std::vector<std::vector<DiscoveredWorker>> discovered ABSL_GUARDED_BY(apply_mu);
  std::vector<std::unique_ptr<DiscoverySource>> discovery;
  // Each thread's stages: HTTP/1.1 to the workers, the dispatcher over it, and the route table
  // whose proxy handlers use that dispatcher. Each stage is given what it uses (the thread's
  // pool, the planner, the metrics) rather than finding it through the context per request.
  // Declared before the threads, so destroyed after them: a request suspended when an
  // io_context goes may still reach its dispatcher.
  struct ThreadStages {
    ThreadStages(ThreadContext& tc, GatewayState& state, bool separate_admin)
        : upstream(tc.pool, state.metrics),
          dispatcher(upstream, state.planner, state.metrics,
                     static_cast<uint32_t>(0x6b766761u + tc.index)),
          routes(MakeRoutes(separate_admin, state, dispatcher, *state.snapshot()->config)) {}
    Http1Upstream upstream;
    PdDispatcher dispatcher;
    std::unique_ptr<RouteTable> routes;  // its handlers hold `dispatcher`
  };
  std::vector<std::unique_ptr<ThreadStages>> stages;
  std::vector<std::unique_ptr<ThreadContext>> threads;
  std::vector<std::thread> os_threads;
  net::io_context control{1};
  std::unique_ptr<net::executor_work_guard<net::io_context::executor_type>> control_guard;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;  // one per thread, same port
  std::unique_ptr<tcp::acceptor> admin_acceptor;
  std::optional<AddressClaim> claim;  // the listen address, for the process's life
  // Stable id per worker URL (kvindex holder).
  std::map<std::string, uint32_t> worker_ids ABSL_GUARDED_BY(apply_mu);
  uint32_t next_worker_id ABSL_GUARDED_BY(apply_mu) = 0;
  std::atomic<int64_t> last_refusal_log{0};
  LogLimiter reap_log;  // one line a second about idle connections closed for new ones
  uint16_t admin_port = 0;
  std::unique_ptr<HealthChecker> health;
  std::unique_ptr<PreciseProber> prober;
  std::unique_ptr<cluster::ClusterSync> cluster;  // replica sync, when cluster.redis is set
  uint16_t port = 0;

  common::Mutex mu;
  common::CondVar cv;
  bool started ABSL_GUARDED_BY(mu) = false;
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { Stop(); }

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(config::Config config) {
  auto cfg = std::make_shared<const config::Config>(std::move(config));
  auto impl = std::make_unique<Impl>(cfg);
  absl::StatusOr<SnapshotConstSharedPtr> built;
  {
    common::MutexLock lock(&impl->apply_mu);  // Uncontended: nothing else runs yet.
    built = impl->BuildSnapshot(cfg, /*read_certificates=*/true);
  }
  KVGATE_ASSIGN_OR_RETURN(SnapshotConstSharedPtr snapshot, std::move(built));
  if (cfg->access_log.enabled) {
    KVGATE_RETURN_IF_ERROR(impl->state.access_log.Open(cfg->access_log.path));
  }
  impl->state.Publish(std::move(snapshot));
  HealthChecker::RefreshModelsJson(impl->state);
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

absl::Status Gateway::Start() {
  Impl& s = *impl_;
  // spdlog makes its registry on first use, inside a library TSan does not see: make it here,
  // before the threads below exist, so their first log lines find it made.
  (void)spdlog::default_logger();
  // OpenSSL writes to sockets with write(2), not send(MSG_NOSIGNAL) as Asio does: a peer
  // that closed must be an EPIPE error, not a signal that kills the process.
  std::signal(SIGPIPE, SIG_IGN);
  const auto cfg = s.state.snapshot()->config;
  const uint32_t n = static_cast<uint32_t>(s.state.threads);
  for (uint32_t i = 0; i < n; ++i) {
    s.threads.push_back(std::make_unique<ThreadContext>(s.state, i));
    s.stages.push_back(std::make_unique<Impl::ThreadStages>(*s.threads.back(), s.state,
                                                            !cfg->admin.listen.empty()));
  }
  // One acceptor per thread on the same port (SO_REUSEPORT): the kernel spreads connections
  // and each stays on the thread that accepted it. Claimed first, so that no other process
  // joins that group (AddressClaim). Port 0 needs no claim: the kernel picks a free port.
  uint16_t port = cfg->listen_port;
  if (port != 0) {
    KVGATE_ASSIGN_OR_RETURN(AddressClaim claim, AddressClaim::Claim(cfg->listen_host, port));
    s.claim.emplace(std::move(claim));
  }
  for (uint32_t i = 0; i < n; ++i) {
    KVGATE_ASSIGN_OR_RETURN(auto acc,
                            s.Listen(*s.threads[i], cfg->listen_host, port, /*reuse_port=*/true));
    if (i == 0) port = acc->local_endpoint().port();
    s.acceptors.push_back(std::move(acc));
  }
  s.port = port;
  if (!cfg->admin.listen.empty()) {
    KVGATE_ASSIGN_OR_RETURN(const auto hp, common::ParseHostPort(cfg->admin.listen));
    KVGATE_ASSIGN_OR_RETURN(s.admin_acceptor,
                            s.Listen(*s.threads[0], hp.first, hp.second, /*reuse_port=*/false));
    s.admin_port = s.admin_acceptor->local_endpoint().port();
    spdlog::info("admin API listening on {}:{}", hp.first, s.admin_port);
  }

  if (cfg->cluster.enabled()) {
    // Before any request: the first decisions already see the other replicas' state.
    s.cluster = std::make_unique<cluster::ClusterSync>(cfg->cluster, s.state);
    s.state.planner.SetClusterSink(s.cluster.get());
    s.cluster->Start();
  }
  s.health = std::make_unique<HealthChecker>(s.control, s.state);
  s.health->Start();
  // Precise mode runs whenever it could be needed: a reload may add kv_events later.
  s.state.precise.Start();
  s.prober = std::make_unique<PreciseProber>(s.control, s.state);
  s.prober->Start();
  s.discovery = MakeDiscoverySources(
      s.control, cfg->discovery,
      [&s](size_t source, std::vector<DiscoveredWorker> workers) {
        s.Discovered(source, std::move(workers));
      },
      [&s](const std::string& source, std::string_view reason) {
        s.state.metrics.DiscoveryRefused(source, reason).Increment();
      });
  for (auto& d : s.discovery) d->Start();
  s.control_guard = std::make_unique<net::executor_work_guard<net::io_context::executor_type>>(
      s.control.get_executor());
  for (auto& t : s.threads) {
    s.guards.emplace_back(t->ioc.get_executor());
    s.os_threads.emplace_back([&ioc = t->ioc] { ioc.run(); });
  }
  s.os_threads.emplace_back([&s] { s.control.run(); });
  {
    common::MutexLock lock(&s.mu);
    s.started = true;
  }
  // The first round of health checks decides which workers are up: until it is back (or its
  // timeout passed), /ready and routing would see every worker as unknown.
  if (cfg->health_check.enabled) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(cfg->health_check.timeout_ms + 500);
    const auto snapshot = s.state.snapshot();
    while (std::chrono::steady_clock::now() < until &&
           !std::all_of(snapshot->workers.begin(), snapshot->workers.end(),
                        [](const WorkerSharedPtr& w) { return w->probed(); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // start-up, not a router loop
    }
  }
  // Bound since the start (connections wait in the backlog); accepted only now, so that a
  // gateway (re)started under load does not answer its first requests with 503.
  for (uint32_t i = 0; i < n; ++i) {
    net::post(s.threads[i]->ioc, [&s, i] { s.Accept(*s.acceptors[i], *s.threads[i], false); });
  }
  if (s.admin_acceptor) {
    net::post(s.threads[0]->ioc, [&s] { s.Accept(*s.admin_acceptor, *s.threads[0], true); });
  }
  spdlog::info("kvgate listening on {}:{} ({}) with {} threads, {} workers, policy {}",
               cfg->listen_host, s.port, cfg->tls.enabled() ? "https" : "http", n,
               cfg->workers.size(), cfg->routing.policy);
  return absl::OkStatus();
}

uint16_t Gateway::port() const { return impl_->port; }
uint16_t Gateway::admin_port() const { return impl_->admin_port; }

absl::Status Gateway::Reload(config::Config config) {
  Impl& s = *impl_;
  const auto old = s.state.snapshot()->config;
  if (config.listen_host != old->listen_host || config.listen_port != old->listen_port) {
    spdlog::warn("reload: listen address changes need a restart; keeping {}:{}", old->listen_host,
                 old->listen_port);
    config.listen_host = old->listen_host;
    config.listen_port = old->listen_port;
  }
  if (config.threads != old->threads) {
    spdlog::warn("reload: thread count changes need a restart; keeping {}", old->threads);
    config.threads = old->threads;
  }
  if (config.admin.listen != old->admin.listen) {
    spdlog::warn("reload: admin listener changes need a restart; keeping '{}'", old->admin.listen);
    config.admin.listen = old->admin.listen;
  }
  if (config.cluster != old->cluster) {
    spdlog::warn("reload: cluster changes need a restart; keeping the running sync");
    config.cluster = old->cluster;
  }
  if (config.engine_routes != old->engine_routes) {
    spdlog::warn("reload: engine_routes changes need a restart; keeping the running routes");
    config.engine_routes = old->engine_routes;
  }
  if (config.discovery != old->discovery) {
    spdlog::warn("reload: discovery changes need a restart; keeping the running sources");
    config.discovery = old->discovery;
  }
  common::MutexLock lock(&s.apply_mu);
  const config::ConfigConstSharedPtr previous = s.base;
  s.base = std::make_shared<const config::Config>(std::move(config));
  const config::ConfigConstSharedPtr cfg = s.Merged();
  auto snapshot = s.BuildSnapshot(cfg, /*read_certificates=*/true);
  if (!snapshot.ok()) {
    s.base = previous;
    ReloadRejected(snapshot.status());
    return snapshot.status();
  }
  if (cfg->access_log.enabled != old->access_log.enabled ||
      cfg->access_log.path != old->access_log.path) {
    if (cfg->access_log.enabled) {
      if (auto st = s.state.access_log.Open(cfg->access_log.path); !st.ok()) {
        s.base = previous;
        ReloadRejected(st);
        return st;
      }
    } else {
      s.state.access_log.Close();
    }
  }
  s.ApplyDiscoveryStates(**snapshot);
  s.state.Publish(*std::move(snapshot));
  HealthChecker::RefreshModelsJson(s.state);
  s.state.metrics.ConfigReloads(true).Increment();
  spdlog::info("reload: {} workers, policy {}{}", cfg->workers.size(), cfg->routing.policy,
               cfg->tls.enabled() ? ", TLS certificate read again" : "");
  return absl::OkStatus();
}

void Gateway::ReloadRejected(const absl::Status& why) {
  impl_->state.metrics.ConfigReloads(false).Increment();
  // One line, whatever the number of problems: a log pipeline splits entries at newlines.
  std::string what(why.message());
  for (size_t at = what.find('\n'); at != std::string::npos; at = what.find('\n', at)) {
    what.replace(at, 1, "; ");
  }
  spdlog::error("reload rejected, keeping the running configuration: {}", what);
}

absl::Status Gateway::ReopenLogs() { return impl_->state.access_log.Reopen(); }

void Gateway::StopReadiness() { impl_->state.shutting_down.store(true); }

bool Gateway::Drain(std::chrono::milliseconds deadline) {
  Impl& s = *impl_;
  {
    common::MutexLock lock(&s.mu);
    if (!s.started) return true;
  }
  s.state.draining.store(true);
  spdlog::info("draining: {} connections open, deadline {} ms", s.state.open_connections.load(),
               deadline.count());
  // Each thread closes its own acceptor and idle keep-alive connections; busy ones close
  // after their response.
  for (size_t i = 0; i < s.threads.size(); ++i) {
    ThreadContext* tc = s.threads[i].get();
    tcp::acceptor* acc = s.acceptors[i].get();
    tcp::acceptor* admin = i == 0 ? s.admin_acceptor.get() : nullptr;
    net::post(tc->ioc, [tc, acc, admin] {
      error_code ignored;
      acc->close(ignored);
      if (admin != nullptr) admin->close(ignored);
      for (const auto& c : tc->connections) {
        if (c->idle) c->socket.close(ignored);
      }
    });
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool clean = true;
  while (s.state.open_connections.load() > 0) {
    if (std::chrono::steady_clock::now() >= until) {
      clean = false;
      spdlog::warn("drain deadline passed with {} connections open; closing them",
                   s.state.open_connections.load());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // main thread, not a router loop
  }
  Stop();
  return clean;
}

void Gateway::Stop() {
  Impl& s = *impl_;
  {
    common::MutexLock lock(&s.mu);
    if (s.stopped) return;
    s.stopped = true;
  }
  for (auto& d : s.discovery) d->Stop();
  if (s.health) s.health->Stop();
  if (s.prober) s.prober->Stop();
  for (auto& t : s.threads) t->ioc.stop();
  s.control.stop();
  for (auto& th : s.os_threads) {
    if (th.joinable()) th.join();
  }
  for (auto& t : s.threads) t->pool.Clear();
  if (s.cluster) {
    s.state.planner.SetClusterSink(&NoClusterSink());
    s.cluster->Stop();
  }
  s.state.precise.Stop();
  s.cv.SignalAll();
}

void Gateway::Wait() {
  Impl& s = *impl_;
  common::MutexLock lock(&s.mu);
  while (!s.stopped) s.cv.Wait(&s.mu);
}

std::string Gateway::MetricsText() const { return impl_->state.MetricsText(); }

}  // namespace kvgate::router
