#include "router/dispatch/pd_dispatcher.h"

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/pd/transfer_params.h"
#include "router/upstream/usage_scanner.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using pd::PdProtocol;
using std::chrono::milliseconds;

// Retries and fallbacks of one stage stay within its pool.
void RestrictTo(RoutePlan& plan, const absl::InlinedVector<Worker*, 16>& pool) {
  plan.available = pool;
  std::erase_if(plan.tried, [&pool](uint32_t id) {
    return std::none_of(pool.begin(), pool.end(), [id](const Worker* w) { return w->id() == id; });
  });
}

bool PrefillOk(const FetchResult& r) { return r.answered && r.status >= 200 && r.status < 300; }

void Count(ThreadContext& tc, ShardedFamily& family, std::string_view label) {
  const std::string_view values[] = {label};
  family.Get(tc.index, values)->Increment();
}

// Releases the prefill decision and records what the prefill stage taught.
void FinishPrefill(ThreadContext& tc, RoutePlanner& planner, RouterMetrics& m,
                   const RoutePlan& plan, Decision& d, const FetchResult& r) {
  RouteOutcome outcome;
  outcome.success = PrefillOk(r);
  if (outcome.success) {
    const bool messages =
        plan.request != nullptr && plan.request->endpoint == ApiEndpoint::kMessages;
    UsageScanner usage(messages ? UsageScanner::Dialect::kAnthropic
                                : UsageScanner::Dialect::kOpenAi);
    usage.Feed(r.body);
    outcome.cached_tokens = usage.cached_tokens();
    outcome.ttft_seconds = r.seconds;  // a prefill's whole answer is its time to first token
  }
  const Worker& w = *d.worker;
  RecordPrediction(tc.ForWorker(w.id(), w.name()), planner.Complete(plan, d, outcome));
  if (r.answered) {
    const std::string_view stage[] = {"prefill"};
    m.pd_stage.Get(tc.index, stage)->Observe(r.seconds);
  }
  if (!outcome.success && !r.cancelled) Count(tc, m.pd_failures, "prefill");
}

// The "ip:port" vLLM's P2pNcclConnector reaches a worker on.
std::string ZmqAddress(const Worker& w) {
  const config::WorkerConfig& c = w.config();
  if (!c.zmq_address.empty()) return c.zmq_address;
  return common::StrCat(pd::BracketHost(c.url.host), ":", c.bootstrap_port);
}

// What the prefill worker `w` may name in its kv_transfer_params (config.h, issue 27).
pd::TransferPeer TransferPeerOf(const Worker& w) {
  const config::WorkerConfig& c = w.config();
  pd::TransferPeer peer;
  peer.hosts = c.kv_transfer_hosts;
  if (peer.hosts.empty()) peer.hosts.push_back(c.url.host);
  peer.ports = c.kv_transfer_ports;
  if (peer.ports.empty()) {
    // vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT default, one port per DP rank.
    for (uint32_t r = 0; r < c.dp_size && 5600 + r <= 65535; ++r) {
      peer.ports.push_back(static_cast<uint16_t>(5600 + r));
    }
  }
  peer.engine_id = c.kv_transfer_engine_id;
  return peer;
}

std::string RandomHex(std::minstd_rand& rng) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (char& c : hex) c = kDigits[rng() & 15];
  return hex;
}

// simdjson reads this far past a body's end (the session reserves it for every body).
constexpr size_t kBodyPadding = 64;

uint64_t RandomRoom(std::minstd_rand& rng) {
  // minstd gives 31 bits a draw.
  const uint64_t a = rng(), b = rng(), c = rng();
  return ((a << 33) ^ (b << 2) ^ c) & ((uint64_t{1} << 63) - 1);
}

// What a concurrent prefill stage shares with the request beside it. Both hold it: when the
// gateway stops mid-request, its io_context destroys the suspended coroutines in no set order,
// and whichever goes last still unlinks its socket from the control and the client connection.
struct PrefillStage {
  PrefillStage(const net::any_io_executor& executor, ClientConnectionPtr client)
      : wake(executor), client(std::move(client)) {}
  FetchControl control;
  FetchControl decode_control;  // the decode fetch a failed prefill cancels, when it has one
  FetchResult result;
  bool done = false;
  net::steady_timer wake;
  ClientConnectionPtr client;  // the connection the prefill's fetch links its socket into
};
using PrefillStagePtr = std::shared_ptr<PrefillStage>;

