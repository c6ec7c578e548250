// File: sim/pd_agent.cc
#include "sim/pd_agent.h"

#include <unistd.h>

#include <atomic>
#include <boost/beast/core.hpp>
#include <chrono>
#include <cstring>

#include "common/json_util.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "sim/sim_metrics.h"
#include "sim/store_cache.h"
#include "sim/tokens.h"
#include "spdlog/spdlog.h"

namespace kvgate::sim {
namespace {

namespace beast = boost::beast;
using tcp = net::ip::tcp;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);
// Generous: a refused or dead side channel fails at once anyway, and a busy machine (2 cores
// under sanitizers) must not turn a slow answer into a recompute.
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kTransferTimeout = std::chrono::seconds(30);

std::chrono::milliseconds RealMs(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(seconds, 1e7) * 1000.0));
}

std::string Json(std::string_view s) {
  std::string out;
  common::AppendJsonString(out, s);
  return out;
}

// Leaves `*out` as it is when `key` is absent or of another type.
template <typename T>
void Field(simdjson::dom::object obj, std::string_view key, T* out) {
  T v{};
  if (!obj[key].get(v)) *out = v;
}

std::string ErrorLine(std::string_view why) {
  return common::StrCat("{\"ok\":false,\"error\":", Json(why), "}");
}

// Peers reach a wildcard listener through this host's name.
std::string AdvertiseHost(const std::string& host) {
  if (host == "0.0.0.0" || host == "::") return net::ip::host_name();
  return host;
}

// The stand-in KV bytes of a prompt: each block's bytes derive from its chained hash (a partial
// last block from the hash of its tokens), so a decode can check what it received.
void FillPromptBytes(uint64_t root, absl::Span<const uint32_t> prompt, uint32_t block_size,
                     uint32_t bytes_per_token, uint8_t* out) {
  uint64_t parent = root;
  for (size_t first = 0; first < prompt.size(); first += block_size) {
    const size_t n = std::min<size_t>(block_size, prompt.size() - first);
    const uint64_t h = ChainBlockHash(parent, prompt.subspan(first, n));
    FillBlockBytes(h, out + first * bytes_per_token, n * bytes_per_token);
    parent = h;
  }
}

}  // namespace

// Descriptors come with the side channel's answers rather than from etcd or a file: the decode
// learns its prefill's only when it needs to read from it.
class PdAgent::PeerMetadata final : public transfer::SegmentMetadata {
 public:
  std::string_view Kind() const override { return "kvgate-sim side channel"; }
  absl::Status Publish(const transfer::SegmentDescriptor& desc) override {
    common::MutexLock lock(&mu_);
    segments_[desc.name] = desc;
    return absl::OkStatus();
  }
  absl::StatusOr<transfer::SegmentDescriptor> Lookup(std::string_view name) override {
    common::MutexLock lock(&mu_);
    auto it = segments_.find(std::string(name));
    if (it == segments_.end()) return absl::NotFoundError(common::StrCat("no segment ", name));
    return it->second;
  }
  absl::Status Remove(std::string_view name) override {
    common::MutexLock lock(&mu_);
    segments_.erase(std::string(name));
    return absl::OkStatus();
  }

 private:
  common::Mutex mu_;
  absl::flat_hash_map<std::string, transfer::SegmentDescriptor> segments_ ABSL_GUARDED_BY(mu_);
};

struct PdAgent::Held {
  explicit Held(net::io_context& io) : expiry(io), done(io) {}
  std::string key;
  EngineRunner* runner = nullptr;
  uint64_t request = 0;  // The engine's request id.
  std::vector<int32_t> blocks;
  uint32_t tokens = 0;
  std::vector<uint8_t> bytes;  // Registered with the transfer engine while held.
  bool registered = false;
  bool released = false;
  net::steady_timer expiry;  // pd_abort_timeout_s.
  net::steady_timer done;    // Cancelled on release (AwaitRelease).
};

