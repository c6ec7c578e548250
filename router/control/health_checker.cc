#include "router/control/health_checker.h"

#include <atomic>
#include <set>

#include "common/json_util.h"
#include "common/strings.h"
#include "net/asio.h"
#include "net/http_client.h"
#include "net/tls_socket.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

// GET on a fresh connection (the control plane is not on the hot path); https:// with the
// current snapshot's upstream TLS context.
net::awaitable<absl::StatusOr<HttpResult>> HttpGet(net::io_context& ioc, GatewayState& state,
                                                   const common::HttpUrl& url, std::string path,
                                                   milliseconds timeout) {
  std::shared_ptr<ssl::context> tls;
  std::vector<std::pair<std::string, std::string>> headers;
  const auto snapshot = state.snapshot();
  if (snapshot->tls) tls = snapshot->tls->upstream;
  // The worker key (upstream.api_key_file/env): vLLM's --api-key guards /v1/models too.
  if (const std::string& key = snapshot->config->upstream.api_key; !key.empty()) {
    headers.emplace_back("authorization", "Bearer " + key);
  }
  return HttpCall(ioc, url, "GET", std::move(path), "", timeout, std::move(headers),
                  std::move(tls));
}

std::vector<std::string> ParseModelIds(std::string body) {
  std::vector<std::string> ids;
  simdjson::ondemand::parser parser;
  body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  simdjson::ondemand::document doc;
  if (parser.iterate(body.data(), body.size(), body.capacity()).get(doc)) return ids;
  simdjson::ondemand::array data;
  if (doc["data"].get_array().get(data)) return ids;
  for (auto entry : data) {
    std::string_view id;
    if (!entry["id"].get_string().get(id)) ids.emplace_back(id);
  }
  return ids;
}

}  // namespace

struct HealthChecker::Impl {
  Impl(net::io_context& ioc, GatewayState& state) : ioc(ioc), state(state) {}

  // One GET of `url` + `path`: true on a 2xx (failures logged at debug, naming `what`).
  net::awaitable<bool> Probe(const common::HttpUrl& url, std::string path, std::string_view what,
                             uint32_t timeout_ms) {
    auto r = co_await HttpGet(ioc, state, url, std::move(path), milliseconds(timeout_ms));
    const bool ok = r.ok() && r->status >= 200 && r->status < 300;
    if (!ok) {
      spdlog::debug("health check of {} failed: {}", what,
                    r.ok() ? common::StrCat("status ", r->status) : r.status().ToString());
    }
    co_return ok;
  }

  net::awaitable<void> CheckOne(WorkerSharedPtr worker, config::HealthCheckConfig cfg) {
    const bool ok = co_await Probe(worker->config().url, cfg.path, worker->name(), cfg.timeout_ms);
    if (worker->RecordHealthCheck(ok, cfg) && worker->healthy()) {
      // Just admitted: learn its models now rather than at the next models refresh.
      co_await DiscoverOne(worker, milliseconds(cfg.timeout_ms));
      RefreshModelsJson(state);
    }
  }

  net::awaitable<void> CheckStore(size_t i, common::HttpUrl url, config::HealthCheckConfig cfg) {
    const std::string what = common::StrCat("store ", url.ToString());
    const bool ok = co_await Probe(url, "/health", what, cfg.timeout_ms);
    state.precise.RecordStoreHealth(i, ok, cfg);
  }

  net::awaitable<void> DiscoverOne(WorkerSharedPtr worker, milliseconds timeout) {
    auto r = co_await HttpGet(ioc, state, worker->config().url, "/v1/models", timeout);
    if (r.ok() && r->status == 200) {
      worker->SetDiscoveredModels(ParseModelIds(std::move(r->body)));
    }
  }

