// File: transfer/tcp/tcp_internal.h
// Private pieces of the tcp transport, shared by its two translation units (the only ones that
// include Asio): the owner-side server and the initiator-side connections. Not for other users.
//
// Threading: one io_context run by TcpParams::io_threads threads; every connection and every
// served session lives on its own strand, so its state needs no lock. TcpPeer (the set of
// connections to one owner) is thread-safe.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "transfer/gpu/bounce_pool.h"
#include "transfer/tcp/wire.h"
#include "transfer/transport.h"
#include "transfer/transport_params.h"

namespace kvgate::transfer::tcp_internal {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;
/// Completion token for coroutines: errors come back as values, Asio never throws.
inline constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);
/// Bytes a connection moves per turn on an io thread: a large transfer hands the thread to the
/// other connections at least this often, however much the kernel's socket buffers would take.
inline constexpr size_t kTurnBytes = 1 << 20;
/// Completion condition for async_read/async_write: each step moves at most kTurnBytes.
inline size_t OneTurn(const boost::system::error_code& ec, size_t /*done*/) {
  return ec ? 0 : kTurnBytes;
}

/// Owner side: accepts connections and serves one-sided READ/WRITE on registered buffers.
class TcpServer {
 public:
  /// The bounce pools (null without the runtime) outlive every handler of `io`.
  TcpServer(net::io_context& io, const TransportContext& context, const TcpParams& params,
            TransportStats* stats, BouncePool* cuda_bounce, BouncePool* hip_bounce);
  /// Binds and starts accepting. @return kUnavailable when the address cannot be bound.
  absl::Status Listen();
  /// "host:port" peers connect to.
  const std::string& endpoint() const { return endpoint_; }

 private:
  net::awaitable<void> Accept();
  net::awaitable<void> Serve(tcp::socket socket);
  /// @return whether the peer proved a credential; its name in `principal`.
  net::awaitable<bool> Authenticate(tcp::socket& socket, Clock::time_point* busy_since,
                                    std::string* principal);
  /// Counts and (at most once a second) logs a request refused for its capability.
  void Denied(const RequestHeader& req, const std::string& principal, const absl::Status& why);

  net::io_context& io_;
  const TransportContext& context_;
  const TcpParams& params_;
  TransportStats* stats_;
  tcp::acceptor acceptor_;
  std::string endpoint_;
  BouncePool* const cuda_bounce_;  // For buffers in device memory.
  BouncePool* const hip_bounce_;
  std::atomic<Clock::time_point> last_refusal_log_{};
  std::atomic<Clock::time_point> last_denial_log_{};
};

/// One slice of a request on its way: at most TcpParams::slice_bytes.
struct Slice {
  Task* task = nullptr;
  TransferOp op = TransferOp::kRead;
  uint8_t* local = nullptr;
  GpuRuntime* local_runtime = nullptr;  // Non-null: `local` is device memory (bounced).
  uint64_t remote_addr = 0;
  uint32_t length = 0;
  uint32_t attempts = 0;
  uint64_t flow = 0;             // TransferTask::flow.
  RangeCapability capability{};  // Sent after the header when present.
  Clock::time_point deadline;
  RequestHeader header;      // Filled when sent.
  ResponseHeader response;   // Received straight into here (scatter read).
  BouncePool::Chunk bounce;  // Staging for device memory.

  /// Bytes of this slice's response: the header, and for READ `length` payload bytes (sent by
  /// the owner even when it refuses, so responses can be scattered without parsing first).
  uint64_t response_bytes() const {
    return sizeof(ResponseHeader) + (op == TransferOp::kRead ? length : 0);
  }
};

/// Slices that fail themselves if dropped unhandled (e.g. a posted handler destroyed at
/// shutdown), so no task ever waits for a slice nobody holds.
class SliceList {
 public:
  SliceList() = default;
  SliceList(SliceList&&) = default;
  SliceList& operator=(SliceList&&) = default;
  ~SliceList();
  std::deque<Slice> items;
};

/// Immutable facts about one owner, shared by its connections.
struct PeerInfo {
  std::string segment;
  std::string instance;
  std::string host;
  std::string port;
  std::string endpoint;  // "host:port" for messages.
  bool crc32c = false;
  PeerAuthPtr auth;  // This engine's own credential proves it to the owner.
};

class TcpPeer;

/// One connection to an owner. Created by TcpPeer; lives on its strand while it has work.
class TcpConnection : public std::enable_shared_from_this<TcpConnection> {
 public:
  TcpConnection(net::io_context& io, std::shared_ptr<const PeerInfo> info,
                std::weak_ptr<TcpPeer> peer, const TcpParams& params, TransportStats* stats,
                BouncePool* cuda_bounce, BouncePool* hip_bounce);
  /// Fails whatever it still holds.
  ~TcpConnection();

  /// Connects and serves the queue; call once.
  void Start();
  /// Thread-safe: hands slices to the connection's strand.
  void Enqueue(SliceList slices);
  /// Thread-safe: true once the connection failed; the peer replaces it on next use.
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  /// Thread-safe: closes the connection, failing its slices with `why` (no retry).
  void Close(absl::Status why);