// The prefill stage of a concurrent protocol: when it fails before the client saw a byte, the
// decode stage (waiting for a KV transfer that will not come) is cancelled: `cancel_decode`
// cancels the stage's decode_control, else the client connection's main worker socket.
net::awaitable<void> RunPrefill(Upstream& upstream, ThreadContext& tc, Exchange& ex,
                                UpstreamAttempt attempt, milliseconds timeout, uint64_t max_bytes,
                                PrefillStagePtr stage, bool cancel_decode) {
  stage->result = co_await upstream.Fetch(tc, ex, attempt, timeout, max_bytes, stage->control);
  const FetchResult& out = stage->result;
  if (!PrefillOk(out) && !out.cancelled && !ex.response.started()) {
    if (cancel_decode) {
      stage->decode_control.Cancel();
    } else {
      ex.conn.CancelUpstream();
    }
  }
  stage->done = true;
  stage->wake.cancel();
}

// Starts `RunPrefill` beside the caller, which Join()s it before it returns.
PrefillStagePtr SpawnPrefill(const net::any_io_executor& executor, Upstream& upstream,
                             ThreadContext& tc, Exchange& ex, const UpstreamAttempt& attempt,
                             milliseconds timeout, uint64_t max_bytes, bool outlive_client,
                             bool cancel_decode) {
  auto stage = std::make_shared<PrefillStage>(executor, ex.conn.shared_from_this());
  stage->control.outlive_client = outlive_client;
  net::co_spawn(executor,
                RunPrefill(upstream, tc, ex, attempt, timeout, max_bytes, stage, cancel_decode),
                net::detached);
  return stage;
}

// Waits until the concurrent prefill stage has ended.
net::awaitable<void> Join(PrefillStage& stage) {
  while (!stage.done) {
    stage.wake.expires_at(SteadyClock::time_point::max());
    co_await stage.wake.async_wait(kNoThrow);
  }
}

}  // namespace

net::awaitable<void> PdDispatcher::Dispatch(ThreadContext& tc, Exchange& ex, RoutePlan& plan) {
  const config::PdConfig& pdc = ex.snapshot->config->pd;
  if (pdc.protocol.empty() && pdc.model_protocols.empty()) {
    co_await retry_.Dispatch(tc, ex, plan);
    co_return;
  }
  // Where KV moves is kvgate's to say: a client's own kv_transfer_params or bootstrap fields
  // reach no worker, whichever way the request goes (issue 27).
  if (auto clean = pd::DropTransferFields(ex.body)) {
    spdlog::info(
        "request {}: dropped the client's P/D transfer fields (kv_transfer_params, bootstrap_*, "
        "disagg_prefill_dp_rank): only kvgate sets them",
        ex.request_id);
    metrics_.pd_client_fields.Get(tc.index, {})->Increment();
    ex.rewritten_body = *std::move(clean);
    ex.rewritten_body.reserve(ex.rewritten_body.size() + kBodyPadding);
    ex.body = ex.rewritten_body;
    ex.body_capacity = ex.rewritten_body.capacity();
  }
  PdChoice c = ChoosePd(planner_, plan, pdc, ex.model, /*commit=*/true, SteadyClock::now());
  if (c.mode != PdMode::kNotPd) {
    const std::string_view labels[] = {pd::PdProtocolName(c.protocol), PdDecisionLabel(c)};
    metrics_.pd_decisions.Get(tc.index, labels)->Increment();
    spdlog::debug("request {}: P/D {}: {}", ex.request_id, PdDecisionLabel(c), c.reason);
  }
  switch (c.mode) {
    case PdMode::kNotPd:
      co_await retry_.Dispatch(tc, ex, plan);
      co_return;
    case PdMode::kFallbackMixed:
      RestrictTo(plan, c.mixed_pool);
      co_await retry_.Dispatch(tc, ex, plan);
      co_return;
    case PdMode::kUnavailable:
      co_await WriteError(tc, ex, 503, c.reason, "service_unavailable", "no_healthy_worker");
      co_return;
    case PdMode::kDirect: {
      RestrictTo(plan, c.decode_pool);
      RetryDispatcher::Options o;
      o.first = std::move(c.decode);
      co_await retry_.Serve(tc, ex, plan, std::move(o));
      co_return;
    }
    case PdMode::kDisaggregate:
      co_await Disaggregate(tc, ex, plan, c);
      co_return;
  }
}

