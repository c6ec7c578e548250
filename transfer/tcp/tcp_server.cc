// The owner side of the tcp transport: accepts peers and serves one-sided READ/WRITE on this
// engine's registered buffers. Every range is checked against the registry; the buffer is held
// (shared_ptr) while its bytes are on the wire, so UnregisterMemory() waits for it.
#include <unistd.h>

#include <array>

#include "common/strings.h"
#include "spdlog/spdlog.h"
#include "transfer/crc32c.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/memory_registry.h"
#include "transfer/tcp/tcp_internal.h"

namespace kvgate::transfer::tcp_internal {
namespace {

constexpr uint64_t kDrainChunkBytes = 64 << 10;

// A served connection, shared by its serving and watchdog coroutines.
struct Session {
  explicit Session(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  net::steady_timer timer;
  Clock::time_point busy_since{};  // Epoch while waiting for the next request (idle is fine).
  bool done = false;
};

net::awaitable<void> WatchSession(std::shared_ptr<Session> s, std::chrono::milliseconds stall) {
  const auto period = std::max(std::chrono::milliseconds(5), std::min(stall / 4, stall));
  while (!s->done) {
    s->timer.expires_after(period);
    co_await s->timer.async_wait(kNoThrow);
    if (s->done) break;
    if (s->busy_since != Clock::time_point{} && Clock::now() - s->busy_since > stall) {
      boost::system::error_code ignored;
      s->socket.close(ignored);  // The serving coroutine sees the error and ends.
      break;
    }
  }
}

}  // namespace

TcpServer::TcpServer(net::io_context& io, const TransportContext& context, const TcpParams& params,
                     TransportStats* stats, BouncePool* cuda_bounce, BouncePool* hip_bounce)
    : io_(io),
      context_(context),
      params_(params),
      stats_(stats),
      acceptor_(io),
      cuda_bounce_(cuda_bounce),
      hip_bounce_(hip_bounce) {}

absl::Status TcpServer::Listen() {
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(params_.listen_address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        common::StrCat("tcp: listen_address '", params_.listen_address, "' is not an IP address"));
  }
  const tcp::endpoint ep(addr, params_.listen_port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(common::StrCat("tcp: cannot listen on ", params_.listen_address,
                                                 ":", params_.listen_port, ": ", ec.message()));
  }
  std::string host = params_.advertise_host;
  if (host.empty()) {
    if (addr.is_unspecified()) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      host = name;
    } else {
      host = addr.to_string();
    }
  }
  const bool v6 = host.find(':') != std::string::npos;
  endpoint_ =
      common::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", acceptor_.local_endpoint().port());
  net::co_spawn(io_, Accept(), net::detached);
  return absl::OkStatus();
}

net::awaitable<void> TcpServer::Accept() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(net::make_strand(io_), kNoThrow);
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) continue;  // e.g. EMFILE: keep accepting.
    auto executor = socket.get_executor();
    net::co_spawn(executor, Serve(std::move(socket)), net::detached);
  }
}