  // Engine load signals from the worker's own /metrics (vLLM or SGLang names). A worker that
  // reports its KV capacity (vllm:cache_config_info) sizes its slice of the prefix index,
  // unless the config fixed it.
  net::awaitable<void> ScrapeOne(WorkerSharedPtr worker, milliseconds timeout,
                                 uint32_t block_tokens) {
    auto r = co_await HttpGet(ioc, state, worker->config().url, "/metrics", timeout);
    if (!r.ok() || r->status != 200) co_return;
    EngineStats s = ParseEngineMetrics(r->body);
    if (!s.valid) co_return;
    s.scraped_at = SteadyClock::now();
    worker->SetEngineStats(s);
    if (s.num_gpu_blocks > 0 && worker->config().kv_capacity_tokens == 0) {
      const uint64_t tokens = s.num_gpu_blocks * (s.block_size > 0 ? s.block_size : 16);
      state.planner.SetCapacity(*worker, tokens, block_tokens);
    }
  }

  net::awaitable<void> ScrapeLoop() {
    net::steady_timer timer(ioc);
    while (!stopped) {
      const auto snapshot = state.snapshot();
      const auto& cfg = snapshot->config;
      const uint32_t interval = cfg->routing.engine_metrics_interval_ms;
      if (interval > 0) {
        const auto now = SteadyClock::now();
        for (const auto& w : snapshot->workers) {
          if (w->IsAvailable(now)) {
            net::co_spawn(
                ioc,
                ScrapeOne(w, milliseconds(cfg->health_check.timeout_ms), cfg->routing.block_tokens),
                net::detached);
          }
        }
      }
      timer.expires_after(milliseconds(interval > 0 ? interval : 1000));
      co_await timer.async_wait(kNoThrow);
    }
  }

  net::awaitable<void> HealthLoop() {
    net::steady_timer timer(ioc);
    while (!stopped) {
      const auto snapshot = state.snapshot();
      const auto& cfg = snapshot->config;
      if (cfg->health_check.enabled) {
        for (const auto& w : snapshot->workers) {
          net::co_spawn(ioc, CheckOne(w, cfg->health_check), net::detached);
        }
      }
      // Stores are checked even with worker checks off: a dead store must leave the tier.
      for (size_t i = 0; i < cfg->stores.size(); ++i) {
        if (cfg->stores[i].address) {
          net::co_spawn(ioc, CheckStore(i, *cfg->stores[i].address, cfg->health_check),
                        net::detached);
        }
      }
      timer.expires_after(milliseconds(cfg->health_check.interval_ms));
      co_await timer.async_wait(kNoThrow);
    }
  }

  net::awaitable<void> ModelsLoop() {
    net::steady_timer timer(ioc);
    while (!stopped) {
      const auto snapshot = state.snapshot();
      const auto& cfg = snapshot->config;
      const auto now = SteadyClock::now();
      for (const auto& w : snapshot->workers) {
        if (w->IsAvailable(now)) {
          co_await DiscoverOne(w, milliseconds(cfg->health_check.timeout_ms));
        }
      }
      RefreshModelsJson(state);
      timer.expires_after(milliseconds(cfg->models_refresh_interval_ms));
      co_await timer.async_wait(kNoThrow);
    }
  }

  net::io_context& ioc;
  GatewayState& state;
  std::atomic<bool> stopped{false};  // Stop() runs on another thread
};

HealthChecker::HealthChecker(net::io_context& ioc, GatewayState& state)
    : impl_(std::make_unique<Impl>(ioc, state)) {}

HealthChecker::~HealthChecker() = default;

void HealthChecker::Start() {
  net::co_spawn(impl_->ioc, impl_->HealthLoop(), net::detached);
  net::co_spawn(impl_->ioc, impl_->ModelsLoop(), net::detached);
  net::co_spawn(impl_->ioc, impl_->ScrapeLoop(), net::detached);
}

void HealthChecker::Stop() { impl_->stopped = true; }

void HealthChecker::RefreshModelsJson(GatewayState& state) {
  std::set<std::string> models;
  for (const auto& w : state.snapshot()->workers) {
    for (auto& m : w->Models()) models.insert(std::move(m));
  }
  std::string json = R"({"object":"list","data":[)";
  bool first = true;
  for (const auto& m : models) {
    if (!first) json += ",";
    first = false;
    json += R"({"id":)";
    common::AppendJsonString(json, m);
    json += R"(,"object":"model","created":0,"owned_by":"kvgate"})";
  }
  json += "]}";
  state.SetModelsJson(std::move(json));
}

}  // namespace kvgate::router