net::awaitable<void> PdDispatcher::Disaggregate(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                                PdChoice& c) {
  const config::Config& cfg = *ex.snapshot->config;
  RoutePlanner& planner = planner_;
  Decision& pre = *c.prefill;
  Worker& pw = *pre.worker;
  Worker& dw = *c.decode->worker;
  // The decode worker pulls the prompt's KV: it does not prefill it.
  dw.ReleasePrefill(c.decode->reservation);
  WatchForDisconnect(ex.conn);
  absl::Cleanup disarm = [&ex] { DisarmDisconnectWatch(ex.conn); };

  const std::string& host = pw.config().url.host;
  const uint16_t bootstrap_port = pw.config().bootstrap_port;
  std::string request_id = ex.request_id;
  absl::StatusOr<std::string> prefill_body;
  absl::StatusOr<std::string> decode_body = std::string();  // empty: the client's body
  // An Anthropic /v1/messages body has its own prefill shape; decode bodies are the client's
  // with kv_transfer_params, whatever the API.
  const auto vllm_prefill =
      plan.request != nullptr && plan.request->endpoint == ApiEndpoint::kMessages
          ? &pd::VllmMessagesPrefillBody
          : &pd::VllmPrefillBody;
  switch (c.protocol) {
    case PdProtocol::kVllmNixl:
      prefill_body = vllm_prefill(ex.body, pd::kNixlPrefillParams);
      break;
    case PdProtocol::kVllmP2pNccl:
      request_id = pd::P2pNcclRequestId(ZmqAddress(pw), ZmqAddress(dw), RandomHex(rng_));
      prefill_body = vllm_prefill(ex.body, "");
      break;
    case PdProtocol::kVllmMooncake:
      prefill_body = vllm_prefill(ex.body, pd::kMooncakePrefillParams);
      decode_body = pd::VllmDecodeBody(ex.body, pd::MooncakeDecodeParams(host, bootstrap_port));
      break;
    case PdProtocol::kSglangBootstrap: {
      // One room for both. With DP, a rank precise mode chose is named to its stage (and
      // prefill's to decode); unnamed, SGLang places the request by the room.
      const uint64_t room = RandomRoom(rng_);
      const int p_rank = pw.config().dp_size > 1 ? pre.dp_rank : -1;
      const int d_rank = dw.config().dp_size > 1 ? c.decode->dp_rank : -1;
      prefill_body = pd::SglangBody(ex.body, host, bootstrap_port, room, p_rank);
      decode_body = pd::SglangBody(ex.body, host, bootstrap_port, room, d_rank, p_rank);
      break;
    }
  }
  if (!prefill_body.ok() || !decode_body.ok()) {
    planner.Complete(plan, pre, RouteOutcome{});
    planner.Complete(plan, *c.decode, RouteOutcome{});
    const absl::Status& s = prefill_body.ok() ? decode_body.status() : prefill_body.status();
    co_await WriteError(tc, ex, 400, common::Sv(s.message()), "invalid_request_error",
                        "invalid_json");
    co_return;
  }
  UpstreamAttempt pa;
  pa.worker = &pw;
  pa.dp_rank = pre.dp_rank;
  pa.last = true;
  pa.body = &*prefill_body;
  pa.request_id = request_id;
  const milliseconds timeout(cfg.upstream.response_timeout_ms);
  const uint64_t max_bytes = cfg.limits.max_body_bytes;
  RetryDispatcher::Options decode;
  decode.first = std::move(c.decode);
  decode.request_id = request_id;
  decode.learn = false;
  c.decode.reset();

  if (c.protocol == PdProtocol::kVllmNixl || c.protocol == PdProtocol::kVllmP2pNccl) {
    FetchControl control;
    const FetchResult pr = co_await upstream_.Fetch(tc, ex, pa, timeout, max_bytes, control);
    FinishPrefill(tc, planner_, metrics_, plan, pre, pr);
    if (ex.conn.client_gone || !PrefillOk(pr)) {
      planner.Complete(plan, *decode.first, RouteOutcome{});
      if (ex.conn.client_gone) {
        RecordClientGone(ex);
        co_return;
      }
      co_await PrefillFailed(tc, ex, plan, c, pr);
      co_return;
    }
    std::string params;
    if (c.protocol == PdProtocol::kVllmNixl) {
      auto p = pd::KvTransferParamsOf(pr.body);
      if (p.ok()) {
        // Only params that name this prefill worker reach a decode worker: others would make
        // it connect where the answer says (issue 27). No decode is contacted.
        if (auto bad = pd::CheckTransferParams(*p, TransferPeerOf(pw))) {
          planner.Complete(plan, *decode.first, RouteOutcome{});
          spdlog::warn("request {}: refused the kv_transfer_params prefill worker {} returned: {}",
                       ex.request_id, pw.name(), bad->detail);
          Count(tc, metrics_.pd_transfer_rejected, bad->field);
          ex.worker = pw.name();
          ex.worker_id = pw.id();
          co_await WriteError(
              tc, ex, 502,
              common::StrCat("the prefill worker's kv_transfer_params do not name it: ",
                             bad->detail),
              "upstream_error", "pd_transfer_params_mismatch");
          co_return;
        }
        params = *std::move(p);
        decode_body = pd::VllmDecodeBody(ex.body, params);
      } else {
        spdlog::warn(
            "request {}: prefill on {} returned no usable kv_transfer_params ({}); the "
            "decode worker recomputes the prompt",
            ex.request_id, pw.name(), p.status().message());
      }
    }
    if (decode_body.ok() && !decode_body->empty()) decode.body = &*decode_body;
    // NIXL: any decode worker can pull from the prefill worker; P2P names this one in the id.
    decode.retry = c.protocol == PdProtocol::kVllmNixl;
    RestrictTo(plan, c.decode_pool);
    const RetryDispatcher::Result r = co_await retry_.Serve(tc, ex, plan, std::move(decode));
    if (r.got_head) {
      const std::string_view stage[] = {"decode_first_token"};
      metrics_.pd_stage.Get(tc.index, stage)->Observe(ex.ttfb_seconds);
    } else {
      if (!ex.conn.client_gone) Count(tc, metrics_.pd_failures, "decode");
      if (!params.empty()) co_await ReleaseHeld(tc, ex, c, params, request_id);
    }
    co_return;
  }

  // Mooncake and SGLang: both stages at once (prefill waits for decode's rendezvous).
  if (c.protocol == PdProtocol::kSglangBootstrap && pd::WantsInputLogprobs(ex.body)) {
    co_await MergeLogprobs(tc, ex, plan, c, pa, *decode.first, *decode_body);
    co_return;
  }
  if (!decode_body->empty()) decode.body = &*decode_body;
  decode.retry = false;  // the rendezvous names this decode worker
  decode.answer_unavailable = false;
  const PrefillStagePtr stage =
      SpawnPrefill(co_await net::this_coro::executor, upstream_, tc, ex, pa, timeout, max_bytes,
                   /*outlive_client=*/false, /*cancel_decode=*/false);
  RestrictTo(plan, c.decode_pool);
  const RetryDispatcher::Result r = co_await retry_.Serve(tc, ex, plan, std::move(decode));
  // Decode is over: a prefill still running is for nobody (its transfer, if any, completed).
  if (!stage->done) stage->control.Cancel();
  co_await Join(*stage);
  const FetchResult& pr = stage->result;
  FinishPrefill(tc, planner_, metrics_, plan, pre, pr);
  if (r.got_head) {
    const std::string_view stage[] = {"decode_first_token"};
    metrics_.pd_stage.Get(tc.index, stage)->Observe(ex.ttfb_seconds);
  }
  if (r.answered) co_return;
  if (!PrefillOk(pr) && !pr.cancelled) {
    co_await PrefillFailed(tc, ex, plan, c, pr);
    co_return;
  }
  Count(tc, metrics_.pd_failures, "decode");
  co_await WriteError(tc, ex, 503,
                      common::StrCat("the decode worker ", dw.name(),
                                     " could not serve the request: ", r.last_error),
                      "service_unavailable", "upstream_unavailable");
}