 private:
  net::awaitable<void> Run();
  net::awaitable<void> Reader();
  net::awaitable<void> Watchdog();
  net::awaitable<absl::Status> Handshake();
  net::awaitable<absl::Status> Authenticate();
  // Strand only.
  void Fail(absl::Status why, bool retry);
  void Wake();
  /// In crc mode, whether `r` carries the flag and a matching header CRC.
  bool Intact(const ResponseHeader& r) const {
    return !info_->crc32c || ((r.flags & kFlagCrc32c) && HeaderCrc(r) == r.header_crc);
  }
  /// The front slice's response is complete: check and finish it. False when the stream can
  /// no longer be trusted (the connection was failed).
  bool FinishFront();
  void PopFront() {
    inflight_bytes_ -= inflight_.front().length;
    inflight_.pop_front();
  }
  /// Bulk queues are sent in rounds of half the window: each request write is one small packet
  /// through the whole TCP stack on both sides, so refilling one slot per answer would double
  /// the packet count. A queue that fits the free room goes at once (latency).
  /// The window is bounded in bytes too: answers come in order, so a small request waits for
  /// every byte in flight before it on its connection.
  bool ReadyToSend() const {
    const size_t window = std::max<uint32_t>(1, params_.max_inflight_slices_per_connection);
    const uint64_t byte_window = std::max<uint32_t>(1, params_.max_inflight_bytes_per_connection);
    const size_t room = window - std::min(window, inflight_.size());
    if (!connected_ || queued_ == 0 || room == 0) return false;
    if (inflight_bytes_ >= byte_window && !inflight_.empty()) return false;
    return (inflight_.size() <= window / 2 && inflight_bytes_ <= byte_window / 2) ||
           queued_ <= room;
  }
  /// The next slice to send: round robin over the flows queued, one slice each, so a small
  /// request waits for one slice of each other flow, not for all of a large one.
  Slice TakeNext();

  Strand strand_;
  tcp::socket socket_;
  net::steady_timer wake_;   // Writer waits here for work or room.
  net::steady_timer rwake_;  // Reader waits here while nothing is in flight.
  net::steady_timer watch_;  // Watchdog period, or idle wait.
  const std::shared_ptr<const PeerInfo> info_;
  const std::weak_ptr<TcpPeer> peer_;
  const TcpParams& params_;
  TransportStats* const stats_;
  BouncePool* const cuda_bounce_;
  BouncePool* const hip_bounce_;
  std::atomic<bool> broken_{false};
  // Strand state.
  bool connected_ = false;
  bool closed_ = false;
  Clock::time_point connect_deadline_;
  uint64_t next_seq_ = 1;
  std::deque<std::deque<Slice>> queue_;  // Not yet sent, one deque per flow (never empty).
  size_t queued_ = 0;                    // Slices in queue_.
  std::deque<Slice> inflight_;           // Sent, oldest first; answers come in this order.
  uint64_t inflight_bytes_ = 0;          // Their lengths.
  uint64_t front_received_ = 0;          // Bytes of inflight_.front()'s response already read.
  ResponseHeader response_;              // The hello's.
};

/// The connections to one owner, striped slice by slice. Thread-safe.
class TcpPeer : public std::enable_shared_from_this<TcpPeer> {
 public:
  TcpPeer(net::io_context& io, std::shared_ptr<const PeerInfo> info, const TcpParams& params,
          TransportStats* stats, BouncePool* cuda_bounce, BouncePool* hip_bounce);
  const PeerInfo& info() const { return *info_; }

  /// Spreads slices round-robin over the connections, creating or replacing broken ones.
  void Dispatch(SliceList slices);
  /// Slices from a broken connection: resent while attempts and deadline allow, else failed
  /// with `why`.
  void Retry(std::deque<Slice> slices, const absl::Status& why);
  /// Closes every connection, failing their slices with `why`.
  void Shutdown(const absl::Status& why);
  /// The owner refused connections or another instance answered: its descriptor is probably
  /// out of date. Thread-safe.
  void MarkStale() { stale_.store(true, std::memory_order_release); }
  bool stale() const { return stale_.load(std::memory_order_acquire); }

 private:
  net::io_context& io_;
  const std::shared_ptr<const PeerInfo> info_;
  const TcpParams& params_;
  TransportStats* const stats_;
  BouncePool* const cuda_bounce_;
  BouncePool* const hip_bounce_;
  common::Mutex mu_;
  std::vector<std::shared_ptr<TcpConnection>> connections_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stale_{false};
};

/// "tcp: READ of N bytes at offset 0x.. of segment 'x' (host:port): reason".
std::string SliceError(const PeerInfo& info, const Slice& s, absl::string_view reason);
/// Fails `s` with `code` and a SliceError message, counting the failure.
void FailSlice(Slice& s, const PeerInfo& info, absl::StatusCode code, absl::string_view reason,
               TransportStats* stats);

}  // namespace kvgate::transfer::tcp_internal