void AppendPdMetrics(const PdCounters& c, uint64_t held_blocks, uint64_t held_requests,
                     std::string* out) {
  AppendCounter(
      out, "kvgate_sim_pd_requests", "Requests served as a P/D prefill or decode stage.",
      {{"{stage=\"prefill\"}", c.prefill_requests}, {"{stage=\"decode\"}", c.decode_requests}});
  AppendCounter(out, "kvgate_sim_pd_transfer_bytes",
                "Real KV bytes this decode pulled from prefills (store_bytes_per_token a token).",
                {{"", c.transfer_bytes}});
  AppendCounter(out, "kvgate_sim_pd_transfer_tokens", "Prompt tokens whose KV this decode pulled.",
                {{"", c.transfer_tokens}});
  AppendCounter(out, "kvgate_sim_pd_pull_failures",
                "Decodes that could not pull their KV and recomputed the prompt.",
                {{"", c.pull_failures}});
  AppendMetricFamily(out, "kvgate_sim_pd_held_blocks", "gauge",
                     "KV blocks a prefill keeps for its decodes.");
  common::StrAppend(out, "kvgate_sim_pd_held_blocks ", held_blocks, "\n");
  AppendMetricFamily(out, "kvgate_sim_pd_held_requests", "gauge",
                     "Prefilled requests waiting for their decode.");
  common::StrAppend(out, "kvgate_sim_pd_held_requests ", held_requests, "\n");
  AppendCounter(out, "kvgate_sim_pd_released", "Held prefill KV freed, by reason.",
                {{"{reason=\"pulled\"}", c.released_pulled},
                 {"{reason=\"timeout\"}", c.released_timeout},
                 {"{reason=\"replaced\"}", c.released_replaced}});
}

PdAgent::PdAgent(net::io_context& io, const SimOptions& options, const SimClock& clock)
    : io_(io), o_(options), clock_(clock), acceptor_(io) {}

absl::StatusOr<std::unique_ptr<PdAgent>> PdAgent::Create(net::io_context& io,
                                                         const SimOptions& options, uint32_t worker,
                                                         const SimClock& clock) {
  std::unique_ptr<PdAgent> a(new PdAgent(io, options, clock));
  // Unique in the process too: tests run prefill and decode SimProcesses side by side.
  static std::atomic<uint64_t> next{0};
  a->engine_id_ = common::StrCat("kvgate-sim-", ::getpid(), "-", worker, "-", next++);
  auto metadata = std::make_unique<PeerMetadata>();
  a->metadata_ = metadata.get();
  transfer::TransferEngineOptions eo;
  eo.segment_name = a->engine_id_;
  eo.metadata = std::move(metadata);
  eo.transports = {"tcp"};
  eo.tcp.listen_address = options.host;
  eo.tcp.advertise_host = AdvertiseHost(options.host);
  eo.default_timeout = kTransferTimeout;
  eo.load_gpu_runtimes = false;
  auto engine = transfer::TransferEngine::Create(std::move(eo));
  if (!engine.ok()) return engine.status();
  a->transfer_ = std::move(*engine);

  boost::system::error_code ec;
  const auto addr = net::ip::make_address(options.host, ec);
  if (ec) return absl::InvalidArgumentError("bad --host " + options.host);
  const uint16_t port =
      options.bootstrap_port == 0 ? 0 : static_cast<uint16_t>(options.bootstrap_port + worker);
  const tcp::endpoint ep(addr, port);
  a->acceptor_.open(ep.protocol(), ec);
  if (!ec) a->acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a->acceptor_.bind(ep, ec);
  if (!ec) a->acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(common::StrCat("cannot listen on bootstrap port ", options.host,
                                                 ":", port, ": ", ec.message()));
  }
  a->port_ = a->acceptor_.local_endpoint().port();
  net::co_spawn(io, a->AcceptLoop(), net::detached);
  return a;
}