net::awaitable<void> PdDispatcher::MergeLogprobs(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                                 PdChoice& c, const UpstreamAttempt& pa,
                                                 Decision& dec, const std::string& decode_body) {
  const config::Config& cfg = *ex.snapshot->config;
  const milliseconds timeout(cfg.upstream.response_timeout_ms);
  const uint64_t max_bytes = cfg.limits.max_body_bytes;
  // Both answers whole: decode's is rewritten before the client sees it. The client's
  // disconnect ends the decode fetch, which ends the prefill.
  const PrefillStagePtr stage =
      SpawnPrefill(co_await net::this_coro::executor, upstream_, tc, ex, pa, timeout, max_bytes,
                   /*outlive_client=*/true, /*cancel_decode=*/true);
  UpstreamAttempt da;
  da.worker = dec.worker;
  da.dp_rank = dec.dp_rank;
  da.last = true;
  da.body = &decode_body;
  da.request_id = pa.request_id;
  const FetchResult dr =
      co_await upstream_.Fetch(tc, ex, da, timeout, max_bytes, stage->decode_control);
  if (!stage->done && !PrefillOk(dr)) stage->control.Cancel();
  co_await Join(*stage);
  const FetchResult& pr = stage->result;
  FinishPrefill(tc, planner_, metrics_, plan, *c.prefill, pr);
  RouteOutcome outcome;
  outcome.success = dr.answered;
  outcome.error_answer = !PrefillOk(dr) || !PrefillOk(pr);
  planner_.Complete(plan, dec, outcome);
  if (ex.conn.client_gone) {
    RecordClientGone(ex);
    co_return;
  }
  if (!PrefillOk(pr) && !pr.cancelled) {
    co_await PrefillFailed(tc, ex, plan, c, pr);
    co_return;
  }
  ex.worker = dec.worker->name();
  ex.worker_id = dec.worker->id();
  if (!dr.answered) {
    Count(tc, metrics_.pd_failures, "decode");
    co_await WriteError(tc, ex, dr.timed_out ? 504 : 502,
                        common::StrCat("decode failed: ", dr.reason), "upstream_error",
                        "decode_failed");
    co_return;
  }
  std::string body = dr.body;
  if (PrefillOk(dr) && PrefillOk(pr)) {
    if (auto merged = pd::MergeInputLogprobs(pr.body, dr.body); merged.ok()) {
      body = *std::move(merged);
    }
  }
  co_await WriteResponse(tc, ex, dr.status, "application/json", body);
}

