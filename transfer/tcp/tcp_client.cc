// The initiator side of the tcp transport (connections, per-owner striping, retries, deadlines)
// and the Transport itself.
#include <limits>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "common/url.h"
#include "transfer/crc32c.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/task.h"
#include "transfer/tcp/tcp_internal.h"
#include "transfer/tcp/tcp_transport.h"

namespace kvgate::transfer {
namespace tcp_internal {
namespace {

constexpr size_t kMaxBuffersPerWrite = 128;
constexpr size_t kMaxBytesPerWrite = 4 << 20;

absl::Status Unavailable(const PeerInfo& info, std::string_view what) {
  return absl::UnavailableError(
      common::StrCat("tcp: segment '", info.segment, "' (", info.endpoint, "): ", what));
}

}  // namespace

std::string SliceError(const PeerInfo& info, const Slice& s, absl::string_view reason) {
  return fmt::format("tcp: {} of {} bytes at offset {:#x} of segment '{}' ({}): {}", OpName(s.op),
                     s.length, s.remote_addr, info.segment, info.endpoint, reason);
}

void FailSlice(Slice& s, const PeerInfo& info, absl::StatusCode code, absl::string_view reason,
               TransportStats* stats) {
  stats->failures.fetch_add(1, std::memory_order_relaxed);
  s.bounce = BouncePool::Chunk();
  s.task->SliceFailed(absl::Status(code, SliceError(info, s, reason)));
}

SliceList::~SliceList() {
  for (Slice& s : items) {
    s.task->SliceFailed(
        absl::UnavailableError(fmt::format("tcp: {} of {} bytes at offset {:#x}: transport stopped",
                                           OpName(s.op), s.length, s.remote_addr)));
  }
}

// ---------------------------------------------------------------------------------------------
// TcpConnection

TcpConnection::TcpConnection(net::io_context& io, std::shared_ptr<const PeerInfo> info,
                             std::weak_ptr<TcpPeer> peer, const TcpParams& params,
                             TransportStats* stats, BouncePool* cuda_bounce, BouncePool* hip_bounce)
    : strand_(net::make_strand(io)),
      socket_(strand_),
      wake_(strand_),
      rwake_(strand_),
      watch_(strand_),
      info_(std::move(info)),
      peer_(std::move(peer)),
      params_(params),
      stats_(stats),
      cuda_bounce_(cuda_bounce),
      hip_bounce_(hip_bounce) {}

TcpConnection::~TcpConnection() {
  for (Slice& s : inflight_) {
    FailSlice(s, *info_, absl::StatusCode::kUnavailable, "connection destroyed", stats_);
  }
  for (auto& flow : queue_) {
    for (Slice& s : flow) {
      FailSlice(s, *info_, absl::StatusCode::kUnavailable, "connection destroyed", stats_);
    }
  }
}

Slice TcpConnection::TakeNext() {
  std::deque<Slice>& flow = queue_.front();
  Slice s = std::move(flow.front());
  flow.pop_front();
  --queued_;
  if (flow.empty()) {
    queue_.pop_front();
  } else if (queue_.size() > 1) {
    queue_.push_back(std::move(flow));  // Its next slice after one of every other's.
    queue_.pop_front();
  }
  return s;
}

void TcpConnection::Start() {
  auto self = shared_from_this();
  net::co_spawn(
      strand_, [self]() -> net::awaitable<void> { co_await self->Run(); }, net::detached);
}

void TcpConnection::Enqueue(SliceList slices) {
  net::post(strand_, [self = shared_from_this(), list = std::move(slices)]() mutable {
    if (self->closed_) {
      // Closed before these were sent: hand them back (they count as a retry).
      std::deque<Slice> back(std::make_move_iterator(list.items.begin()),
                             std::make_move_iterator(list.items.end()));
      list.items.clear();
      if (auto peer = self->peer_.lock()) {
        peer->Retry(std::move(back), Unavailable(*self->info_, "connection closed"));
      } else {
        for (Slice& s : back) {
          FailSlice(s, *self->info_, absl::StatusCode::kUnavailable, "segment closed",
                    self->stats_);
        }
      }
      return;
    }
    for (Slice& s : list.items) {
      // Flows queued at once are few (one per caller): a scan finds the slice's own.
      auto flow =
          std::find_if(self->queue_.begin(), self->queue_.end(),
                       [&](const std::deque<Slice>& f) { return f.front().flow == s.flow; });
      if (flow == self->queue_.end()) flow = self->queue_.emplace(self->queue_.end());
      flow->push_back(std::move(s));
      ++self->queued_;
    }
    list.items.clear();
    self->Wake();
    self->watch_.cancel();  // Leaves idle waiting: deadlines matter again.
  });
}

void TcpConnection::Close(absl::Status why) {
  net::dispatch(strand_, [self = shared_from_this(), why = std::move(why)]() {
    self->Fail(why, /*retry=*/false);
  });
}

void TcpConnection::Wake() { wake_.cancel(); }

void TcpConnection::Fail(absl::Status why, bool retry) {
  if (closed_) return;
  closed_ = true;
  broken_.store(true, std::memory_order_release);
  boost::system::error_code ignored;
  // After close() no read or write on this socket touches slice memory again.
  socket_.close(ignored);
  wake_.cancel();
  rwake_.cancel();
  watch_.cancel();
  std::deque<Slice> all = std::move(inflight_);
  for (auto& flow : queue_) {
    for (Slice& s : flow) all.push_back(std::move(s));
  }
  inflight_.clear();
  inflight_bytes_ = 0;
  queue_.clear();
  queued_ = 0;
  const auto now = Clock::now();
  std::deque<Slice> again;
  for (Slice& s : all) {
    if (s.deadline <= now) {
      FailSlice(s, *info_, absl::StatusCode::kDeadlineExceeded, "deadline passed", stats_);
    } else if (retry) {
      again.push_back(std::move(s));
    } else {
      FailSlice(s, *info_, why.code(), why.message(), stats_);
    }
  }
  if (again.empty()) return;
  if (auto peer = peer_.lock()) {
    peer->Retry(std::move(again), why);
  } else {
    for (Slice& s : again) FailSlice(s, *info_, why.code(), why.message(), stats_);
  }
}

net::awaitable<absl::Status> TcpConnection::Authenticate() {
  // Proves this engine to the owner, and checks the owner serves the segment asked for.
  AuthClientHandshake hs(*info_->auth->self, info_->segment);
  const std::string hello = hs.Hello();
  auto [ec, n] = co_await net::async_write(socket_, net::buffer(hello), kNoThrow);
  std::string challenge(kAuthChallengeBytes, '\0');
  if (!ec) std::tie(ec, n) = co_await net::async_read(socket_, net::buffer(challenge), kNoThrow);
  if (ec) co_return Unavailable(*info_, common::StrCat("authentication: ", ec.message()));
  auto proof = hs.Answer(challenge);
  if (!proof.ok()) co_return proof.status();
  char verdict = 1;
  std::tie(ec, n) = co_await net::async_write(socket_, net::buffer(*proof), kNoThrow);
  if (!ec) std::tie(ec, n) = co_await net::async_read(socket_, net::buffer(&verdict, 1), kNoThrow);
  if (ec) co_return Unavailable(*info_, common::StrCat("authentication: ", ec.message()));
  if (static_cast<uint8_t>(verdict) != kAuthAccepted)
    co_return absl::UnauthenticatedError(common::StrCat("tcp: segment '", info_->segment, "' (",
                                                        info_->endpoint, ") refused credential '",
                                                        info_->auth->self->name, "'"));
  co_return absl::OkStatus();
}

net::awaitable<absl::Status> TcpConnection::Handshake() {
  if (info_->auth != nullptr && info_->auth->self.has_value()) {
    absl::Status auth = co_await Authenticate();
    if (!auth.ok()) co_return auth;
  }
  RequestHeader hello;
  hello.op = WireOp::kHello;
  hello.length = static_cast<uint32_t>(info_->instance.size());
  if (info_->crc32c) {
    hello.flags = kFlagCrc32c;
    hello.header_crc = HeaderCrc(hello);
  }
  const std::array<net::const_buffer, 2> bufs{net::buffer(&hello, sizeof(hello)),
                                              net::buffer(info_->instance)};
  auto [ec, n] = co_await net::async_write(socket_, bufs, kNoThrow);
  if (ec) co_return Unavailable(*info_, common::StrCat("hello: ", ec.message()));
  auto [ec2, n2] =
      co_await net::async_read(socket_, net::buffer(&response_, sizeof(response_)), kNoThrow);
  if (ec2) co_return Unavailable(*info_, common::StrCat("hello: ", ec2.message()));
  if (response_.magic != kWireMagic || !Intact(response_)) {
    co_return Unavailable(*info_, "not a kvgate transfer port, or a corrupted answer");
  }
  if (response_.status == WireStatus::kWrongPeer) {
    co_return absl::FailedPreconditionError(
        common::StrCat("tcp: segment '", info_->segment, "' (", info_->endpoint,
                       "): another engine instance answers there (the owner restarted)"));
  }
  if (response_.status != WireStatus::kOk) co_return Unavailable(*info_, "hello refused");
  co_return absl::OkStatus();
}

net::awaitable<void> TcpConnection::Run() {
  auto self = shared_from_this();
  connect_deadline_ = Clock::now() + std::chrono::milliseconds(params_.connect_timeout_ms);
  net::co_spawn(
      strand_, [self]() -> net::awaitable<void> { co_await self->Watchdog(); }, net::detached);
  tcp::resolver resolver(strand_);
  auto [ec, endpoints] = co_await resolver.async_resolve(info_->host, info_->port, kNoThrow);
  if (closed_) co_return;
  if (ec) co_return Fail(Unavailable(*info_, common::StrCat("resolve: ", ec.message())), true);
  auto [ec2, ep] = co_await net::async_connect(socket_, endpoints, kNoThrow);
  if (closed_) co_return;
  if (ec2) {
    if (auto peer = peer_.lock()) peer->MarkStale();
    co_return Fail(Unavailable(*info_, common::StrCat("connect: ", ec2.message())), true);
  }
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  if (params_.socket_buffer_bytes > 0) {
    socket_.set_option(net::socket_base::send_buffer_size(params_.socket_buffer_bytes), ignored);
    socket_.set_option(net::socket_base::receive_buffer_size(params_.socket_buffer_bytes), ignored);
  }
  absl::Status hs = co_await Handshake();
  if (closed_) co_return;
  // A different instance on the port is final: resending there would reach the wrong process.
  // So is a refused or unproven credential.
  const bool final_error = absl::IsFailedPrecondition(hs) || absl::IsUnauthenticated(hs);
  if (final_error) {
    if (auto peer = peer_.lock()) peer->MarkStale();
  }
  if (!hs.ok()) co_return Fail(hs, /*retry=*/!final_error);
  connected_ = true;
  net::co_spawn(
      strand_, [self]() -> net::awaitable<void> { co_await self->Reader(); }, net::detached);

  std::vector<net::const_buffer> bufs;
  while (!closed_) {
    if (!ReadyToSend()) {
      wake_.expires_at(Clock::time_point::max());
      co_await wake_.async_wait(kNoThrow);
      continue;
    }
    // Gather as many requests as fit into one writev.
    bufs.clear();
    size_t bytes = 0;
    while (ReadyToSend() && bufs.size() + 3 <= kMaxBuffersPerWrite && bytes < kMaxBytesPerWrite) {
      Slice s = TakeNext();
      const uint8_t* payload = s.local;
      if (s.op == TransferOp::kWrite && s.local_runtime != nullptr) {
        BouncePool* pool =
            s.local_runtime->kind() == MemoryKind::kCuda ? cuda_bounce_ : hip_bounce_;
        s.bounce = pool->Acquire();
        if (auto st = s.local_runtime->Copy(s.bounce.data(), s.local, s.length); !st.ok()) {
          FailSlice(s, *info_, absl::StatusCode::kInternal, st.message(), stats_);
          continue;
        }
        payload = s.bounce.data();
      }
      s.header = RequestHeader{};
      s.header.op = s.op == TransferOp::kRead ? WireOp::kRead : WireOp::kWrite;
      s.header.length = s.length;
      s.header.addr = s.remote_addr;
      s.header.seq = next_seq_++;
      if (s.capability.present) s.header.flags |= kFlagCapability;
      if (info_->crc32c) {
        s.header.flags |= kFlagCrc32c;
        if (s.op == TransferOp::kWrite) s.header.crc = Crc32c(0, payload, s.length);
        s.header.header_crc = HeaderCrc(s.header);
      }
      // Into inflight_ before the write: the answer may be read before the write completes.
      // Deque elements do not move on push_back/pop_front, so the buffers stay valid.
      inflight_bytes_ += s.length;
      inflight_.push_back(std::move(s));
      Slice& sent = inflight_.back();
      bufs.push_back(net::buffer(&sent.header, sizeof(sent.header)));
      bytes += sizeof(sent.header);
      if (sent.capability.present) {
        bufs.push_back(net::buffer(sent.capability.record));
        bytes += kCapabilityBytes;
      }
      if (sent.op == TransferOp::kWrite) {
        bufs.push_back(net::buffer(payload, sent.length));
        bytes += sent.length;
      }
    }
    if (bufs.empty()) continue;
    rwake_.cancel();  // The reader has something to wait for now.
    auto [ec3, n3] = co_await net::async_write(socket_, bufs, OneTurn, kNoThrow);
    if (closed_) co_return;
    if (ec3) co_return Fail(Unavailable(*info_, common::StrCat("write: ", ec3.message())), true);
  }
}

bool TcpConnection::FinishFront() {
  Slice& s = inflight_.front();
  const ResponseHeader& r = s.response;
  WireStatus status = r.status;
  if (status == WireStatus::kOk && s.op == TransferOp::kRead && info_->crc32c) {
    const uint8_t* got = s.local_runtime != nullptr ? s.bounce.data() : s.local;
    if (!(r.flags & kFlagCrc32c) || Crc32c(0, got, s.length) != r.crc) {
      // Corrupted on the way: the bytes already landed, a resend overwrites them.
      status = WireStatus::kCrcMismatch;
    }
  }
  if (status == WireStatus::kOk && s.op == TransferOp::kRead && s.local_runtime != nullptr) {
    if (auto st = s.local_runtime->Copy(s.local, s.bounce.data(), s.length); !st.ok()) {
      FailSlice(s, *info_, absl::StatusCode::kInternal, st.message(), stats_);
      PopFront();
      return true;
    }
  }
  switch (status) {
    case WireStatus::kOk:
      stats_->CountBytes(s.op, s.length);
      s.bounce = BouncePool::Chunk();
      s.task->SliceDone(s.length);
      break;
    case WireStatus::kOutOfRange:
      FailSlice(s, *info_, absl::StatusCode::kOutOfRange,
                "outside every buffer the owner registered", stats_);
      break;
    case WireStatus::kCrcMismatch: {
      std::deque<Slice> again;
      again.push_back(std::move(s));
      if (auto peer = peer_.lock()) {
        peer->Retry(std::move(again), Unavailable(*info_, "CRC32C mismatch"));
      } else {
        FailSlice(again.front(), *info_, absl::StatusCode::kDataLoss, "CRC32C mismatch", stats_);
      }
      break;
    }
    case WireStatus::kDenied:
      // Final: the same capability would be refused again.
      FailSlice(s, *info_, absl::StatusCode::kPermissionDenied,
                "the owner denied access: no valid capability for this range (another "
                "tenant's, expired or forged)",
                stats_);
      break;
    case WireStatus::kDeviceError:
      FailSlice(s, *info_, absl::StatusCode::kInternal, "the owner's GPU copy failed", stats_);
      break;
    default:
      Fail(Unavailable(*info_, "the owner refused the request"), true);
      return false;
  }
  PopFront();
  return true;
}

// Responses arrive in request order with sizes known in advance (Slice::response_bytes), so
// one scatter read takes many of them at once: headers into their slices, READ payloads
// straight into the caller's registered memory (or its bounce chunk).
net::awaitable<void> TcpConnection::Reader() {
  constexpr size_t kMaxSlicesPerRead = 64;
  std::vector<net::mutable_buffer> bufs;
  while (!closed_) {
    if (inflight_.empty()) {
      rwake_.expires_at(Clock::time_point::max());
      co_await rwake_.async_wait(kNoThrow);
      continue;
    }
    bufs.clear();
    uint64_t skip = front_received_;
    size_t k = 0;
    uint64_t bytes = 0;  // At most about a turn's worth per read (kTurnBytes).
    for (auto it = inflight_.begin();
         it != inflight_.end() && k < kMaxSlicesPerRead && bytes < kTurnBytes; ++it, ++k) {
      Slice& s = *it;
      if (s.op == TransferOp::kRead && s.local_runtime != nullptr && !s.bounce) {
        BouncePool* pool =
            s.local_runtime->kind() == MemoryKind::kCuda ? cuda_bounce_ : hip_bounce_;
        s.bounce = pool->Acquire();
      }
      if (skip < sizeof(ResponseHeader)) {
        bufs.push_back(net::buffer(reinterpret_cast<uint8_t*>(&s.response) + skip,
                                   sizeof(ResponseHeader) - skip));
        bytes += bufs.back().size();
        skip = sizeof(ResponseHeader);
      }
      if (s.op == TransferOp::kRead) {
        uint8_t* dst = s.local_runtime != nullptr ? s.bounce.data() : s.local;
        const uint64_t done = skip - sizeof(ResponseHeader);
        bufs.push_back(net::buffer(dst + done, s.length - done));
        bytes += bufs.back().size();
      }
      skip = 0;
    }
    auto [ec, n] = co_await socket_.async_read_some(bufs, kNoThrow);
    if (closed_) co_return;
    if (ec) {
      co_return Fail(
          Unavailable(*info_, ec == net::error::eof ? "connection closed by the owner"
                                                    : common::StrCat("read: ", ec.message())),
          true);
    }
    // Walk the slices the bytes covered.
    while (n > 0 && !inflight_.empty()) {
      Slice& s = inflight_.front();
      const uint64_t before = front_received_;
      const uint64_t take = std::min<uint64_t>(n, s.response_bytes() - before);
      front_received_ += take;
      n -= take;
      if (before < sizeof(ResponseHeader) && front_received_ >= sizeof(ResponseHeader)) {
        const ResponseHeader& r = s.response;
        // Payload bytes may already sit in the caller's buffer; a failed stream fails (and
        // resends) every slice in flight, so none of them is reported completed.
        if (r.magic != kWireMagic || !Intact(r) || r.seq != s.header.seq ||
            (s.op == TransferOp::kRead && r.length != s.length)) {
          co_return Fail(Unavailable(*info_, "protocol error: unexpected response"), true);
        }
      }
      if (front_received_ < s.response_bytes()) break;
      front_received_ = 0;
      if (!FinishFront()) co_return;
      if (ReadyToSend()) Wake();
    }
  }
}

net::awaitable<void> TcpConnection::Watchdog() {
  const auto period =
      std::chrono::milliseconds(std::max<uint32_t>(1, params_.watchdog_interval_ms));
  while (!closed_) {
    if (connected_ && queued_ == 0 && inflight_.empty()) {
      watch_.expires_at(Clock::time_point::max());  // Idle until Enqueue() cancels it.
    } else {
      watch_.expires_after(period);
    }
    co_await watch_.async_wait(kNoThrow);
    if (closed_) co_return;
    const auto now = Clock::now();
    if (!connected_ && now >= connect_deadline_) {
      co_return Fail(Unavailable(*info_, "connect or hello timed out"), true);
    }
    // Unsent slices past their deadline simply fail; the connection is fine.
    for (auto flow = queue_.begin(); flow != queue_.end();) {
      for (auto it = flow->begin(); it != flow->end();) {
        if (it->deadline <= now) {
          FailSlice(*it, *info_, absl::StatusCode::kDeadlineExceeded, "deadline passed", stats_);
          it = flow->erase(it);
          --queued_;
        } else {
          ++it;
        }
      }
      flow = flow->empty() ? queue_.erase(flow) : std::next(flow);
    }
    // A sent slice cannot be taken back from the stream: close the connection (the expired
    // ones fail, the others are resent elsewhere).
    for (const Slice& s : inflight_) {
      if (s.deadline <= now) {
        co_return Fail(Unavailable(*info_, "a slice passed its deadline"), true);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// TcpPeer

TcpPeer::TcpPeer(net::io_context& io, std::shared_ptr<const PeerInfo> info, const TcpParams& params,
                 TransportStats* stats, BouncePool* cuda_bounce, BouncePool* hip_bounce)
    : io_(io),
      info_(std::move(info)),
      params_(params),
      stats_(stats),
      cuda_bounce_(cuda_bounce),
      hip_bounce_(hip_bounce) {}

void TcpPeer::Dispatch(SliceList slices) {
  const size_t n = std::max<uint32_t>(1, params_.connections_per_peer);
  std::vector<SliceList> per(n);
  std::vector<std::shared_ptr<TcpConnection>> targets(n);
  {
    common::MutexLock lock(&mu_);
    if (shut_down_) {
      for (Slice& s : slices.items) {
        FailSlice(s, *info_, absl::StatusCode::kUnavailable, "segment closed", stats_);
      }
      slices.items.clear();
      return;
    }
    connections_.resize(n);
    for (Slice& s : slices.items) {
      const size_t k = next_++ % n;
      per[k].items.push_back(std::move(s));
    }
    slices.items.clear();
    for (size_t k = 0; k < n; ++k) {
      if (per[k].items.empty()) continue;
      // Connections are made on first use, and a broken one is replaced on next use.
      if (connections_[k] == nullptr || connections_[k]->broken()) {
        connections_[k] = std::make_shared<TcpConnection>(io_, info_, weak_from_this(), params_,
                                                          stats_, cuda_bounce_, hip_bounce_);
        connections_[k]->Start();
      }
      targets[k] = connections_[k];
    }
  }
  for (size_t k = 0; k < n; ++k) {
    if (targets[k] != nullptr) targets[k]->Enqueue(std::move(per[k]));
  }
}

void TcpPeer::Retry(std::deque<Slice> slices, const absl::Status& why) {
  const auto now = Clock::now();
  SliceList again;
  for (Slice& s : slices) {
    if (s.deadline <= now) {
      FailSlice(s, *info_, absl::StatusCode::kDeadlineExceeded, "deadline passed", stats_);
    } else if (s.attempts >= params_.max_retries_per_slice) {
      FailSlice(s, *info_, why.code(), why.message(), stats_);
    } else {
      ++s.attempts;
      stats_->retries.fetch_add(1, std::memory_order_relaxed);
      again.items.push_back(std::move(s));
    }
  }
  if (!again.items.empty()) Dispatch(std::move(again));
}

void TcpPeer::Shutdown(const absl::Status& why) {
  std::vector<std::shared_ptr<TcpConnection>> connections;
  {
    common::MutexLock lock(&mu_);
    shut_down_ = true;
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    if (c != nullptr) c->Close(why);
  }
}

}  // namespace tcp_internal

// ---------------------------------------------------------------------------------------------
// TcpTransport

namespace {

using namespace tcp_internal;  // NOLINT: this file's own internals.

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpParams& params) : params_(params) {}
  ~TcpTransport() override {
    std::vector<std::shared_ptr<TcpPeer>> peers;
    {
      common::MutexLock lock(&mu_);
      for (auto& [instance, peer] : peers_) peers.push_back(peer);
      peers_.clear();
    }
    for (auto& p : peers) p->Shutdown(absl::UnavailableError("tcp: engine shutting down"));
    // Let the closes run, then stop; handlers left behind are destroyed with io_, and their
    // connections fail what they still hold.
    work_.reset();
    if (!threads_.empty()) {
      net::post(io_, [this] { io_.stop(); });
    }
    for (auto& t : threads_) t.join();
  }

  // transfer::Transport
  std::string_view Name() const override { return "tcp"; }
  Capabilities GetCapabilities() const override {
    Capabilities c;
    c.local_device_memory = true;   // Bounced through pinned host chunks.
    c.remote_device_memory = true;  // The owner bounces.
    c.zero_copy = true;             // For host memory.
    c.max_slice_bytes = params_.slice_bytes;
    return c;
  }
  absl::Status Start(const TransportContext& context) override {
    if (params_.slice_bytes == 0 || params_.slice_bytes > kMaxWirePayload) {
      return absl::InvalidArgumentError(common::StrCat(
          "tcp: slice_bytes must be 1..", kMaxWirePayload, ", not ", params_.slice_bytes));
    }
    if (params_.require_capabilities &&
        (context.auth == nullptr || !context.auth->self.has_value())) {
      return absl::InvalidArgumentError(
          "tcp: require_capabilities needs authentication and this engine's own credential "
          "(its secret keys the capabilities)");
    }
    context_ = context;
    if (context_.cuda != nullptr) {
      cuda_bounce_ = std::make_unique<BouncePool>(context_.cuda, params_.slice_bytes, 64);
    }
    if (context_.hip != nullptr) {
      hip_bounce_ = std::make_unique<BouncePool>(context_.hip, params_.slice_bytes, 64);
    }
    server_ = std::make_unique<TcpServer>(io_, context_, params_, &stats_, cuda_bounce_.get(),
                                          hip_bounce_.get());
    if (auto st = server_->Listen(); !st.ok()) return st;
    for (uint32_t i = 0; i < std::max<uint32_t>(1, params_.io_threads); ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return absl::OkStatus();
  }
  void Describe(SegmentDescriptor& desc) const override { desc.tcp_endpoint = server_->endpoint(); }
  bool CanReach(const SegmentDescriptor& peer) const override { return !peer.tcp_endpoint.empty(); }
  absl::Status Submit(const SegmentDescriptorPtr& peer,
                      absl::Span<const TransferTask> tasks) override;
  void ForgetPeer(const SegmentDescriptor& peer) override {
    std::shared_ptr<TcpPeer> p;
    {
      common::MutexLock lock(&mu_);
      auto it = peers_.find(peer.instance);
      if (it == peers_.end()) return;
      p = std::move(it->second);
      peers_.erase(it);
    }
    p->Shutdown(absl::UnavailableError(common::StrCat("tcp: segment '", peer.name, "' closed")));
  }
  const TransportStats& Stats() const override { return stats_; }

 private:
  absl::StatusOr<std::shared_ptr<TcpPeer>> GetPeer(const SegmentDescriptor& desc);

  // Declared before io_: handlers destroyed with io_ still fail slices (stats_) and return
  // bounce chunks (the pools).
  const TcpParams params_;
  TransportContext context_;
  TransportStats stats_;
  std::unique_ptr<BouncePool> cuda_bounce_;
  std::unique_ptr<BouncePool> hip_bounce_;
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<TcpServer> server_;
  std::vector<std::thread> threads_;
  common::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<TcpPeer>> peers_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::shared_ptr<TcpPeer>> TcpTransport::GetPeer(const SegmentDescriptor& desc) {
  common::MutexLock lock(&mu_);
  auto it = peers_.find(desc.instance);
  if (it != peers_.end()) return it->second;
  auto hp = common::ParseHostPort(desc.tcp_endpoint);
  if (!hp.ok() || hp->second == 0) {
    return absl::UnavailableError(common::StrCat(
        "tcp: segment '", desc.name, "' publishes a bad endpoint '", desc.tcp_endpoint, "'"));
  }
  auto info = std::make_shared<PeerInfo>();
  info->segment = desc.name;
  info->instance = desc.instance;
  info->host = hp->first;
  info->port = std::to_string(hp->second);
  info->endpoint = desc.tcp_endpoint;
  info->crc32c = context_.verify_crc32c;
  info->auth = context_.auth;
  auto peer = std::make_shared<TcpPeer>(io_, std::move(info), params_, &stats_, cuda_bounce_.get(),
                                        hip_bounce_.get());
  peers_.emplace(desc.instance, peer);
  return peer;
}

absl::Status TcpTransport::Submit(const SegmentDescriptorPtr& peer,
                                  absl::Span<const TransferTask> tasks) {
  auto p = GetPeer(*peer);
  if (!p.ok()) return p.status();
  if ((*p)->stale()) {
    // Hand the tasks back: the engine re-reads the descriptor (a restarted owner publishes a
    // new instance and endpoint) and the next request gets a fresh peer.
    {
      common::MutexLock lock(&mu_);
      auto it = peers_.find(peer->instance);
      if (it != peers_.end() && it->second == *p) peers_.erase(it);
    }
    (*p)->Shutdown(absl::UnavailableError("tcp: peer replaced"));
    return absl::UnavailableError(common::StrCat("tcp: segment '", peer->name, "' (",
                                                 peer->tcp_endpoint,
                                                 ") refused connections or restarted"));
  }
  SliceList list;
  const uint64_t slice = params_.slice_bytes;
  for (const TransferTask& t : tasks) {
    stats_.CountRequest(t.op);
    const auto n = static_cast<uint32_t>((t.length + slice - 1) / slice);
    t.task->Begin(n);
    for (uint64_t off = 0; off < t.length; off += slice) {
      Slice s;
      s.task = t.task;
      s.op = t.op;
      s.local = t.local + off;
      s.local_runtime = context_.RuntimeFor(t.local_location);
      s.remote_addr = t.remote_addr + off;
      s.length = static_cast<uint32_t>(std::min(slice, t.length - off));
      s.deadline = t.deadline;
      s.flow = t.flow;
      s.capability = t.capability;
      list.items.push_back(std::move(s));
    }
  }
  (*p)->Dispatch(std::move(list));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransportPtr> CreateTcpTransport(const TcpParams& params) {
  return TransportPtr(std::make_unique<TcpTransport>(params));
}

}  // namespace kvgate::transfer
