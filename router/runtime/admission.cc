#include "router/runtime/admission.h"

#include <algorithm>
#include <boost/asio/this_coro.hpp>
#include <cmath>

namespace kvgate::router {

RateLimiter::Decision RateLimiter::Take(const std::string& key, const config::RateLimitConfig& rate,
                                        uint64_t tokens, SteadyClock::time_point now) {
  Decision d;
  if (rate.requests_per_minute == 0 && rate.prompt_tokens_per_minute == 0) return d;
  const double req_cap = static_cast<double>(rate.requests_per_minute);
  const double tok_cap = static_cast<double>(rate.prompt_tokens_per_minute);
  common::MutexLock lock(&mu_);
  bool fresh = false;
  Bucket& b = buckets_.FindOrInsert(key, &fresh);
  if (fresh) {
    b.requests = req_cap;
    b.tokens = tok_cap;
  } else {
    const double elapsed = std::max(0.0, std::chrono::duration<double>(now - b.last).count());
    b.requests = std::min(req_cap, b.requests + elapsed * req_cap / 60.0);
    b.tokens = std::min(tok_cap, b.tokens + elapsed * tok_cap / 60.0);
  }
  b.last = now;
  const double need_tokens = static_cast<double>(tokens);
  if (req_cap > 0 && b.requests < 1.0) {
    d.allowed = false;
    d.limit = "requests";
    d.retry_after_seconds = (1.0 - b.requests) * 60.0 / req_cap;
  } else if (tok_cap > 0 && b.tokens < need_tokens) {
    d.allowed = false;
    d.limit = "tokens";
    d.never = need_tokens > tok_cap;
    d.retry_after_seconds = d.never ? 60.0 : (need_tokens - b.tokens) * 60.0 / tok_cap;
  }
  if (!d.allowed) return d;
  if (req_cap > 0) b.requests -= 1.0;
  if (tok_cap > 0) b.tokens -= need_tokens;
  return d;
}

size_t RateLimiter::keys() const {
  common::MutexLock lock(&mu_);
  return buckets_.size();
}

uint64_t RateLimiter::evictions() const {
  common::MutexLock lock(&mu_);
  return buckets_.evictions();
}

bool ClientConnectionCounts::TryAdd(const std::string& peer, uint32_t max) {
  common::MutexLock lock(&mu_);
  uint32_t& n = counts_[peer];
  if (max > 0 && n >= max) return false;
  ++n;
  return true;
}

void ClientConnectionCounts::Remove(const std::string& peer) {
  common::MutexLock lock(&mu_);
  auto it = counts_.find(peer);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

uint32_t ClientConnectionCounts::count(const std::string& peer) const {
  common::MutexLock lock(&mu_);
  auto it = counts_.find(peer);
  return it == counts_.end() ? 0 : it->second;
}

AdmissionSlot& AdmissionSlot::operator=(AdmissionSlot&& o) noexcept {
  if (this != &o) {
    if (gate_ != nullptr) gate_->Release();
    gate_ = std::exchange(o.gate_, nullptr);
  }
  return *this;
}

AdmissionSlot::~AdmissionSlot() {
  if (gate_ != nullptr) gate_->Release();
}

bool AdmissionGate::TryAcquire(uint32_t max, AdmissionSlot* slot) {
  {
    common::MutexLock lock(&mu_);
    if (running_ >= static_cast<int64_t>(max) || !queue_.empty()) return false;
    ++running_;
  }
  *slot = AdmissionSlot(this);
  return true;
}

net::awaitable<AdmissionGate::Result> AdmissionGate::Acquire(uint32_t max, uint32_t queue_size,
                                                             std::chrono::milliseconds timeout,
                                                             AdmissionSlot* slot,
                                                             net::steady_timer** wait_timer,
                                                             Client client) {
  auto waiter = std::make_shared<Waiter>();
  waiter->executor = co_await net::this_coro::executor;
  bool admitted = false;
  {
    common::MutexLock lock(&mu_);
    if (running_ < static_cast<int64_t>(max) && queue_.empty()) {
      ++running_;
      admitted = true;
    } else if (queue_.size() >= queue_size) {
      co_return Result::kQueueFull;
    } else if (client.max_queued > 0 && !client.name.empty()) {
      auto it = queued_per_client_.find(std::string(client.name));
      if (it != queued_per_client_.end() && it->second >= client.max_queued) {
        co_return Result::kOverClientShare;
      }
      waiter->client.assign(client.name);
      ++queued_per_client_[waiter->client];
      queue_.push_back(waiter);
    } else {
      queue_.push_back(waiter);
    }
  }
  if (admitted) {
    *slot = AdmissionSlot(this);
    co_return Result::kAdmitted;
  }
  net::steady_timer timer(waiter->executor);
  waiter->timer = &timer;
  timer.expires_after(timeout);
  if (wait_timer != nullptr) *wait_timer = &timer;
  co_await timer.async_wait(kNoThrow);
  if (wait_timer != nullptr) *wait_timer = nullptr;
  waiter->timer = nullptr;
  {
    common::MutexLock lock(&mu_);
    admitted = waiter->granted;  // a finishing request handed its slot over (running_ as is)
    if (!admitted) {
      std::erase(queue_, waiter);
      Dequeued(*waiter);
    }
  }
  if (!admitted) co_return Result::kTimedOut;
  *slot = AdmissionSlot(this);
  co_return Result::kAdmitted;
}

void AdmissionGate::Release() {
  common::MutexLock lock(&mu_);
  if (queue_.empty()) {
    --running_;
    return;
  }
  std::shared_ptr<Waiter> w = std::move(queue_.front());
  queue_.pop_front();
  Dequeued(*w);
  w->granted = true;
  // The waiter's timer lives on its own thread: wake it there.
  net::post(w->executor, [w] {
    if (w->timer != nullptr) w->timer->cancel();
  });
}

int64_t AdmissionGate::running() const {
  common::MutexLock lock(&mu_);
  return running_;
}

size_t AdmissionGate::queued() const {
  common::MutexLock lock(&mu_);
  return queue_.size();
}

uint32_t AdmissionGate::queued_by(std::string_view client) const {
  common::MutexLock lock(&mu_);
  auto it = queued_per_client_.find(std::string(client));
  return it == queued_per_client_.end() ? 0 : it->second;
}

void AdmissionGate::Dequeued(const Waiter& w) {
  if (w.client.empty()) return;  // queued without a share
  auto it = queued_per_client_.find(w.client);
  if (it == queued_per_client_.end()) return;
  if (--it->second == 0) queued_per_client_.erase(it);
}

}  // namespace kvgate::router
