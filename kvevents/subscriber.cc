#include "kvevents/subscriber.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <stdexcept>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/mutex.h"
#include "spdlog/spdlog.h"

namespace kvgate::kvevents {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kRecentBatches = 8192;  // Applied batches remembered to spot late copies.
constexpr int kMaxWakeEvents = 64;       // epoll events taken per wait.
// One engine step's events are kilobytes; far larger frames are a misconfigured peer.
constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string_view View(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

}  // namespace

struct Stream;

// One socket the events thread waits on: what its epoll entry points at.
struct Watch {
  Stream* stream;
  bool replay;  // The DEALER (replay) socket, not the SUB (live) one.
};

// One source's sockets and continuity state. Events thread only.
struct Stream {
  Stream() : live_watch{this, false}, replay_watch{this, true} {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  SourceStatus status;
  std::optional<zmq::socket_t> sub;
  std::optional<zmq::socket_t> dealer;
  SteadyClock::time_point replay_deadline{};
  std::map<uint64_t, std::string> held;  // Live batches received while replaying, by sequence.
  // (sequence, engine timestamp) of the last applied batches: a live batch below next_seq that
  // matches one is a late copy of a replayed batch, not an engine restart.
  std::deque<std::pair<uint64_t, double>> recent;
  uint64_t bad_logged = 0;
  Watch live_watch;  // Stable addresses: the stream is heap-held.
  Watch replay_watch;

  const EventSource& source() const { return status.source; }
};

struct KvEventSubscriber::Impl {
  Impl(EventApplier& applier, SubscriberObserver* observer, SubscriberOptions options)
      : applier(applier), observer(observer), options(options) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // The wake descriptor.
    if (epoll_fd < 0 || wake_fd < 0 || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev) != 0) {
      const std::string why = std::strerror(errno);
      if (epoll_fd >= 0) close(epoll_fd);
      if (wake_fd >= 0) close(wake_fd);
      throw std::runtime_error("kv events: cannot create the wait set: " + why);
    }
  }
  ~Impl() {
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
  }

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = write(wake_fd, &one, sizeof(one));
  }

  // One wait for every source: each socket's ZMQ_FD in one epoll set, woken when the socket's
  // mailbox is signalled, plus an eventfd for SetSources() and Stop(). zmq::poll made two
  // poll() calls and asked every socket for its events (getpid() calls among them) on every
  // wake, and a wake comes with nearly every batch. ZMQ_FD is edge-like: a socket is drained until
  // recv says EAGAIN before its descriptor is waited on again, and one left with messages (the
  // per-turn cap, a send on it) is kept in `pending` and read without waiting.
  void Run() {
    std::vector<Watch*> ready;
    epoll_event events[kMaxWakeEvents];
    while (running.load(std::memory_order_acquire)) {
      Reconcile();
      const bool any_socket = std::any_of(streams.begin(), streams.end(),
                                          [](const auto& s) { return s->sub || s->dealer; });
      const int timeout_ms = !pending.empty() ? 0
                             : any_socket     ? static_cast<int>(options.poll_interval.count())
                                              : -1;  // Nothing to read: sleep until told.
      if (!any_socket) PublishStatus();
      const int n = epoll_wait(epoll_fd, events, kMaxWakeEvents, timeout_ms);
      if (n < 0 && errno != EINTR) spdlog::error("kv events: epoll_wait: {}", std::strerror(errno));
      ready.swap(pending);
      pending.clear();
      for (int i = 0; i < n; ++i) {
        if (events[i].data.ptr == nullptr) {
          uint64_t count;
          [[maybe_unused]] const ssize_t r = read(wake_fd, &count, sizeof(count));
          continue;
        }
        ready.push_back(static_cast<Watch*>(events[i].data.ptr));
      }
      std::sort(ready.begin(), ready.end());
      ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
      try {
        for (Watch* w : ready) {
          if (!Drain(*w->stream, w->replay)) Keep(w);
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        spdlog::error("kv events: {}", e.what());
      }
      ready.clear();
      const auto now = SteadyClock::now();
      for (auto& s : streams) {
        if (s->status.replaying && now >= s->replay_deadline) {
          spdlog::warn("kv events: replay from {} timed out; continuing with live events",
                       s->source().replay_endpoint);
          FinishReplay(*s);
        }
      }
      PublishStatus();
    }
    for (auto& s : streams) Unwatch(*s);
    streams.clear();
    PublishStatus();
  }

  // Reads `w` again before the next wait.
  void Keep(Watch* w) {
    if (std::find(pending.begin(), pending.end(), w) == pending.end()) pending.push_back(w);
  }

  void WatchSocket(zmq::socket_t& socket, Watch* w) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = w;
    const int fd = socket.get(zmq::sockopt::fd);
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      spdlog::error("kv events: cannot watch {}: {}", w->stream->source().endpoint,
                    std::strerror(errno));
    }
    Keep(w);  // Whatever arrived before the descriptor was watched.
  }

  // Before the sockets close: zmq closes their descriptors later, on its own thread.
  void Unwatch(Stream& s) {
    for (auto* socket : {s.sub ? &*s.sub : nullptr, s.dealer ? &*s.dealer : nullptr}) {
      if (socket) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, socket->get(zmq::sockopt::fd), nullptr);
    }
    std::erase_if(pending, [&](Watch* w) { return w->stream == &s; });
  }

  // Applies a changed source list: closes removed or changed sources, opens new ones.
  void Reconcile() {
    std::vector<EventSource> want;
    {
      common::MutexLock lock(&mu);
      if (desired_version == applied_version) return;
      want = desired;
      applied_version = desired_version;
    }
    std::vector<std::unique_ptr<Stream>> next;
    for (const auto& src : want) {
      auto it = std::find_if(streams.begin(), streams.end(),
                             [&](const auto& s) { return s && s->source() == src; });
      if (it != streams.end()) {
        next.push_back(std::move(*it));
      } else {
        next.push_back(Open(src));
      }
    }
    for (auto& old : streams) {
      if (!old) continue;
      const bool holder_kept = std::any_of(want.begin(), want.end(), [&](const EventSource& e) {
        return e.holder == old->source().holder;
      });
      // A reopened source starts a new view; a removed one takes its blocks with it.
      Unwatch(*old);
      applier.Forget(old->source().holder);
      if (holder_kept) {
        for (auto& n : next) {
          if (n->source().holder == old->source().holder)
            n->status.generation = old->status.generation + 1;
        }
      }
    }
    streams = std::move(next);
  }

  std::unique_ptr<Stream> Open(const EventSource& src) {
    auto s = std::make_unique<Stream>();
    s->status.source = src;
    try {
      // The context (and its I/O thread) exists only once some worker publishes events.
      if (!context) context.emplace(1);
      s->sub.emplace(*context, zmq::socket_type::sub);
      s->sub->set(zmq::sockopt::linger, 0);
      s->sub->set(zmq::sockopt::rcvhwm, options.rcvhwm);
      s->sub->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);  // A runaway peer is cut off.
      s->sub->set(zmq::sockopt::subscribe, src.topic);
      if (src.bind) {
        s->sub->bind(src.endpoint);
      } else {
        s->sub->connect(src.endpoint);
      }
      if (!src.replay_endpoint.empty()) {
        s->dealer.emplace(*context, zmq::socket_type::dealer);
        s->dealer->set(zmq::sockopt::linger, 0);
        s->dealer->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
        s->dealer->connect(src.replay_endpoint);
      }
    } catch (const zmq::error_t& e) {
      s->status.error = e.what();
      s->sub.reset();
      s->dealer.reset();
      spdlog::error("kv events: cannot subscribe to {} ({}): {}", src.endpoint, src.name, e.what());
      return s;
    }
    spdlog::info("kv events: subscribed to {} topic \"{}\" for {}{}", src.endpoint, src.topic,
                 src.name, src.replay_endpoint.empty() ? " (no replay endpoint)" : "");
    WatchSocket(*s->sub, &s->live_watch);
    if (s->dealer) WatchSocket(*s->dealer, &s->replay_watch);
    // Cold start: recover what the engine still buffers before trusting live events.
    StartReplay(*s, 0);
    return s;
  }

  // Receives what `s`'s live (SUB) or replay (DEALER) socket holds. Both carry three frames,
  // [topic or "", seq8, payload]. False when it stopped at the per-turn cap with more to read.
  bool Drain(Stream& s, bool replay) {
    zmq::socket_t& socket = replay ? *s.dealer : *s.sub;
    std::vector<zmq::message_t> frames;
    for (size_t n = 0; n < options.max_messages_per_turn; ++n) {
      frames.clear();
      if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        return true;
      }
      if (!replay) s.status.last_message = SteadyClock::now();
      std::optional<uint64_t> seq;
      if (frames.size() == 3 && (!replay || frames[0].size() == 0)) {
        seq = DecodeSequence(View(frames[1]));
      }
      if (!seq) {
        Bad(s, replay ? "a replay reply that is not [\"\", seq8, payload]"
                      : "a message without 3 frames and an 8-byte sequence");
      } else if (replay) {
        OnReplayed(s, *seq, View(frames[2]));
      } else {
        OnLive(s, *seq, View(frames[2]));
      }
    }
    return false;
  }

  void OnReplayed(Stream& s, uint64_t seq, std::string_view payload) {
    if (!s.status.replaying) return;  // A late reply to a replay that timed out.
    if (seq == kReplayEndSequence || payload.empty()) {
      FinishReplay(s);
      return;
    }
    s.replay_deadline = SteadyClock::now() + options.replay_timeout;
    InOrder(s, seq, payload, /*replayed=*/true);
  }

  void OnLive(Stream& s, uint64_t seq, std::string_view payload) {
    SourceStatus& st = s.status;
    if (st.replaying) {
      if (s.held.size() < options.max_held_batches) s.held.emplace(seq, std::string(payload));
      return;
    }
    if (st.next_seq && seq < *st.next_seq && IsLateCopy(s, seq, payload)) return;
    if (st.next_seq && seq < *st.next_seq) {
      // The engine restarted (its sequence starts again at 0): what it held is gone.
      ++st.restarts;
      ++st.generation;
      spdlog::warn("kv events: {} restarted (sequence {} after {}); dropping its blocks",
                   s.source().name, seq, *st.next_seq - 1);
      applier.Forget(s.source().holder);
      s.recent.clear();
      if (observer) observer->OnRestart(s.source());
      st.next_seq.reset();
      st.view_complete = false;
    }
    if (!st.next_seq) {
      if (seq == 0) {
        st.view_complete = true;
        st.next_seq = 0;
      } else if (StartReplay(s, 0)) {
        s.held.emplace(seq, std::string(payload));
        return;
      } else {
        st.next_seq = seq;  // Earlier batches are unrecoverable without a replay socket.
        st.lost_batches += seq;
      }
    }
    if (seq > *st.next_seq) {
      ++st.gaps;
      if (StartReplay(s, *st.next_seq)) {
        s.held.emplace(seq, std::string(payload));
        return;
      }
    }
    InOrder(s, seq, payload, /*replayed=*/false);
  }

  // True when live batch `seq` (below next_seq) was already applied: the replay socket and the
  // live socket are separate connections, so the live copy of a replayed batch can come later.
  bool IsLateCopy(const Stream& s, uint64_t seq, std::string_view payload) const {
    auto it = std::find_if(s.recent.begin(), s.recent.end(),
                           [seq](const auto& e) { return e.first == seq; });
    if (it == s.recent.end()) return false;
    auto batch = DecodeEventBatch(payload);
    return batch.ok() && batch->ts == it->second;
  }

  // Applies batch `seq` if it is the next one or later (counting what was skipped as lost);
  // drops duplicates.
  void InOrder(Stream& s, uint64_t seq, std::string_view payload, bool replayed) {
    SourceStatus& st = s.status;
    const uint64_t next = st.next_seq.value_or(0);
    if (seq < next) return;
    if (seq > next) {
      st.lost_batches += seq - next;
      st.view_complete = false;
    } else if (!st.next_seq && seq == 0) {
      st.view_complete = true;
    }
    st.next_seq = seq + 1;
    Apply(s, seq, payload, replayed);
  }

  bool StartReplay(Stream& s, uint64_t from) {
    if (!s.dealer) return false;
    const std::string seq8 = EncodeSequence(from);
    try {
      s.dealer->send(zmq::const_buffer("", 0),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.dealer->send(zmq::buffer(seq8), zmq::send_flags::dontwait);
      Keep(&s.replay_watch);  // A send can take the signal a waiting reply would have given.
    } catch (const zmq::error_t& e) {
      spdlog::warn("kv events: replay request to {} failed: {}", s.source().replay_endpoint,
                   e.what());
      return false;
    }
    ++s.status.replays;
    s.status.replaying = true;
    if (!s.status.next_seq) s.status.view_complete = from == 0;
    s.replay_deadline = SteadyClock::now() + options.replay_timeout;
    return true;
  }

  void FinishReplay(Stream& s) {
    s.status.replaying = false;
    auto held = std::move(s.held);
    s.held.clear();
    for (auto& [seq, payload] : held) InOrder(s, seq, payload, /*replayed=*/false);
  }

  void Apply(Stream& s, uint64_t seq, std::string_view payload, bool replayed) {
    SourceStatus& st = s.status;
    auto batch = DecodeEventBatch(payload);
    if (!batch.ok()) {
      Bad(s, std::string(batch.status().message()));
      return;
    }
    if (batch->data_parallel_rank && *batch->data_parallel_rank != s.source().holder.dp_rank &&
        st.batches == 0) {
      spdlog::warn("kv events: {} publishes data_parallel_rank {} but is configured as rank {}",
                   s.source().name, *batch->data_parallel_rank, s.source().holder.dp_rank);
    }
    const ApplyResult r = applier.Apply(s.source().holder, s.source().model, *batch);
    ++st.batches;
    if (replayed) ++st.replayed_batches;
    st.stored_blocks += r.stored_blocks;
    st.removed_blocks += r.removed_blocks;
    st.cleared += r.cleared;
    st.orphan_blocks += r.orphan_blocks;
    st.last_batch_ts = batch->ts;
    s.recent.emplace_back(seq, batch->ts);
    if (s.recent.size() > kRecentBatches) s.recent.pop_front();
    if (observer) observer->OnBatchApplied(s.source(), r, WallNow() - batch->ts);
  }

  void Bad(Stream& s, std::string_view why) {
    ++s.status.bad_messages;
    if (s.bad_logged++ < 5) {
      spdlog::warn("kv events: {} sent {}; dropped", s.source().name, why);
    }
  }

  void PublishStatus() {
    std::vector<SourceStatus> out;
    out.reserve(streams.size());
    for (const auto& s : streams) out.push_back(s->status);
    common::MutexLock lock(&mu);
    published = std::move(out);
  }

  EventApplier& applier;
  SubscriberObserver* const observer;
  const SubscriberOptions options;
  std::optional<zmq::context_t> context;  // Events thread only; outlives the sockets in streams.
  std::thread thread;
  std::atomic<bool> running{false};

  // Waits of the events thread: every socket's ZMQ_FD and wake_fd (written by SetSources()
  // and Stop()). Both are made with the subscriber and live as long.
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

  mutable common::Mutex mu;
  std::vector<EventSource> desired ABSL_GUARDED_BY(mu);
  uint64_t desired_version ABSL_GUARDED_BY(mu) = 0;
  std::vector<SourceStatus> published ABSL_GUARDED_BY(mu);

  // Events thread only.
  uint64_t applied_version = 0;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<Watch*> pending;  // Sockets to read before waiting again.
};

KvEventSubscriber::KvEventSubscriber(EventApplier& applier, SubscriberObserver* observer,
                                     SubscriberOptions options)
    : impl_(std::make_unique<Impl>(applier, observer, options)) {}

KvEventSubscriber::~KvEventSubscriber() { Stop(); }

void KvEventSubscriber::Start() {
  if (impl_->running.exchange(true)) return;
  impl_->thread = std::thread([this] { impl_->Run(); });
}

void KvEventSubscriber::Stop() {
  if (!impl_->running.exchange(false)) return;
  impl_->Wake();  // An eventfd keeps its count: a wake written before the wait is not lost.
  if (impl_->thread.joinable()) impl_->thread.join();
}

void KvEventSubscriber::SetSources(std::vector<EventSource> sources) {
  common::MutexLock lock(&impl_->mu);
  impl_->desired = std::move(sources);
  ++impl_->desired_version;
  impl_->Wake();
}

std::vector<SourceStatus> KvEventSubscriber::Status() const {
  common::MutexLock lock(&impl_->mu);
  return impl_->published;
}

}  // namespace kvgate::kvevents
