// File: tests/router/fakes/thread_harness.h
// One gateway thread without sockets, for stage tests: a GatewayState publishing a snapshot of
// `n` workers (http://w0:8000 ...), the thread's context, and exchanges on client connections
// whose sockets are never opened (writes to such a client fail at once, so a stage's error
// response is recorded in the exchange without anyone reading it). Run() drives a coroutine on
// the thread's io_context to its end. Thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "router/http/exchange.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/runtime/gateway_state.h"

namespace kvgate::router::testing {

class ThreadHarness {
 public:
  /// `tweak` adjusts the config before the snapshot is built.
  template <typename Tweak>
  ThreadHarness(size_t n, Tweak tweak) {
    auto cfg = std::make_shared<config::Config>();
    cfg->routing.policy = "round_robin";
    cfg->retry.backoff_base_ms = 0;  // retries at once: the tests count attempts, not time
    cfg->retry.backoff_max_ms = 0;
    cfg->retry.jitter = 0;
    for (size_t i = 0; i < n; ++i) {
      config::WorkerConfig wc;
      wc.url = *common::ParseHttpUrl(common::StrCat("http://w", i, ":8000"));
      cfg->workers.push_back(wc);
    }
    tweak(*cfg);
    WorkerList workers;
    std::vector<WorkerIdentity> ids;
    for (size_t i = 0; i < cfg->workers.size(); ++i) {
      workers.push_back(std::make_shared<Worker>(cfg->workers[i], static_cast<uint32_t>(i)));
      ids.push_back(workers.back()->identity());
    }
    auto policies = MakePolicySet(cfg->routing, ids);
    EXPECT_TRUE(policies.ok()) << policies.status();
    state_ = std::make_unique<GatewayState>(cfg, 1);
    state_->Publish(std::make_shared<const Snapshot>(
        Snapshot{cfg, std::move(workers), *std::move(policies), nullptr}));
    tc_ = std::make_unique<ThreadContext>(*state_, 0);
  }
  explicit ThreadHarness(size_t n) : ThreadHarness(n, [](config::Config&) {}) {}

  GatewayState& state() { return *state_; }
  ThreadContext& tc() { return *tc_; }
  const Snapshot& snapshot() { return *state_->snapshot(); }

  /// A POST to `path` with `body` on a client connection of its own, as the session would
  /// hand it to a route after reading it.
  std::unique_ptr<Exchange> NewExchange(std::string path, std::string body) {
    auto conn = std::make_shared<ClientConnection>(tcp::socket(tc_->ioc), false);
    connections_.push_back(conn);
    auto ex = std::make_unique<Exchange>(*conn);
    bodies_.push_back(std::make_unique<std::string>(std::move(body)));
    std::string& b = *bodies_.back();
    paths_.push_back(std::make_unique<std::string>(std::move(path)));
    b.reserve(b.size() + 64);  // simdjson's padding
    ex->head.method = http1::Method::kPost;
    ex->head.method_text = "POST";
    ex->head.path = *paths_.back();
    ex->head.target = *paths_.back();
    ex->head.version_minor = 1;
    ex->head.keep_alive = true;
    ex->body = b;
    ex->body_capacity = b.capacity();
    ex->request_id = "test-request";
    ex->endpoint = EndpointLabelOf(ex->head.path);
    ex->snapshot = tc_->Lease();
    StartResponse(*ex);
    return ex;
  }

  /// Runs `work` on the thread's io_context until it and everything it started ended.
  void Run(net::awaitable<void> work) {
    bool done = false;
    net::co_spawn(tc_->ioc, std::move(work), [&](const std::exception_ptr& e) {
      EXPECT_FALSE(e) << "the stage threw";
      done = true;
    });
    tc_->ioc.restart();
    tc_->ioc.run();
    EXPECT_TRUE(done) << "the stage did not finish";
  }

 private:
  std::unique_ptr<GatewayState> state_;
  std::unique_ptr<ThreadContext> tc_;
  std::vector<ClientConnectionPtr> connections_;
  std::vector<std::unique_ptr<std::string>> bodies_;
  std::vector<std::unique_ptr<std::string>> paths_;
};

}  // namespace kvgate::router::testing
