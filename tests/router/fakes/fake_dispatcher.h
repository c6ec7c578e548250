// File: tests/router/fakes/fake_dispatcher.h
// A fake behind the Dispatcher seam (router/dispatch/dispatcher.h): it records the plan each
// Dispatch() was handed (the workers it allows, whether it learns, a response pin) and answers
// the exchange through the response writer with a scripted status, worker and response id, so
// handler tests check what a handler plans and learns without an upstream. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "router/dispatch/dispatcher.h"
#include "router/fleet/worker.h"
#include "router/http/response_writer.h"

namespace kvgate::router::testing {

class FakeDispatcher : public Dispatcher {
 public:
  /// What one Dispatch() was handed.
  struct Seen {
    std::vector<std::string> available;  // worker names, in plan order
    bool learn = true;
    std::string pinned_response;
    std::string model;  // the exchange's, as the handler parsed it
  };

  /// How the next dispatches answer: `status` from the first available worker, carrying
  /// `response_id` (a stored OpenAI response) when not empty.
  void AnswerWith(int status, std::string response_id = {}) {
    status_ = status;
    response_id_ = std::move(response_id);
  }

  const std::vector<Seen>& seen() const { return seen_; }

  // router::Dispatcher
  net::awaitable<void> Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) override {
    Seen s;
    for (const Worker* w : plan.available) s.available.push_back(w->name());
    s.learn = plan.learn;
    s.pinned_response = plan.pinned_response;
    s.model = ex.model;
    seen_.push_back(std::move(s));
    if (!plan.available.empty()) {
      ex.worker = plan.available.front()->name();
      ex.worker_id = plan.available.front()->id();
    }
    ex.response_id = response_id_;
    std::string head;
    BeginRelayedHead(tc, ex, status_, {}, /*delimited=*/true, &head);
    co_return;
  }

 private:
  int status_ = 200;
  std::string response_id_;
  std::vector<Seen> seen_;
};

}  // namespace kvgate::router::testing