PdAgent::~PdAgent() {
  std::vector<std::shared_ptr<Held>> all;
  for (auto& [key, h] : held_) all.push_back(h);
  for (auto& h : all) Release(h, "");
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

std::shared_ptr<PdAgent::Held> PdAgent::Hold(const std::string& key, EngineRunner& runner,
                                             uint64_t request, absl::Span<const uint32_t> prompt) {
  ++counters_.prefill_requests;
  auto h = std::make_shared<Held>(io_);
  h->key = key;
  h->runner = &runner;
  h->request = request;
  h->tokens = static_cast<uint32_t>(prompt.size());
  if (const auto* blocks = runner.engine().HeldBlocks(request)) h->blocks = *blocks;
  const uint32_t bpt = o_.profile.store_bytes_per_token;
  h->bytes.resize(prompt.size() * bpt);
  FillPromptBytes(RootBlockHash(o_.model), prompt, o_.profile.block_size, bpt, h->bytes.data());
  if (absl::Status s = transfer_->RegisterMemory(h->bytes.data(), h->bytes.size()); !s.ok()) {
    spdlog::warn("kvgate-sim: cannot expose the KV of {}: {}", key, s.message());
    h->released = true;
    runner.ReleaseHeld(request);
    return h;
  }
  h->registered = true;
  if (auto it = held_.find(key); it != held_.end()) Release(it->second, "replaced");
  held_[key] = h;
  h->expiry.expires_after(RealMs(o_.pd_abort_timeout_s * o_.time_scale));
  h->expiry.async_wait([this, weak = std::weak_ptr<Held>(h)](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto held = weak.lock()) {
      spdlog::info("kvgate-sim: freeing the KV of {}: no decode pulled it", held->key);
      Release(held, "timeout");
    }
  });
  if (auto w = waiters_.find(key); w != waiters_.end()) {
    for (auto& t : w->second) t->cancel();
  }
  return h;
}

void PdAgent::Release(std::shared_ptr<Held> h, std::string_view reason) {
  if (h->released) return;
  h->released = true;
  if (auto it = held_.find(h->key); it != held_.end() && it->second == h) held_.erase(it);
  h->runner->ReleaseHeld(h->request);
  if (h->registered) (void)transfer_->UnregisterMemory(h->bytes.data());
  h->bytes = {};
  h->expiry.cancel();
  h->done.cancel();
  if (reason == "pulled") ++counters_.released_pulled;
  if (reason == "timeout") ++counters_.released_timeout;
  if (reason == "replaced") ++counters_.released_replaced;
}

std::string PdAgent::KvTransferParams(const Held& held, const std::string& request_id) const {
  return common::StrCat(
      "{\"do_remote_prefill\":true,\"do_remote_decode\":false,\"remote_block_ids\":[",
      common::StrJoin(held.blocks, ","), "],\"remote_engine_id\":", Json(engine_id_),
      ",\"remote_host\":", Json(AdvertiseHost(o_.host)), ",\"remote_port\":", port_,
      ",\"tp_size\":1,\"remote_request_id\":", Json(request_id), "}");
}

net::awaitable<void> PdAgent::AwaitRelease(std::shared_ptr<Held> held) {
  while (!held->released) {
    held->done.expires_at(SteadyTime::max());
    co_await held->done.async_wait(kNoThrow);
  }
}

net::awaitable<void> PdAgent::AcceptLoop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(kNoThrow);
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
      continue;
    }
    net::co_spawn(io_, Serve(std::move(socket)), net::detached);
  }
}

net::awaitable<void> PdAgent::Serve(tcp::socket socket) {
  std::string in;
  for (;;) {
    auto [ec, n] =
        co_await net::async_read_until(socket, net::dynamic_buffer(in, 1 << 16), '\n', kNoThrow);
    if (ec) break;
    std::string line = in.substr(0, n);
    in.erase(0, n);
    std::string reply = co_await Answer(std::move(line));
    reply += '\n';
    auto [wec, w] = co_await net::async_write(socket, net::buffer(reply), kNoThrow);
    if (wec) break;
  }
  boost::system::error_code ignored;
  socket.close(ignored);
}

