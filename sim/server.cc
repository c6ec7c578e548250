#include "sim/server.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <thread>
#include <zmq.hpp>

#include "common/strings.h"
#include "sim/engine_runner.h"
#include "sim/kv_events.h"
#include "sim/worker_server.h"
#include "spdlog/spdlog.h"

namespace kvgate::sim {

struct SimProcess::Impl {
  explicit Impl(SimOptions o)
      : options(std::move(o)), clock(std::chrono::steady_clock::now(), options.time_scale), io(1) {}
  SimOptions options;
  SimClock clock;
  zmq::context_t zmq_context{1};
  net::io_context io;  // Declared after the ZMQ context and before the servers.
  // Every engine's KV-event publisher runs here (EngineRunner), on `events_thread`.
  net::io_context events_io{1};
  std::shared_ptr<store::StoreClient> store;  // Shared by every engine (--store).
  std::vector<std::unique_ptr<SimServer>> servers;
  std::thread thread;
  std::thread events_thread;
};

SimProcess::SimProcess(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimProcess::~SimProcess() {
  Stop();
  impl_->servers.clear();
}

absl::Status SimProcess::Start() {
  Impl& s = *impl_;
  if (!s.options.store.empty()) {
    store::StoreClientOptions co;
    co.master = s.options.store;
    co.credentials_file = s.options.store_credentials;
    co.name = common::StrCat("sim-", ::getpid(), "-", s.options.base_port);
    co.timeout = std::chrono::milliseconds(500);  // A dead store must not stall the engines.
    co.in_flight_wait = std::chrono::milliseconds(200);
    co.async_threads = 2;  // The engines' loads (EngineRunner): one may wait on the master.
    auto client = store::StoreClient::Create(co);
    if (!client.ok()) return client.status();
    s.store = std::move(*client);
    spdlog::info("kvgate-sim: engines use the store at {}", s.options.store);
  }
  s.events_thread = std::thread([&s] {
    auto guard = net::make_work_guard(s.events_io);
    s.events_io.run();
  });
  for (uint32_t i = 0; i < s.options.workers; ++i) {
    auto server = std::make_unique<SimServer>(s.io, s.events_io, s.zmq_context, s.options, i,
                                              s.clock, s.store);
    if (absl::Status st = server->Start(); !st.ok()) return st;
    spdlog::info("kvgate-sim worker {} listening on {}:{} ", i, s.options.host, server->port());
    s.servers.push_back(std::move(server));
  }
  return absl::OkStatus();
}

void SimProcess::Run() {
  net::signal_set signals(impl_->io, SIGINT, SIGTERM);
  signals.async_wait([this](const boost::system::error_code& ec, int) {
    if (!ec) impl_->io.stop();
  });
  impl_->io.run();
}

void SimProcess::StartThread() {
  impl_->thread = std::thread([this] {
    auto guard = net::make_work_guard(impl_->io);
    impl_->io.run();
  });
}

void SimProcess::Stop() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // After the engines: nothing posts events any more. What was not sent yet is dropped.
  impl_->events_io.stop();
  if (impl_->events_thread.joinable()) impl_->events_thread.join();
}

std::vector<uint16_t> SimProcess::ports() const {
  std::vector<uint16_t> out;
  for (const auto& s : impl_->servers) out.push_back(s->port());
  return out;
}

std::vector<uint16_t> SimProcess::bootstrap_ports() const {
  std::vector<uint16_t> out;
  if (impl_->options.role == PdRole::kMixed) return out;
  for (const auto& s : impl_->servers) out.push_back(s->bootstrap_port());
  return out;
}

std::vector<EventEndpoints> SimProcess::event_endpoints() const {
  std::vector<EventEndpoints> out;
  for (uint32_t i = 0; i < impl_->servers.size(); ++i) {
    for (const auto& r : impl_->servers[i]->runners()) {
      if (KvEventPublisher* p = r->publisher()) {
        out.push_back({i, r->rank(), p->endpoint(), p->replay_endpoint()});
      }
    }
  }
  return out;
}

std::string SimProcess::Summary() const {
  uint64_t requests = 0;
  uint64_t steps = 0;
  uint64_t tokens = 0;
  double max_lag = 0;
  double sim_time = 0;
  for (const auto& s : impl_->servers) {
    requests += s->requests();
    for (const auto& r : s->runners()) {
      steps += r->engine().counters().steps;
      tokens += r->engine().counters().generation_tokens;
      max_lag = std::max(max_lag, r->max_lag());
      sim_time = std::max(sim_time, r->sim_now());
    }
  }
  return common::StrCat("requests=", requests, " steps=", steps, " generated_tokens=", tokens,
                        " sim_time_s=", sim_time, " real_time_s=", impl_->clock.RealElapsed(),
                        " max_lag_s=", max_lag);
}

}  // namespace kvgate::sim
