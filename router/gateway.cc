#include "router/gateway.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "router/health_checker.h"
#include "router/internal/thread_context.h"
#include "router/precise_prober.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {

struct Gateway::Impl {
  explicit Impl(config::ConfigConstSharedPtr cfg) : state(cfg), initial(std::move(cfg)) {}

  // Builds the worker snapshot for `cfg`, reusing live Worker objects (and their health and
  // load) for URLs whose settings did not change.
  WorkerSetConstSharedPtr BuildWorkers(const config::Config& cfg) {
    auto set = std::make_shared<WorkerSet>();
    const auto old = state.workers();
    for (const auto& wc : cfg.workers) {
      WorkerSharedPtr reuse;
      for (const auto& w : old->workers) {
        const auto& oc = w->config();
        if (w->name() == wc.url.ToString() && oc.models == wc.models && oc.role == wc.role &&
            oc.dp_size == wc.dp_size && oc.weight == wc.weight && oc.kv_events == wc.kv_events) {
          reuse = w;
        }
      }
      if (!reuse) {
        const std::string name = wc.url.ToString();
        auto [it, inserted] = worker_ids.emplace(name, next_worker_id);
        if (inserted) ++next_worker_id;
        reuse = std::make_shared<Worker>(wc, state.metrics.ForWorker(name), it->second);
      }
      if (wc.kv_capacity_tokens > 0) {
        state.planner.SetCapacity(*reuse, wc.kv_capacity_tokens, cfg.routing.block_tokens);
      }
      set->workers.push_back(std::move(reuse));
    }
    for (const auto& w : old->workers) {
      bool kept = false;
      for (const auto& n : set->workers) kept |= n->name() == w->name();
      if (!kept) {
        state.metrics.RemoveWorker(w->name());
        state.planner.RemoveWorker(*w);
      }
    }
    return set;
  }

  // Accepts on `acc` forever, handing each connection to the next thread.
  void Accept(tcp::acceptor& acc, bool admin) {
    ThreadContext& target = *threads[next_thread++ % threads.size()];
    acc.async_accept(target.ioc,
                     [this, &acc, admin, &target](beast::error_code ec, tcp::socket socket) {
                       if (ec) {
                         if (ec == net::error::operation_aborted || !acc.is_open()) return;
                         spdlog::warn("accept failed: {}", ec.message());
                       } else if (state.draining.load()) {
                         return;
                       } else if (state.open_connections.load() >=
                                  static_cast<int64_t>(state.config()->limits.max_connections)) {
                         beast::error_code ignored;
                         socket.close(ignored);
                       } else {
                         state.open_connections.fetch_add(1);
                         state.metrics.open_connections().Increment();
                         auto conn = std::make_shared<ClientConnection>(std::move(socket), admin);
                         net::post(target.ioc, [&target, conn] {
                           target.connections.insert(conn);
                           net::co_spawn(target.ioc, RunSession(target, conn), net::detached);
                         });
                       }
                       Accept(acc, admin);
                     });
  }

