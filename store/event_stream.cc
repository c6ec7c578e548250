// File: store/event_stream.cc
#include "store/event_stream.h"

#include <chrono>
#include <zmq.hpp>

namespace kvgate::store {
namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventStream>> EventStream::Start(
    const std::string& endpoint, const std::string& replay_endpoint) {
  auto s = std::unique_ptr<EventStream>(new EventStream());
  s->context_ = std::make_unique<zmq::context_t>(1);
  kvevents::PublisherOptions po;
  po.endpoint = endpoint;
  po.replay_endpoint = replay_endpoint;
  po.topic = "kv@store";
  po.force_bind = true;
  po.dp_rank = std::nullopt;
  auto p = kvevents::KvEventPublisher::Create(*s->context_, po);
  if (!p.ok()) return p.status();
  s->publisher_ = std::move(*p);
  s->thread_ = std::thread([raw = s.get()] { raw->Run(); });
  return s;
}

EventStream::~EventStream() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  publisher_.reset();
  context_.reset();
}

void EventStream::Stored(const ObjectKey& key, std::optional<uint64_t> parent,
                         const std::vector<uint32_t>& token_ids) {
  kvevents::PublishedEvent e;
  e.type = kvevents::PublishedEvent::Type::kBlockStored;
  e.block_hashes = {key.hash};
  e.parent_block_hash = parent;
  e.token_ids = token_ids;
  e.block_size = static_cast<uint32_t>(token_ids.size());
  e.medium = kvevents::Medium::kStore;
  common::MutexLock lock(&mu_);
  queue_.push_back(std::move(e));
}

void EventStream::Removed(const ObjectKey& key) {
  kvevents::PublishedEvent e;
  e.type = kvevents::PublishedEvent::Type::kBlockRemoved;
  e.block_hashes = {key.hash};
  e.medium = kvevents::Medium::kStore;
  common::MutexLock lock(&mu_);
  queue_.push_back(std::move(e));
}

std::string EventStream::endpoint() const { return publisher_->endpoint(); }
std::string EventStream::replay_endpoint() const { return publisher_->replay_endpoint(); }
uint64_t EventStream::published_batches() const {
  common::MutexLock lock(&mu_);
  return batches_;
}

void EventStream::Run() {
  // One batch per 5 ms at most, as an engine publishes one per step; replay requests are
  // answered in between.
  std::vector<kvevents::PublishedEvent> batch;
  for (;;) {
    {
      common::MutexLock lock(&mu_);
      if (queue_.empty() && !stop_) cv_.WaitFor(&mu_, std::chrono::milliseconds(5));
      batch.swap(queue_);
      if (!batch.empty()) ++batches_;
      if (stop_ && batch.empty()) return;
    }
    publisher_->Publish(WallSeconds(), batch);  // Also services replay.
    batch.clear();
  }
}

}  // namespace kvgate::store
