#include "sim/worker_server.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "sim/chat_writer.h"
#include "sim/kv_events.h"
#include "sim/sim_metrics.h"
#include "sim/tokens.h"
#include "spdlog/spdlog.h"

namespace kvgate::sim {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

// A deterministic draw in [0, 1) per seed, worker and request: the injected faults.
double Uniform(uint64_t seed, uint64_t worker, uint64_t n) {
  const uint64_t in[4] = {seed, worker, n, 0xfa017};
  return static_cast<double>(XXH3_64bits(in, sizeof(in)) >> 11) * 0x1.0p-53;
}

std::string HeaderValue(const Request& req, std::string_view name) {
  auto it = req.find(beast::string_view(name.data(), name.size()));
  return it == req.end() ? std::string() : std::string(it->value());
}

}  // namespace

SimServer::SimServer(net::io_context& io, net::io_context& events_io, zmq::context_t& zmq_context,
                     const SimOptions& options, uint32_t index, const SimClock& clock,
                     std::shared_ptr<store::StoreClient> store)
    : io_(io),
      events_io_(events_io),
      zmq_(zmq_context),
      o_(options),
      index_(index),
      clock_(clock),
      store_(std::move(store)),
      acceptor_(io) {}

SimServer::~SimServer() = default;

absl::Status SimServer::Start() {
  for (uint32_t r = 0; r < o_.dp_size; ++r) {
    std::unique_ptr<KvEventPublisher> pub;
    if (!o_.kv_events_endpoint.empty()) {
      const uint32_t offset = index_ * o_.dp_size + r;
      PublisherOptions po;
      po.endpoint = OffsetEndpoint(o_.kv_events_endpoint, offset);
      if (!o_.kv_events_replay_endpoint.empty()) {
        po.replay_endpoint = OffsetEndpoint(o_.kv_events_replay_endpoint, offset);
      }
      po.topic = o_.kv_events_topic;
      po.force_bind = o_.kv_events_bind;
      po.buffer_steps = o_.kv_events_buffer_steps;
      po.encoding = o_.kv_events_encoding;
      po.drop_live_rate = o_.faults.drop_events_rate;
      po.drop_seed = o_.seed * 1000003 + offset;
      po.dp_rank = static_cast<int>(r);
      auto p = KvEventPublisher::Create(zmq_, std::move(po));
      if (!p.ok()) return p.status();
      pub = std::move(*p);
    }
    runners_.push_back(std::make_unique<EngineRunner>(io_, events_io_.get_executor(), o_, r, clock_,
                                                      std::move(pub)));
    if (store_) {
      // Each DP rank has its own GPU cache and connector; they share the store.
      StoreCacheOptions so;
      so.model = o_.model;
      so.block_size = o_.profile.block_size;
      so.bytes_per_token = o_.profile.store_bytes_per_token;
      so.max_blocks = o_.profile.max_model_len / o_.profile.block_size + 1;
      auto cache = StoreKvCache::Create(store_, so);
      if (!cache.ok()) return cache.status();
      runners_.back()->SetExternalCache(cache->get());
      caches_.push_back(std::move(*cache));
    }
  }
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(o_.host, ec);
  if (ec) return absl::InvalidArgumentError("bad --host " + o_.host);
  const uint16_t port = o_.base_port == 0 ? 0 : static_cast<uint16_t>(o_.base_port + index_);
  const tcp::endpoint ep(addr, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        common::StrCat("cannot listen on ", o_.host, ":", port, ": ", ec.message()));
  }
  port_ = acceptor_.local_endpoint().port();
  if (o_.role != PdRole::kMixed) {
    auto pd = PdAgent::Create(io_, o_, index_, clock_);
    if (!pd.ok()) return pd.status();
    pd_ = std::move(*pd);
  }
  net::co_spawn(io_, AcceptLoop(), net::detached);
  if (runners_[0]->publisher() && runners_[0]->publisher()->has_replay()) {
    replay_timer_.emplace(events_io_);
    ArmReplayTimer();
  }
  return absl::OkStatus();
}

