// The owner side of the tcp transport: accepts peers and serves one-sided READ/WRITE on this
// engine's registered buffers. Every range is checked against the registry; the buffer is held
// (shared_ptr) while its bytes are on the wire, so UnregisterMemory() waits for it.
#include <unistd.h>

#include <array>
#include <cstring>
#include <deque>

#include "common/strings.h"
#include "spdlog/spdlog.h"
#include "transfer/capability.h"
#include "transfer/crc32c.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/memory_registry.h"
#include "transfer/tcp/tcp_internal.h"

namespace kvgate::transfer::tcp_internal {
namespace {

constexpr uint64_t kDrainChunkBytes = 64 << 10;
constexpr size_t kStagingBytes = 4096;  // ~100 request headers per read.
constexpr size_t kMaxGather = 128;      // Buffers per writev (IOV_MAX is 1024).
constexpr uint64_t kMaxGatherBytes = 4 << 20;
constexpr uint8_t kZeros[64 << 10] = {};  // Padding of refused READs.

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

// The keyed challenge (transfer/peer_auth.h) before anything else; the session watchdog ends a
// peer that stalls in it. @return whether the peer proved a credential of the verifier's set.
net::awaitable<bool> TcpServer::Authenticate(tcp::socket& socket, Clock::time_point* busy_since,
                                             std::string* principal) {
  *busy_since = Clock::now();
  AuthServerHandshake hs(context_.auth->verifier, context_.segment_name);
  std::string fixed(kAuthHelloFixed, '\0'), rest, proof(kAuthMacBytes, '\0');
  auto [ec, n] = co_await net::async_read(socket, net::buffer(fixed), kNoThrow);
  if (ec) co_return false;
  absl::StatusOr<Principal> who = absl::UnauthenticatedError("no hello");
  auto rest_bytes = hs.HelloRest(fixed);
  if (!rest_bytes.ok()) who = rest_bytes.status();
  if (rest_bytes.ok()) {
    rest.resize(*rest_bytes);
    std::tie(ec, n) = co_await net::async_read(socket, net::buffer(rest), kNoThrow);
    if (ec) co_return false;
    auto challenge = hs.Challenge(fixed, rest);
    if (!challenge.ok()) who = challenge.status();
    if (challenge.ok()) {
      std::tie(ec, n) = co_await net::async_write(socket, net::buffer(*challenge), kNoThrow);
      if (!ec) std::tie(ec, n) = co_await net::async_read(socket, net::buffer(proof), kNoThrow);
      if (ec) co_return false;
      who = hs.Verify(proof);
      const char verdict = static_cast<char>(who.ok() ? kAuthAccepted : kAuthRefused);
      co_await net::async_write(socket, net::buffer(&verdict, 1), kNoThrow);
    }
  }
  *busy_since = Clock::time_point{};
  if (!who.ok()) {
    stats_->auth_failures.fetch_add(1, std::memory_order_relaxed);
    // Refusals are logged at most once a second: a flood must not become a log flood.
    const auto now = Clock::now();
    if (now - last_refusal_log_.load() > std::chrono::seconds(1)) {
      last_refusal_log_ = now;
      spdlog::warn("tcp: segment '{}': refused a peer: {}", context_.segment_name,
                   who.status().message());
    }
    co_return false;
  }
  *principal = std::move(who->name);
  co_return true;
}

void TcpServer::Denied(const RequestHeader& req, const std::string& principal,
                       const absl::Status& why) {
  stats_->capability_denied.fetch_add(1, std::memory_order_relaxed);
  // At most once a second, as for refused handshakes: a flood must not become a log flood.
  const auto now = Clock::now();
  if (now - last_denial_log_.load() > std::chrono::seconds(1)) {
    last_denial_log_ = now;
    spdlog::warn("tcp: segment '{}': denied {} of {} bytes at {:#x} to '{}': {}",
                 context_.segment_name, req.op == WireOp::kRead ? "READ" : "WRITE", req.length,
                 req.addr, principal, why.message());
  }
}

// Requests come through a small staging buffer, so one read takes many headers; responses are
// gathered, many per writev, until the staged requests run out. Payloads bypass the staging
// buffer except for the few bytes that arrive with a header: READ payloads go out of, and WRITE
// payloads into, registered memory directly.
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
  std::array<uint8_t, kStagingBytes> in;
  size_t head = 0, tail = 0;           // Staged request bytes: in[head, tail).
  std::deque<ResponseHeader> headers;  // Stable addresses for the gather list.
  std::vector<net::const_buffer> out;
  std::vector<LocalBufferPtr> out_refs;  // Buffers whose bytes are in `out`.
  std::vector<BouncePool::Chunk> out_chunks;
  uint64_t out_bytes = 0;
  std::vector<uint8_t> scratch;
  bool greeted = false;
  bool crc_mode = false;  // Set by the kHello: every header checked, every response sealed.
  std::string principal;  // The credential the peer proved.
  if (context_.auth != nullptr && !co_await Authenticate(s->socket, &s->busy_since, &principal)) {
    s->done = true;
    s->timer.cancel();
    s->socket.close(ignored);
    co_return;
  }
  // Checked per request when required; keyed from this node's own secret (Start() checked it).
  std::unique_ptr<CapabilityVerifier> capabilities;
  if (params_.require_capabilities) {
    capabilities = std::make_unique<CapabilityVerifier>(CapabilityKey(context_.auth->self->secret),
                                                        context_.segment_name);
  }