net::awaitable<void> TcpServer::Serve(tcp::socket socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (params_.socket_buffer_bytes > 0) {
    socket.set_option(net::socket_base::send_buffer_size(params_.socket_buffer_bytes), ignored);
    socket.set_option(net::socket_base::receive_buffer_size(params_.socket_buffer_bytes), ignored);
  }
  auto s = std::make_shared<Session>(std::move(socket));
  net::co_spawn(s->socket.get_executor(),
                WatchSession(s, std::chrono::milliseconds(params_.server_stall_timeout_ms)),
                net::detached);
  RequestHeader req;
  ResponseHeader resp;
  std::vector<uint8_t> scratch;
  bool greeted = false;
  bool crc_mode = false;  // Set by the kHello: every header checked, every response sealed.
  for (;;) {
    s->busy_since = Clock::time_point{};
    auto [ec, n] = co_await net::async_read(s->socket, net::buffer(&req, sizeof(req)), kNoThrow);
    if (ec) break;
    s->busy_since = Clock::now();
    resp = ResponseHeader{};
    resp.seq = req.seq;
    const uint8_t* payload = nullptr;  // Sent after resp, resp.length bytes.
    const bool known_op =
        req.op == WireOp::kHello || req.op == WireOp::kRead || req.op == WireOp::kWrite;
    const bool flagged = (req.flags & kFlagCrc32c) != 0;
    if (req.op == WireOp::kHello && !greeted) crc_mode = flagged;
    // A header that fails a check cannot be trusted for anything, its length included: the
    // stream cannot be resynchronised, so the connection ends after the refusal.
    bool close_after = false;
    LocalBufferPtr buf;  // Referenced until its bytes are off the wire.
    BouncePool::Chunk chunk;
    if (req.magic != kWireMagic || !known_op || req.length > kMaxWirePayload ||
        greeted == (req.op == WireOp::kHello) ||
        (req.op == WireOp::kHello && req.length > kMaxHelloBytes) || flagged != crc_mode ||
        (crc_mode && HeaderCrc(req) != req.header_crc)) {
      resp.status = WireStatus::kBadRequest;
      close_after = true;
    } else if (req.op == WireOp::kHello) {
      scratch.resize(req.length);
      auto [ec2, n2] = co_await net::async_read(s->socket, net::buffer(scratch), kNoThrow);
      if (ec2) break;
      greeted = std::string_view(reinterpret_cast<const char*>(scratch.data()), scratch.size()) ==
                context_.instance;
      resp.status = greeted ? WireStatus::kOk : WireStatus::kWrongPeer;
      close_after = !greeted;
    } else {
      buf = context_.registry->Find(req.addr, req.length);
      GpuRuntime* rt = buf != nullptr ? context_.RuntimeFor(buf->location) : nullptr;
      auto* mem = reinterpret_cast<uint8_t*>(req.addr);
      if (req.op == WireOp::kRead) {
        if (buf == nullptr) {
          resp.status = WireStatus::kOutOfRange;
        } else {
          const uint8_t* src = mem;
          if (rt != nullptr) {
            // Device memory: stage in host memory (pinned when the slice fits a chunk).
            BouncePool* pool = buf->location.kind == MemoryKind::kCuda ? cuda_bounce_ : hip_bounce_;
            uint8_t* stage = nullptr;
            if (pool != nullptr && req.length <= pool->chunk_bytes()) {
              chunk = pool->Acquire();
              stage = chunk.data();
            } else {
              scratch.resize(req.length);
              stage = scratch.data();
            }
            src = rt->Copy(stage, mem, req.length).ok() ? stage : nullptr;
          }
          if (src == nullptr) {
            resp.status = WireStatus::kDeviceError;
          } else {
            resp.length = req.length;
            if (crc_mode) resp.crc = Crc32c(0, src, req.length);
            payload = src;  // Straight from registered memory: no staging copy.
          }
        }
      } else if (buf == nullptr) {
        // Consume the WRITE payload so the connection stays usable, then refuse.
        scratch.resize(std::min<uint64_t>(req.length, kDrainChunkBytes));
        uint64_t left = req.length;
        bool broken = false;
        while (left > 0 && !broken) {
          const size_t k = std::min<uint64_t>(left, scratch.size());
          auto [ec2, n2] =
              co_await net::async_read(s->socket, net::buffer(scratch.data(), k), kNoThrow);
          broken = static_cast<bool>(ec2);
          left -= k;
        }
        if (broken) break;
        resp.status = WireStatus::kOutOfRange;
      } else {
        uint8_t* dst = mem;
        if (rt != nullptr) {
          scratch.resize(req.length);
          dst = scratch.data();
        }
        auto [ec2, n2] =
            co_await net::async_read(s->socket, net::buffer(dst, req.length), kNoThrow);
        if (ec2) break;
        if (crc_mode && Crc32c(0, dst, req.length) != req.crc) {
          resp.status = WireStatus::kCrcMismatch;
        } else if (rt != nullptr && !rt->Copy(mem, dst, req.length).ok()) {
          resp.status = WireStatus::kDeviceError;
        }
      }
    }
    if (crc_mode) {
      resp.flags = kFlagCrc32c;
      resp.header_crc = HeaderCrc(resp);
    }
    // Header and payload in one gather write.
    const std::array<net::const_buffer, 2> bufs{net::buffer(&resp, sizeof(resp)),
                                                net::buffer(payload, payload ? resp.length : 0)};
    auto [ec3, n3] = co_await net::async_write(s->socket, bufs, kNoThrow);
    if (ec3 || close_after) break;
  }
  s->done = true;
  s->timer.cancel();
  s->socket.close(ignored);
}

}  // namespace kvgate::transfer::tcp_internal