void SimServer::ArmReplayTimer() {
  replay_timer_->expires_after(std::chrono::milliseconds(5));
  replay_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (auto& r : runners_) r->publisher()->ServiceReplay();
    ArmReplayTimer();
  });
}

net::awaitable<void> SimServer::AcceptLoop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(kNoThrow);
    if (ec) {
      if (ec == net::error::operation_aborted) co_return;
      continue;
    }
    net::co_spawn(io_, Session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> SimServer::Session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(256u << 20);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kNoThrow);
    if (ec) break;
    Request req = parser.release();
    const bool keep = co_await Handle(stream, req);
    if (!keep) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

net::awaitable<bool> SimServer::Send(beast::tcp_stream& stream, const Request& req,
                                     http::status status, std::string_view type, std::string body,
                                     const std::string& request_id) {
  http::response<http::string_body> res{status, req.version()};
  res.set(http::field::server, "kvgate-sim");
  res.set(http::field::content_type, beast::string_view(type.data(), type.size()));
  if (!request_id.empty()) res.set("x-request-id", request_id);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(stream, res, kNoThrow);
  co_return !ec && req.keep_alive();
}

net::awaitable<bool> SimServer::SendError(beast::tcp_stream& stream, const Request& req,
                                          http::status status, std::string_view message,
                                          std::string_view type, const std::string& request_id,
                                          ErrorStyle style) {
  co_return co_await Send(stream, req, status, "application/json",
                          ErrorBody(style, static_cast<int>(status), message, type), request_id);
}

net::awaitable<bool> SimServer::SendAnswer(beast::tcp_stream& stream, const Request& req,
                                           const HttpAnswer& answer,
                                           const std::string& request_id) {
  co_return co_await Send(stream, req, static_cast<http::status>(answer.status), "application/json",
                          answer.body, request_id);
}

bool SimServer::Starting() const {
  return o_.faults.slow_start_s > 0 && clock_.RealElapsed() < o_.faults.slow_start_s;
}

net::awaitable<bool> SimServer::Handle(beast::tcp_stream& stream, Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  if (get && path == "/health") {
    if (Starting()) {
      co_return co_await Send(stream, req, http::status::service_unavailable, "application/json",
                              "");
    }
    co_return co_await Send(stream, req, http::status::ok, "application/json", "");
  }
  if (get && path == "/v1/models")
    co_return co_await Send(stream, req, http::status::ok, "application/json", ModelsJson());
  if (get && path == "/metrics") {
    co_return co_await Send(stream, req, http::status::ok,
                            "text/plain; version=0.0.4; charset=utf-8",
                            RenderSimMetrics(o_, runners_, store_ != nullptr, pd_.get()));
  }
  if (get && path == "/debug/blocks") {
    co_return co_await Send(stream, req, http::status::ok, "application/json", BlocksJson());
  }
  if (post && path == "/reset_prefix_cache") {
    for (auto& r : runners_) r->ResetPrefixCache();
    co_return co_await Send(stream, req, http::status::ok, "application/json", "");
  }
  if (post && (path == "/v1/chat/completions" || path == "/v1/completions")) {
    co_return co_await Completion(stream, req,
                                  path == "/v1/completions" ? kvindex::ApiKind::kCompletions
                                                            : kvindex::ApiKind::kChatCompletions);
  }
  if (post && (path == "/v1/messages" || path == "/v1/responses")) {
    co_return co_await Agent(
        stream, req,
        path == "/v1/messages" ? kvindex::ApiKind::kMessages : kvindex::ApiKind::kResponses);
  }
  if (post && path == "/v1/messages/count_tokens") co_return co_await CountTokens(stream, req);
  const std::string_view query =
      path.size() < target.size() ? target.substr(path.size() + 1) : std::string_view();
  const std::string_view method(req.method_string().data(), req.method_string().size());
  if (auto answer = agents_.Stored(method, path, query)) {
    co_return co_await SendAnswer(stream, req, *answer, HeaderValue(req, "x-request-id"));
  }
  co_return co_await SendError(stream, req, http::status::not_found, "Not Found", "NotFoundError");
}