  // Binds and listens on host:port. @return the acceptor, or kUnavailable.
  absl::StatusOr<std::unique_ptr<tcp::acceptor>> Listen(const std::string& host, uint16_t port) {
    beast::error_code ec;
    const auto addr = net::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(common::StrCat("'", host, "' is not an IP address"));
    }
    auto acc = std::make_unique<tcp::acceptor>(threads[0]->ioc);
    const tcp::endpoint ep(addr, port);
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(net::socket_base::reuse_address(true), ec);
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
  std::vector<std::unique_ptr<ThreadContext>> threads;
  std::vector<std::thread> os_threads;
  net::io_context control{1};
  std::unique_ptr<net::executor_work_guard<net::io_context::executor_type>> control_guard;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<tcp::acceptor> admin_acceptor;
  std::map<std::string, uint32_t> worker_ids;  // stable id per worker URL (kvindex holder)
  uint32_t next_worker_id = 0;
  uint16_t admin_port = 0;
  std::unique_ptr<HealthChecker> health;
  std::unique_ptr<PreciseProber> prober;
  uint64_t next_thread = 0;
  uint16_t port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool stopped = false;
};

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { Stop(); }

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(config::Config config) {
  auto policies = MakePolicySet(config.routing);
  if (!policies.ok()) return policies.status();
  auto cfg = std::make_shared<const config::Config>(std::move(config));
  auto impl = std::make_unique<Impl>(cfg);
  if (cfg->access_log.enabled) {
    if (auto s = impl->state.access_log.Open(cfg->access_log.path); !s.ok()) return s;
  }
  impl->state.Publish(cfg, impl->BuildWorkers(*cfg), *std::move(policies));
  HealthChecker::RefreshModelsJson(impl->state);
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

absl::Status Gateway::Start() {
  Impl& s = *impl_;
  const auto cfg = s.state.config();
  const uint32_t n =
      cfg->threads > 0 ? cfg->threads : std::max(1u, std::thread::hardware_concurrency());
  for (uint32_t i = 0; i < n; ++i) {
    s.threads.push_back(std::make_unique<ThreadContext>(s.state, i));
  }
  auto main = s.Listen(cfg->listen_host, cfg->listen_port);
  if (!main.ok()) return main.status();
  s.acceptor = *std::move(main);
  s.port = s.acceptor->local_endpoint().port();
  s.Accept(*s.acceptor, false);
  if (!cfg->admin.listen.empty()) {
    auto hp = common::ParseHostPort(cfg->admin.listen);
    if (!hp.ok()) return hp.status();
    auto admin = s.Listen(hp->first, hp->second);
    if (!admin.ok()) return admin.status();
    s.admin_acceptor = *std::move(admin);
    s.admin_port = s.admin_acceptor->local_endpoint().port();
    s.Accept(*s.admin_acceptor, true);
    spdlog::info("admin API listening on {}:{}", hp->first, s.admin_port);
  }

  s.health = std::make_unique<HealthChecker>(s.control, s.state);
  s.health->Start();
  // Precise mode runs whenever it could be needed: a reload may add kv_events later.
  s.state.precise.Start();
  s.prober = std::make_unique<PreciseProber>(s.control, s.state);
  s.prober->Start();
  s.control_guard = std::make_unique<net::executor_work_guard<net::io_context::executor_type>>(
      s.control.get_executor());
  for (auto& t : s.threads) {
    s.guards.emplace_back(t->ioc.get_executor());
    s.os_threads.emplace_back([&ioc = t->ioc] { ioc.run(); });
  }
  s.os_threads.emplace_back([&s] { s.control.run(); });
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.started = true;
  }
  spdlog::info("kvgate listening on {}:{} with {} threads, {} workers, policy {}", cfg->listen_host,
               s.port, n, cfg->workers.size(), cfg->routing.policy);
  return absl::OkStatus();
}

uint16_t Gateway::port() const { return impl_->port; }
uint16_t Gateway::admin_port() const { return impl_->admin_port; }

absl::Status Gateway::Reload(config::Config config) {
  Impl& s = *impl_;
  const auto old = s.state.config();
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
  auto policies = MakePolicySet(config.routing);
  if (!policies.ok()) {
    s.state.metrics.ConfigReloads(false).Increment();
    return policies.status();
  }
  if (config.access_log.enabled != old->access_log.enabled ||
      config.access_log.path != old->access_log.path) {
    if (config.access_log.enabled) {
      if (auto st = s.state.access_log.Open(config.access_log.path); !st.ok()) {
        s.state.metrics.ConfigReloads(false).Increment();
        return st;
      }
    } else {
      s.state.access_log.Close();
    }
  }
  auto cfg = std::make_shared<const config::Config>(std::move(config));
  s.state.Publish(cfg, s.BuildWorkers(*cfg), *std::move(policies));
  HealthChecker::RefreshModelsJson(s.state);
  s.state.metrics.ConfigReloads(true).Increment();
  spdlog::info("reload: {} workers, policy {}", cfg->workers.size(), cfg->routing.policy);
  return absl::OkStatus();
}

bool Gateway::Drain(std::chrono::milliseconds deadline) {
  Impl& s = *impl_;
  if (!s.started) return true;
  s.state.draining.store(true);
  spdlog::info("draining: {} connections open, deadline {} ms", s.state.open_connections.load(),
               deadline.count());
  net::post(s.threads[0]->ioc, [&s] {
    beast::error_code ignored;
    s.acceptor->close(ignored);
    if (s.admin_acceptor) s.admin_acceptor->close(ignored);
  });
  // Idle keep-alive connections are closed now; busy ones close after their response.
  for (auto& t : s.threads) {
    net::post(t->ioc, [tc = t.get()] {
      for (const auto& c : tc->connections) {
        if (c->idle) {
          beast::error_code ignored;
          c->stream.socket().close(ignored);
        }
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
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopped) return;
    s.stopped = true;
  }
  if (s.health) s.health->Stop();
  if (s.prober) s.prober->Stop();
  for (auto& t : s.threads) t->ioc.stop();
  s.control.stop();
  for (auto& th : s.os_threads) {
    if (th.joinable()) th.join();
  }
  for (auto& t : s.threads) t->pool.Clear();
  s.state.precise.Stop();
  s.cv.notify_all();
}

void Gateway::Wait() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&s] { return s.stopped; });
}

std::string Gateway::MetricsText() const { return RouterMetrics::Serialize(impl_->state.registry); }

}  // namespace kvgate::router