  // Moves n bytes to dst: staged ones first, the rest straight from the socket.
  auto take = [&](uint8_t* dst, uint64_t n) -> uint64_t {
    const uint64_t k = std::min<uint64_t>(n, tail - head);
    std::memcpy(dst, in.data() + head, k);
    head += k;
    return k;
  };
  auto flush = [&]() -> net::awaitable<bool> {
    if (out.empty()) co_return true;
    s->busy_since = Clock::now();
    auto [ec, n] = co_await net::async_write(s->socket, out, OneTurn, kNoThrow);
    out.clear();
    out_refs.clear();
    out_chunks.clear();
    headers.clear();
    out_bytes = 0;
    co_return !ec;
  };

  for (;;) {
    RequestHeader req;
    if (tail - head < sizeof(req)) {
      // About to wait for the peer: what is ready goes out first.
      if (!co_await flush()) break;
      std::memmove(in.data(), in.data() + head, tail - head);
      tail -= head;
      head = 0;
      s->busy_since = tail == 0 ? Clock::time_point{} : Clock::now();  // Idle between requests.
      auto [ec, n] = co_await s->socket.async_read_some(
          net::buffer(in.data() + tail, in.size() - tail), kNoThrow);
      if (ec) break;
      tail += n;
      continue;
    }
    s->busy_since = Clock::now();
    std::memcpy(&req, in.data() + head, sizeof(req));
    head += sizeof(req);
    ResponseHeader resp;  // Joins `headers` once complete (a flush below clears them).
    resp.seq = req.seq;
    const bool known_op =
        req.op == WireOp::kHello || req.op == WireOp::kRead || req.op == WireOp::kWrite;
    const bool flagged = (req.flags & kFlagCrc32c) != 0;
    const bool has_capability = (req.flags & kFlagCapability) != 0;
    if (req.op == WireOp::kHello && !greeted) crc_mode = flagged;
    // A header that fails a check cannot be trusted for anything, its length included: the
    // stream cannot be resynchronised, so the connection ends after the refusal.
    bool close_after = false;
    const uint8_t* payload = nullptr;  // READ: resp.length bytes sent after resp.
    bool flush_now = false;
    if (req.magic != kWireMagic || !known_op || req.length > kMaxWirePayload ||
        greeted == (req.op == WireOp::kHello) ||
        (req.flags & ~(kFlagCrc32c | kFlagCapability)) != 0 ||
        (req.op == WireOp::kHello && has_capability) ||
        (req.op == WireOp::kHello && req.length > kMaxHelloBytes) || flagged != crc_mode ||
        (crc_mode && HeaderCrc(req) != req.header_crc)) {
      resp.status = WireStatus::kBadRequest;
      close_after = true;
    } else if (req.op == WireOp::kHello) {
      scratch.resize(req.length);
      const uint64_t k = take(scratch.data(), req.length);
      if (k < req.length) {
        auto [ec, n] = co_await net::async_read(
            s->socket, net::buffer(scratch.data() + k, req.length - k), kNoThrow);
        if (ec) break;
      }
      greeted = std::string_view(reinterpret_cast<const char*>(scratch.data()), scratch.size()) ==
                context_.instance;
      resp.status = greeted ? WireStatus::kOk : WireStatus::kWrongPeer;
      close_after = !greeted;
    } else {
      RangeCapability capability;
      if (has_capability) {
        capability.present = true;
        const uint64_t k = take(capability.record.data(), kCapabilityBytes);
        if (k < kCapabilityBytes) {
          auto [ec, n] = co_await net::async_read(
              s->socket, net::buffer(capability.record.data() + k, kCapabilityBytes - k), kNoThrow);
          if (ec) break;
        }
      }
      // A denied request touches no memory: a READ is answered with padding, a WRITE's payload
      // is drained (below) like one outside every buffer.
      bool denied = false;
      if (capabilities != nullptr) {
        const TransferOp op = req.op == WireOp::kRead ? TransferOp::kRead : TransferOp::kWrite;
        absl::Status ok =
            capabilities->Verify(capability, principal, op, req.addr, req.length, UnixSeconds());
        if (!ok.ok()) {
          Denied(req, principal, ok);
          denied = true;
        }
      }
      LocalBufferPtr buf = denied ? nullptr : context_.registry->Find(req.addr, req.length);
      GpuRuntime* rt = buf != nullptr ? context_.RuntimeFor(buf->location) : nullptr;
      auto* mem = reinterpret_cast<uint8_t*>(req.addr);
      if (req.op == WireOp::kRead) {
        resp.length = req.length;  // Always: refusals are padded (the peer scatters blindly).
        if (buf != nullptr && rt == nullptr) {
          payload = mem;  // Straight from registered memory: no staging copy.
        } else if (buf != nullptr) {
          // Device memory: stage in host memory (pinned when the slice fits a chunk).
          BouncePool* pool = buf->location.kind == MemoryKind::kCuda ? cuda_bounce_ : hip_bounce_;
          uint8_t* stage = nullptr;
          if (pool != nullptr && req.length <= pool->chunk_bytes()) {
            out_chunks.push_back(pool->Acquire());
            stage = out_chunks.back().data();
          } else {
            scratch.resize(req.length);
            stage = scratch.data();
            flush_now = true;  // scratch is reused by the next request.
          }
          if (rt->Copy(stage, mem, req.length).ok()) {
            payload = stage;
          } else {
            resp.status = WireStatus::kDeviceError;
          }
        } else {
          resp.status = denied ? WireStatus::kDenied : WireStatus::kOutOfRange;
        }
        if (payload != nullptr && crc_mode) resp.crc = Crc32c(0, payload, req.length);
        if (payload != nullptr && buf != nullptr) out_refs.push_back(std::move(buf));
      } else if (buf == nullptr) {
        // Consume the WRITE payload so the connection stays usable, then refuse.
        scratch.resize(std::min<uint64_t>(req.length, kDrainChunkBytes));
        uint64_t left =
            req.length - take(scratch.data(), std::min<uint64_t>(req.length, scratch.size()));
        bool broken = false;
        while (left > 0 && !broken) {
          const size_t k = std::min<uint64_t>(left, scratch.size());
          auto [ec, n] =
              co_await net::async_read(s->socket, net::buffer(scratch.data(), k), kNoThrow);
          broken = static_cast<bool>(ec);
          left -= k;
        }
        if (broken) break;
        resp.status = denied ? WireStatus::kDenied : WireStatus::kOutOfRange;
      } else {
        uint8_t* dst = mem;
        if (rt != nullptr) {
          scratch.resize(req.length);
          dst = scratch.data();
        }
        const uint64_t k = take(dst, req.length);
        if (k < req.length) {
          if (!co_await flush()) break;  // Do not hold finished answers while waiting.
          auto [ec, n] = co_await net::async_read(s->socket, net::buffer(dst + k, req.length - k),
                                                  OneTurn, kNoThrow);
          if (ec) break;
        }
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
    headers.push_back(resp);
    out.push_back(net::buffer(&headers.back(), sizeof(ResponseHeader)));
    out_bytes += sizeof(resp);
    if (req.op == WireOp::kRead && resp.length > 0 && !close_after) {
      if (payload != nullptr) {
        out.push_back(net::buffer(payload, resp.length));
      } else {
        for (uint64_t left = resp.length; left > 0;) {  // Padding of a refusal.
          const uint64_t k = std::min<uint64_t>(left, sizeof(kZeros));
          out.push_back(net::buffer(kZeros, k));
          left -= k;
        }
      }
      out_bytes += resp.length;
    }
    if (close_after) {
      co_await flush();
      break;
    }
    if (flush_now || out.size() >= kMaxGather || out_bytes >= kMaxGatherBytes) {
      if (!co_await flush()) break;
    }
  }
  s->done = true;
  s->timer.cancel();
  s->socket.close(ignored);
}

}  // namespace kvgate::transfer::tcp_internal