SimServer::Fault SimServer::DrawFault(const Request& req, uint64_t n) const {
  const std::string forced = HeaderValue(req, "x-sim-fault");
  if (forced == "error") return Fault::kError;
  if (forced == "hang") return Fault::kHang;
  if (forced == "close-mid") return Fault::kClose;
  const FaultOptions& f = o_.faults;
  if (f.error_rate + f.hang_rate + f.close_rate <= 0) return Fault::kNone;
  const double u = Uniform(o_.seed, index_, n);
  if (u < f.error_rate) return Fault::kError;
  if (u < f.error_rate + f.hang_rate) return Fault::kHang;
  if (u < f.error_rate + f.hang_rate + f.close_rate) return Fault::kClose;
  return Fault::kNone;
}

EngineRunner& SimServer::PickRunner(const Request& req, absl::Status* status) {
  const std::string rank = HeaderValue(req, "x-data-parallel-rank");
  if (!rank.empty()) {
    uint64_t r = 0;
    if (!common::ParseUint64(rank, &r) || r >= runners_.size()) {
      *status = absl::InvalidArgumentError(common::StrCat(
          "X-data-parallel-rank ", rank, " out of range [0, ", runners_.size(), ")"));
      return *runners_[0];
    }
    return *runners_[r];
  }
  EngineRunner* best = runners_[0].get();
  for (auto& r : runners_) {
    if (r->Load() < best->Load()) best = r.get();
  }
  return *best;
}

net::awaitable<SimServer::Admission> SimServer::Admit(beast::tcp_stream& stream, const Request& req,
                                                      ErrorStyle style) {
  Admission a;
  a.n = ++requests_;
  if (o_.faults.crash_after > 0 && a.n > o_.faults.crash_after) {
    spdlog::error("kvgate-sim: crashing on request {} (--crash-after {})", a.n,
                  o_.faults.crash_after);
    std::_Exit(3);
  }
  a.request_id = HeaderValue(req, "x-request-id");
  if (a.request_id.empty()) a.request_id = common::StrCat("sim-", index_, "-", a.n);
  if (Starting()) {
    a.ended =
        co_await SendError(stream, req, http::status::service_unavailable, "server is starting",
                           "ServiceUnavailableError", a.request_id, style);
    co_return a;
  }
  a.fault = DrawFault(req, a.n);
  if (a.fault == Fault::kError) {
    a.ended = co_await SendError(stream, req, http::status::internal_server_error, "injected fault",
                                 "InternalServerError", a.request_id, style);
  } else if (a.fault == Fault::kHang) {
    char sink[256];
    for (;;) {
      auto [ec, k] = co_await stream.async_read_some(net::buffer(sink), kNoThrow);
      if (ec) break;
    }
    a.ended = false;
  }
  co_return a;
}

net::awaitable<bool> SimServer::Completion(beast::tcp_stream& stream, const Request& req,
                                           kvindex::ApiKind api) {
  const Admission a = co_await Admit(stream, req, ErrorStyle::kOpenAi);
  if (a.ended) co_return *a.ended;
  ParsedRequest parsed;
  if (absl::Status s = parser_.Parse(req.body(), api, &parsed); !s.ok()) {
    co_return co_await SendError(stream, req, http::status::bad_request, std::string(s.message()),
                                 "BadRequestError", a.request_id);
  }
  ChatWriter writer(api == kvindex::ApiKind::kChatCompletions, a.request_id, o_.model,
                    parsed.include_usage);
  co_return co_await Generate(stream, req, a, ErrorStyle::kOpenAi, parsed, true, writer);
}