net::awaitable<std::string> PdAgent::Answer(std::string line) {
  simdjson::dom::object obj;
  if (json_.parse(line).get(obj)) co_return ErrorLine("not a JSON object");
  std::string_view v;
  const std::string op = obj["op"].get(v) ? "" : std::string(v);
  const std::string key = obj["key"].get(v) ? "" : std::string(v);
  const std::string engine = obj["engine_id"].get(v) ? "" : std::string(v);
  uint64_t wait_ms = 0;
  Field(obj, "wait_ms", &wait_ms);
  if (op == "free") {
    auto it = held_.find(key);
    if (it == held_.end()) co_return ErrorLine(common::StrCat("no KV held for ", key));
    Release(it->second, "pulled");
    co_return "{\"ok\":true}";
  }
  if (op != "get") co_return ErrorLine(common::StrCat("unknown op ", op));
  if (!engine.empty() && engine != engine_id_) {
    co_return ErrorLine(common::StrCat("this is engine ", engine_id_, ", not ", engine));
  }
  if (!held_.contains(key) && wait_ms > 0) {
    // The decode may come first (vllm-mooncake, sglang-bootstrap send both at once).
    auto timer = std::make_shared<net::steady_timer>(io_);
    timer->expires_after(std::chrono::milliseconds(std::min<uint64_t>(wait_ms, 3600000)));
    waiters_[key].push_back(timer);
    co_await timer->async_wait(kNoThrow);
    auto& list = waiters_[key];
    std::erase(list, timer);
    if (list.empty()) waiters_.erase(key);
  }
  auto it = held_.find(key);
  if (it == held_.end()) co_return ErrorLine(common::StrCat("no KV held for ", key));
  const Held& h = *it->second;
  auto desc = metadata_->Lookup(engine_id_);
  if (!desc.ok()) co_return ErrorLine(std::string(desc.status().message()));
  co_return common::StrCat("{\"ok\":true,\"engine_id\":", Json(engine_id_),
                           ",\"segment\":", Json(transfer::SegmentToJson(*desc)),
                           ",\"addr\":", reinterpret_cast<uintptr_t>(h.bytes.data()),
                           ",\"bytes\":", h.bytes.size(), ",\"tokens\":", h.tokens, "}");
}

uint32_t PdAgent::Fail(const PdRequest& r, std::string_view why) {
  ++counters_.pull_failures;
  spdlog::warn("kvgate-sim: no KV from the prefill for {} ({}); recomputing the prompt", r.key,
               why);
  return 0;
}