net::awaitable<void> PdDispatcher::PrefillFailed(ThreadContext& tc, Exchange& ex, RoutePlan& plan,
                                                 PdChoice& c, const FetchResult& pr) {
  const config::Config& cfg = *ex.snapshot->config;
  const Worker& pw = *c.prefill->worker;
  if (pr.answered && pr.status >= 400 && pr.status < 500) {
    // The request itself was refused (a bad parameter, a prompt over the model's length): the
    // client gets the engine's own answer, as a mixed worker would have given it.
    ex.worker = pw.name();
    ex.worker_id = pw.id();
    co_await WriteResponse(tc, ex, pr.status, "application/json", pr.body);
    co_return;
  }
  const std::string why =
      pr.answered ? common::StrCat(pw.name(), " answered ", pr.status) : pr.reason;
  spdlog::warn("request {}: prefill on {} failed: {}", ex.request_id, pw.name(), why);
  if (cfg.pd.fallback_to_mixed && !c.mixed_pool.empty()) {
    const std::string_view labels[] = {pd::PdProtocolName(c.protocol), "fallback_mixed"};
    metrics_.pd_decisions.Get(tc.index, labels)->Increment();
    RestrictTo(plan, c.mixed_pool);
    co_await retry_.Dispatch(tc, ex, plan);
    co_return;
  }
  ex.worker = pw.name();
  ex.worker_id = pw.id();
  if (pr.timed_out) {
    co_await WriteError(tc, ex, 504, common::StrCat("prefill failed: ", why), "timeout",
                        "upstream_timeout");
  } else {
    co_await WriteError(tc, ex, 502, common::StrCat("prefill failed: ", why), "upstream_error",
                        "prefill_failed");
  }
}

net::awaitable<void> PdDispatcher::ReleaseHeld(ThreadContext& tc, Exchange& ex, PdChoice& c,
                                               const std::string& params,
                                               std::string_view request_id) {
  const config::Config& cfg = *ex.snapshot->config;
  // The prefill body shape (one token, not streamed) carrying prefill's own answer.
  auto body = pd::VllmPrefillBody(ex.body, params);
  if (!body.ok()) co_return;
  for (Worker* w : c.decode_pool) {
    if (!w->IsAvailable(SteadyClock::now())) continue;
    UpstreamAttempt a;
    a.worker = w;
    a.last = true;
    a.body = &*body;
    a.request_id = request_id;
    FetchControl control;
    control.outlive_client = true;
    const FetchResult r = co_await upstream_.Fetch(
        tc, ex, a, milliseconds(cfg.pd.release_timeout_ms), 1 << 20, control);
    if (PrefillOk(r)) {
      spdlog::info("request {}: the KV prefill held for a failed decode was pulled by {}",
                   ex.request_id, w->name());
      Count(tc, metrics_.pd_releases, "ok");
      co_return;
    }
  }
  spdlog::warn(
      "request {}: no decode worker freed the KV the prefill worker {} holds; the "
      "engine frees it at its abort timeout",
      ex.request_id, c.prefill->worker->name());
  Count(tc, metrics_.pd_releases, "failed");
}

}  // namespace kvgate::router