net::awaitable<bool> SimServer::Agent(beast::tcp_stream& stream, const Request& req,
                                      kvindex::ApiKind api) {
  const bool messages = api == kvindex::ApiKind::kMessages;
  const ErrorStyle style = messages ? ErrorStyle::kAnthropic : ErrorStyle::kOpenAi;
  const Admission a = co_await Admit(stream, req, style);
  if (a.ended) co_return *a.ended;
  AgentCall call =
      messages ? agents_.Messages(req.body(), false) : agents_.Responses(req.body(), a.request_id);
  if (call.error) co_return co_await SendAnswer(stream, req, *call.error, a.request_id);
  ParsedRequest parsed;
  if (absl::Status s = parser_.Parse(call.chat_body, kvindex::ApiKind::kChatCompletions, &parsed);
      !s.ok()) {
    co_return co_await SendError(stream, req, http::status::bad_request, std::string(s.message()),
                                 "BadRequestError", a.request_id, style);
  }
  parsed.stream = call.stream;
  parsed.include_usage = false;
  if (call.max_tokens) parsed.max_tokens = *call.max_tokens;
  auto writer = agents_.Writer(std::move(call), a.request_id,
                               static_cast<uint32_t>(parsed.prompt.size()), parsed.max_tokens, a.n);
  // vLLM's Anthropic layer hands kv_transfer_params to its chat pipeline (P/D through
  // /v1/messages); SGLang's drops the bootstrap fields, and Responses takes neither here.
  const bool pd_fields = messages && o_.pd_protocol != PdProtocol::kSglangBootstrap;
  co_return co_await Generate(stream, req, a, style, parsed, pd_fields, *writer);
}

net::awaitable<bool> SimServer::CountTokens(beast::tcp_stream& stream, const Request& req) {
  const std::string request_id = HeaderValue(req, "x-request-id");
  if (Starting()) {
    co_return co_await SendError(stream, req, http::status::service_unavailable,
                                 "server is starting", "ServiceUnavailableError", request_id,
                                 ErrorStyle::kAnthropic);
  }
  AgentCall call = agents_.Messages(req.body(), true);
  if (call.error) co_return co_await SendAnswer(stream, req, *call.error, request_id);
  ParsedRequest parsed;
  if (absl::Status s = parser_.Parse(call.chat_body, kvindex::ApiKind::kChatCompletions, &parsed);
      !s.ok()) {
    co_return co_await SendError(stream, req, http::status::bad_request, std::string(s.message()),
                                 "BadRequestError", request_id, ErrorStyle::kAnthropic);
  }
  if (parsed.model != o_.model) {
    co_return co_await SendError(stream, req, http::status::not_found,
                                 common::StrCat("The model `", parsed.model, "` does not exist."),
                                 "NotFoundError", request_id, ErrorStyle::kAnthropic);
  }
  co_return co_await Send(stream, req, http::status::ok, "application/json",
                          AgentApi::CountTokensBody(static_cast<uint32_t>(parsed.prompt.size())),
                          request_id);
}

net::awaitable<bool> SimServer::Generate(beast::tcp_stream& stream, const Request& req,
                                         const Admission& a, ErrorStyle style,
                                         ParsedRequest& parsed, bool pd_fields, AnswerWriter& w) {
  const std::string& request_id = a.request_id;
  Generation g;
  if (auto ended = co_await Reject(stream, req, request_id, style, parsed, pd_fields, &g.pd)) {
    co_return *ended;
  }
  absl::Status rank_status;
  EngineRunner& runner = PickRunner(req, &rank_status);
  if (!rank_status.ok()) {
    co_return co_await SendError(stream, req, http::status::bad_request,
                                 std::string(rank_status.message()), "BadRequestError", request_id,
                                 style);
  }
  g.pending = std::make_shared<Pending>(stream.get_executor());
  co_await Submit(runner, a.n, parsed, &g);
  if (!parsed.stream) co_return co_await AnswerWhole(stream, req, a, g, w);
  co_return co_await AnswerStream(stream, req, a, parsed.max_tokens, g, w);
}