net::awaitable<uint32_t> PdAgent::Pull(const PdRequest& r, absl::Span<const uint32_t> prompt) {
  ++counters_.decode_requests;
  if (r.remote_host.empty() || r.remote_port == 0) {
    co_return Fail(r, "the request names no prefill side channel");
  }
  const std::string where = common::StrCat(r.remote_host, ":", r.remote_port);
  tcp::resolver resolver(io_);
  auto [rec, endpoints] =
      co_await resolver.async_resolve(r.remote_host, std::to_string(r.remote_port), kNoThrow);
  if (rec) co_return Fail(r, common::StrCat("cannot resolve ", where, ": ", rec.message()));
  beast::tcp_stream stream(io_);
  stream.expires_after(kConnectTimeout);
  auto [cec, ep] = co_await stream.async_connect(endpoints, kNoThrow);
  if (cec) co_return Fail(r, common::StrCat("cannot reach ", where, ": ", cec.message()));

  const auto wait = r.wait_for_prefill ? RealMs(o_.pd_wait_timeout_s * o_.time_scale)
                                       : std::chrono::milliseconds(0);
  std::string line = common::StrCat("{\"op\":\"get\",\"key\":", Json(r.key),
                                    ",\"engine_id\":", Json(r.remote_engine_id),
                                    ",\"wait_ms\":", wait.count(), "}\n");
  std::string in;
  stream.expires_after(wait + kConnectTimeout);
  auto [wec, wn] = co_await net::async_write(stream, net::buffer(line), kNoThrow);
  if (wec) co_return Fail(r, common::StrCat("side channel ", where, ": ", wec.message()));
  auto [gec, gn] =
      co_await net::async_read_until(stream, net::dynamic_buffer(in, 1 << 20), '\n', kNoThrow);
  if (gec) co_return Fail(r, common::StrCat("side channel ", where, ": ", gec.message()));

  // Read the answer before any co_await: json_ is shared.
  simdjson::dom::object obj;
  if (json_.parse(in.data(), gn).get(obj)) co_return Fail(r, "malformed side-channel answer");
  bool ok = false;
  std::string_view sv;
  Field(obj, "ok", &ok);
  if (!ok) {
    co_return Fail(r, obj["error"].get(sv) ? "refused" : std::string(sv));
  }
  uint64_t addr = 0, bytes = 0, tokens = 0;
  Field(obj, "addr", &addr);
  Field(obj, "bytes", &bytes);
  Field(obj, "tokens", &tokens);
  const std::string segment = obj["segment"].get(sv) ? "" : std::string(sv);
  in.erase(0, gn);

  absl::Status pulled;
  std::vector<uint8_t> local;
  const uint32_t bpt = o_.profile.store_bytes_per_token;
  if (tokens != prompt.size() || bytes != tokens * bpt) {
    pulled = absl::FailedPreconditionError(common::StrCat(
        "the prefill holds ", tokens, " tokens for this key, the prompt has ", prompt.size()));
  }
  absl::StatusOr<transfer::SegmentId> seg = absl::UnknownError("");
  if (pulled.ok()) {
    auto desc = transfer::ParseSegmentJson(segment);
    if (!desc.ok()) pulled = desc.status();
    if (pulled.ok()) pulled = metadata_->Publish(*desc);
    if (pulled.ok()) seg = transfer_->OpenSegment(desc->name);
    if (pulled.ok() && !seg.ok()) pulled = seg.status();
  }
  bool registered = false;
  if (pulled.ok()) {
    local.resize(bytes);
    pulled = transfer_->RegisterMemory(local.data(), local.size());
    registered = pulled.ok();
  }
  if (pulled.ok()) {
    auto batch = transfer_->AllocateBatch(1, kTransferTimeout);
    pulled = batch.status();
    if (pulled.ok()) {
      pulled = transfer_->Submit(*batch,
                                 {{transfer::TransferOp::kRead, local.data(), *seg, addr, bytes}});
      // The tcp transport moves the bytes on its own threads; poll without blocking the io
      // thread, whose other engines keep stepping (and which may serve this very prefill).
      net::steady_timer tick(io_);
      while (pulled.ok()) {
        auto st = transfer_->GetBatchStatus(*batch);
        if (!st.ok()) {
          pulled = st.status();
        } else if (st->finished()) {
          if (st->state != transfer::TaskState::kCompleted) pulled = st->first_error;
          break;
        } else {
          tick.expires_after(std::chrono::microseconds(200));
          co_await tick.async_wait(kNoThrow);
        }
      }
      if (transfer_->FreeBatch(*batch).ok() && registered) {
        (void)transfer_->UnregisterMemory(local.data());
        registered = false;
      }
    }
  }
  if (registered) (void)transfer_->UnregisterMemory(local.data());
  if (pulled.ok()) {
    std::vector<uint8_t> want(bytes);
    FillPromptBytes(RootBlockHash(o_.model), prompt, o_.profile.block_size, bpt, want.data());
    if (want != local) pulled = absl::DataLossError("the KV bytes differ from the prompt's");
  }

  // The prefill may free the blocks now, whether or not they arrived (vLLM's notify).
  line = common::StrCat("{\"op\":\"free\",\"key\":", Json(r.key), "}\n");
  stream.expires_after(kConnectTimeout);
  auto [fec, fn] = co_await net::async_write(stream, net::buffer(line), kNoThrow);
  if (!fec) {
    auto [rec2, rn] =
        co_await net::async_read_until(stream, net::dynamic_buffer(in, 1 << 16), '\n', kNoThrow);
    (void)rec2;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (!pulled.ok()) co_return Fail(r, std::string(pulled.message()));
  counters_.transfer_bytes += bytes;
  counters_.transfer_tokens += tokens;
  co_return static_cast<uint32_t>(tokens);
}

net::awaitable<void> PdAgent::AwaitTransferTime(double arrived, uint32_t tokens) {
  const double seconds = static_cast<double>(tokens) *
                         static_cast<double>(o_.profile.kv_bytes_per_token) /
                         o_.profile.pd_bandwidth_bytes_per_s;
  net::steady_timer timer(io_);
  timer.expires_at(clock_.RealAt(arrived + seconds));
  co_await timer.async_wait(kNoThrow);
}

}  // namespace kvgate::sim
