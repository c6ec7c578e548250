// File: tests/router/fakes/fake_upstream_stage.h
// A fake behind the Upstream seam (router/upstream/upstream.h): each Send() and Fetch() takes
// the next scripted outcome and records the attempt it was given, so dispatcher tests drive
// retries, timeouts and P/D stages without a socket to a worker. A scripted kRelayed outcome
// starts a relayed head through the response writer, as the real relay does, so the exchange
// records its status. Thread-compatible (one test's io_context).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "router/fleet/worker.h"
#include "router/http/response_writer.h"
#include "router/upstream/upstream.h"

namespace kvgate::router::testing {

class FakeUpstreamStage : public Upstream {
 public:
  /// One scripted Send(): its result, and for kRelayed the status the client gets.
  struct Scripted {
    AttemptResult result;
    int relayed_status = 200;
  };
  /// What one Send() or Fetch() was asked to do.
  struct Call {
    std::string worker;
    bool last = false;
    int dp_rank = -1;
    std::string body;  // the attempt's own body ("" for the client's)
    std::string request_id;
    std::string head;  // a relayed answer's head as the client would get it
  };

  /// Scripts the next Send().
  void Then(AttemptOutcome outcome, std::string reason = "scripted",
            std::string_view metric_reason = "connect_error", int relayed_status = 200) {
    Scripted s;
    s.result.outcome = outcome;
    s.result.reason = std::move(reason);
    s.result.metric_reason = metric_reason;
    s.relayed_status = relayed_status;
    sends_.push_back(std::move(s));
  }
  /// Scripts the next Send() with a whole result (e.g. a relayed stream's TTFT).
  void ThenResult(AttemptResult result) { sends_.push_back(Scripted{std::move(result), 200}); }
  /// Scripts the next Fetch().
  void ThenFetch(FetchResult r) { fetches_.push_back(std::move(r)); }

  const std::vector<Call>& sent() const { return sent_; }
  const std::vector<Call>& fetched() const { return fetched_; }

  // router::Upstream
  net::awaitable<AttemptResult> Send(ThreadContext& tc, Exchange& ex,
                                     const UpstreamAttempt& attempt) override {
    sent_.push_back(Record(attempt));
    if (attempt.on_sent != nullptr) (*attempt.on_sent)();  // as if the request was written
    Scripted s;
    if (sends_.empty()) {
      s.result.reason = "no scripted outcome left";  // a kRetry: the test sees it fail
    } else {
      s = std::move(sends_.front());
      sends_.pop_front();
    }
    if (s.result.outcome == AttemptOutcome::kRelayed) {
      ex.worker = attempt.worker->name();
      ex.worker_id = attempt.worker->id();
      BeginRelayedHead(tc, ex, s.relayed_status, {}, /*delimited=*/true, &sent_.back().head);
    }
    co_return s.result;
  }

  net::awaitable<FetchResult> Fetch(ThreadContext&, const Exchange&, const UpstreamAttempt& attempt,
                                    std::chrono::milliseconds, uint64_t,
                                    FetchControl& control) override {
    fetched_.push_back(Record(attempt));
    FetchResult r;
    if (control.cancelled) {
      r.cancelled = true;
      r.reason = "cancelled";
    } else if (fetches_.empty()) {
      r.reason = "no scripted fetch left";
    } else {
      r = std::move(fetches_.front());
      fetches_.pop_front();
    }
    co_return r;
  }

 private:
  static Call Record(const UpstreamAttempt& a) {
    return Call{a.worker->name(), a.last, a.dp_rank, a.body != nullptr ? *a.body : std::string(),
                std::string(a.request_id)};
  }

  std::deque<Scripted> sends_;
  std::deque<FetchResult> fetches_;
  std::vector<Call> sent_;
  std::vector<Call> fetched_;
};

}  // namespace kvgate::router::testing