net::awaitable<std::optional<bool>> SimServer::Reject(beast::tcp_stream& stream, const Request& req,
                                                      const std::string& request_id,
                                                      ErrorStyle style, ParsedRequest& parsed,
                                                      bool pd_fields, PdRequest* pd) {
  if (!parsed.model.empty() && parsed.model != o_.model) {
    co_return co_await SendError(stream, req, http::status::not_found,
                                 common::StrCat("The model `", parsed.model, "` does not exist."),
                                 "NotFoundError", request_id, style);
  }
  if (pd_fields) {
    auto parsed_pd = ParsePdRequest(o_.role, o_.pd_protocol, req.body(), request_id);
    if (!parsed_pd.ok()) {
      co_return co_await SendError(stream, req, http::status::bad_request,
                                   std::string(parsed_pd.status().message()), "BadRequestError",
                                   request_id, style);
    }
    *pd = std::move(*parsed_pd);
  }
  if (pd->prefill_only) parsed.max_tokens = 1;
  const Profile& prof = o_.profile;
  const uint64_t total = parsed.prompt.size() + uint64_t{parsed.max_tokens};
  if (total > prof.max_model_len) {
    co_return co_await SendError(
        stream, req, http::status::bad_request,
        common::StrCat("This model's maximum context length is ", prof.max_model_len,
                       " tokens. However, you requested ", total, " tokens (", parsed.prompt.size(),
                       " in the messages, ", parsed.max_tokens, " in the completion)."),
        "BadRequestError", request_id, style);
  }
  if ((total + prof.block_size - 1) / prof.block_size > prof.num_gpu_blocks) {
    co_return co_await SendError(stream, req, http::status::bad_request,
                                 common::StrCat("request needs more KV blocks than the ",
                                                prof.num_gpu_blocks, " the engine has"),
                                 "BadRequestError", request_id, style);
  }
  co_return std::nullopt;
}

net::awaitable<void> SimServer::Submit(EngineRunner& runner, uint64_t engine_id,
                                       ParsedRequest& parsed, Generation* g) {
  g->runner = &runner;
  g->engine_id = engine_id;
  EngineRequest er;
  er.id = engine_id;
  er.prompt = std::move(parsed.prompt);
  er.max_tokens = parsed.max_tokens;
  // P/D: a prefill keeps the prompt's blocks for its decode; a decode first pulls them.
  g->hold = g->pd.stage == PdStage::kPrefill;
  er.hold = g->hold;
  if (g->hold) g->held_prompt = er.prompt;
  double arrived = -1;
  if (g->pd.stage == PdStage::kDecode) {
    arrived = clock_.Now();
    er.remote_tokens = co_await pd_->Pull(g->pd, er.prompt);
    if (er.remote_tokens > 0) co_await pd_->AwaitTransferTime(arrived, er.remote_tokens);
  }
  runner.Submit(g->pending, std::move(er), arrived);
}

void SimServer::Drop(const Generation& g) {
  g.runner->Abort(g.engine_id);
  if (g.hold) g.runner->ReleaseHeld(g.engine_id);
}

UsageCounts SimServer::Usage(const Generation& g) const {
  const Pending& p = *g.pending;
  return UsageCounts{p.prompt_tokens, static_cast<uint32_t>(p.tokens.size()), p.cached_tokens,
                     StoreTokens(p), o_.engine_ttft_usage ? p.engine_ttft_s : -1};
}

net::awaitable<bool> SimServer::AnswerWhole(beast::tcp_stream& stream, const Request& req,
                                            const Admission& a, Generation& g, AnswerWriter& w) {
  Pending& pending = *g.pending;
  while (!pending.finished) {
    pending.wake.expires_at(SteadyTime::max());
    co_await pending.wake.async_wait(kNoThrow);
  }
  std::string kv_params = "null";
  if (g.hold) {
    g.hold = false;
    kv_params = co_await FinishPrefill(g.pd, *g.runner, g.engine_id, g.held_prompt);
  }
  std::string body = w.Whole(pending.tokens, Usage(g), kv_params);
  if (a.fault == Fault::kClose) co_return false;  // Connection closed, no answer.
  co_return co_await Send(stream, req, http::status::ok, "application/json", std::move(body),
                          a.request_id);
}

net::awaitable<bool> SimServer::AnswerStream(beast::tcp_stream& stream, const Request& req,
                                             const Admission& a, uint32_t max_tokens, Generation& g,
                                             AnswerWriter& w) {
  http::response<http::empty_body> head{http::status::ok, req.version()};
  head.set(http::field::server, "kvgate-sim");
  head.set(http::field::content_type, "text/event-stream; charset=utf-8");
  head.set(http::field::cache_control, "no-cache");
  head.set("x-request-id", a.request_id);
  head.chunked(true);
  head.keep_alive(req.keep_alive());
  http::response_serializer<http::empty_body> hsr{head};
  auto [hec, hn] = co_await http::async_write_header(stream, hsr, kNoThrow);
  if (hec) {
    Drop(g);
    co_return false;
  }
  Pending& pending = *g.pending;
  std::string out;
  w.Begin(&out);
  size_t sent = 0;
  const size_t cut = a.fault == Fault::kClose ? std::max<size_t>(1, max_tokens / 2)
                                              : std::numeric_limits<size_t>::max();
  for (;;) {
    while (sent < pending.tokens.size() && sent < cut) {
      const bool last = pending.finished && sent + 1 == pending.tokens.size();
      w.Token(pending.tokens[sent], last, &out);
      ++sent;
    }
    const bool done = pending.finished && sent == pending.tokens.size();
    if (done && g.hold) {
      g.hold = false;
      (void)co_await FinishPrefill(g.pd, *g.runner, g.engine_id, g.held_prompt);
    }
    if (done) w.End(Usage(g), &out);
    // vLLM sends a stream's first event (the role, message_start) with its first token: only
    // the head goes before the prefill.
    if (!out.empty() && (sent > 0 || done)) {
      auto [ec, k] =
          co_await net::async_write(stream, http::make_chunk(net::buffer(out)), kNoThrow);
      out.clear();
      if (ec) {
        Drop(g);
        co_return false;
      }
    }
    if (sent >= cut) {
      Drop(g);
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream.socket().close(ignored);
      co_return false;
    }
    if (done) break;
    // Tokens that arrived while the write was in flight need no wait.
    if (sent < pending.tokens.size() || pending.finished) continue;
    pending.wake.expires_at(SteadyTime::max());
    co_await pending.wake.async_wait(kNoThrow);
  }
  auto [ec, k] = co_await net::async_write(stream, http::make_chunk_last(), kNoThrow);
  co_return !ec && req.keep_alive();
}

net::awaitable<std::string> SimServer::FinishPrefill(const PdRequest& pd, EngineRunner& runner,
                                                     uint64_t engine_id,
                                                     const std::vector<uint32_t>& prompt) {
  auto held = pd_->Hold(pd.key, runner, engine_id, prompt);
  if (pd.answer_after_release) co_await pd_->AwaitRelease(held);
  co_return o_.pd_protocol == PdProtocol::kVllmNixl ? pd_->KvTransferParams(*held, pd.key)
                                                    : std::string("null");
}

std::string SimServer::ModelsJson() const {
  std::string m;
  common::AppendJsonString(m, o_.model);
  return common::StrCat("{\"object\":\"list\",\"data\":[{\"id\":", m,
                        ",\"object\":\"model\",\"created\":0,\"owned_by\":\"vllm\",\"root\":", m,
                        ",\"parent\":null,\"max_model_len\":", o_.profile.max_model_len,
                        ",\"permission\":[]}]}");
}

std::string SimServer::BlocksJson() const {
  std::string out = "{\"ranks\":[";
  for (size_t i = 0; i < runners_.size(); ++i) {
    const KvCoordinator& kv = runners_[i]->engine().kv_cache();
    const BlockPool& pool = kv.pool(0);
    common::StrAppend(&out, i ? "," : "", "{\"rank\":", i, ",\"GPU\":[",
                      common::StrJoin(pool.CachedHashes(Medium::kGpu), ","), "],\"CPU\":[",
                      common::StrJoin(pool.CachedHashes(Medium::kCpu), ","), "]");
    // A hybrid profile's groups (GPU and CPU above are group 0's).
    if (!o_.profile.groups.empty()) {
      out += ",\"groups\":[";
      for (size_t g = 0; g < kv.num_groups(); ++g) {
        common::StrAppend(&out, g ? "," : "", "{\"group_idx\":", g, ",\"kind\":\"",
                          KvGroupKindName(kv.spec(g).kind), "\",\"GPU\":[",
                          common::StrJoin(kv.pool(g).CachedHashes(Medium::kGpu), ","), "]}");
      }
      out += "]";
    }
    out += "}";
  }
  return out + "]}";
}

std::optional<uint32_t> SimServer::StoreTokens(const Pending& p) const {
  return store_ ? std::optional<uint32_t>(p.store_tokens) : std::nullopt;
}

}  // namespace kvgate::sim
