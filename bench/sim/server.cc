#include "bench/sim/server.h"

#include <unistd.h>
#include <xxhash.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "bench/sim/engine.h"
#include "bench/sim/engine_runner.h"
#include "bench/sim/kv_events.h"
#include "bench/sim/pd_agent.h"
#include "bench/sim/sim_metrics.h"
#include "bench/sim/store_cache.h"
#include "bench/sim/tokens.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvindex/canonicalize.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace kvgate::sim {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

double Uniform(uint64_t seed, uint64_t worker, uint64_t n) {
  const uint64_t in[4] = {seed, worker, n, 0xfa017};
  return static_cast<double>(XXH3_64bits(in, sizeof(in)) >> 11) * 0x1.0p-53;
}

std::string HeaderValue(const Request& req, std::string_view name) {
  auto it = req.find(beast::string_view(name.data(), name.size()));
  return it == req.end() ? std::string() : std::string(it->value());
}

// With a store (--store), prompt_tokens_details also says how many of the cached tokens were
// loaded from it (`kv_store_tokens`, kvgate-sim's own field: vLLM reports them only in its
// external prefix-cache metrics), so that a replay can count them per request.
std::string UsageJson(uint32_t prompt, uint32_t completion, uint32_t cached,
                      std::optional<uint32_t> store) {
  return common::StrCat("{\"prompt_tokens\":", prompt, ",\"total_tokens\":", prompt + completion,
                        ",\"completion_tokens\":", completion,
                        ",\"prompt_tokens_details\":{\"cached_tokens\":", cached,
                        store ? common::StrCat(",\"kv_store_tokens\":", *store) : "", "}}");
}

// What a completion request asked for.
struct Parsed {
  kvindex::ApiKind api = kvindex::ApiKind::kChatCompletions;
  bool stream = false;
  bool include_usage = false;
  uint32_t max_tokens = 0;
  std::string model;
  std::vector<uint32_t> prompt;
};

enum class Fault { kNone, kError, kHang, kClose };

// One simulated vLLM server: an HTTP port and dp_size engines. Thread-compatible (io thread).
class SimServer {
 public:
  SimServer(net::io_context& io, zmq::context_t& zmq_context, const SimOptions& options,
            uint32_t index, const SimClock& clock, std::shared_ptr<store::StoreClient> store)
      : io_(io),
        zmq_(zmq_context),
        o_(options),
        index_(index),
        clock_(clock),
        store_(std::move(store)),
        acceptor_(io) {}

  absl::Status Start() {
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
      runners_.push_back(std::make_unique<EngineRunner>(io_, o_, r, clock_, std::move(pub)));
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
      replay_timer_.emplace(io_);
      ArmReplayTimer();
    }
    return absl::OkStatus();
  }

  uint16_t port() const { return port_; }
  const std::vector<std::unique_ptr<EngineRunner>>& runners() const { return runners_; }
  uint64_t requests() const { return requests_; }
  uint16_t bootstrap_port() const { return pd_ ? pd_->port() : 0; }

 private:
  // Replay requests are otherwise answered only after a publish; poll them while idle too.
  void ArmReplayTimer() {
    replay_timer_->expires_after(std::chrono::milliseconds(5));
    replay_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      for (auto& r : runners_) r->publisher()->ServiceReplay();
      ArmReplayTimer();
    });
  }

  net::awaitable<void> AcceptLoop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(kNoThrow);
      if (ec) {
        if (ec == net::error::operation_aborted) co_return;
        continue;
      }
      net::co_spawn(io_, Session(std::move(socket)), net::detached);
    }
  }

  net::awaitable<void> Session(tcp::socket socket) {
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

  net::awaitable<bool> Send(beast::tcp_stream& stream, const Request& req, http::status status,
                            std::string_view type, std::string body,
                            const std::string& request_id = "") {
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

  net::awaitable<bool> SendError(beast::tcp_stream& stream, const Request& req, http::status status,
                                 std::string_view message, std::string_view type,
                                 const std::string& request_id = "") {
    co_return co_await Send(
        stream, req, status, "application/json",
        common::OpenAiErrorBody(message, type, std::to_string(static_cast<int>(status))),
        request_id);
  }

  bool Starting() const {
    return o_.faults.slow_start_s > 0 && clock_.RealElapsed() < o_.faults.slow_start_s;
  }

  net::awaitable<bool> Handle(beast::tcp_stream& stream, Request& req) {
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
    co_return co_await SendError(stream, req, http::status::not_found, "Not Found",
                                 "NotFoundError");
  }

  // Reads the fields the engine needs; the prompt goes through kvgate's canonicaliser and
  // BytesToTokens4, standing in for the chat template and tokenizer.
  absl::Status Parse(const std::string& body, kvindex::ApiKind api, Parsed* out) {
    out->api = api;
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    if (json_.parse(body).get(doc) || doc.get(obj)) {
      return absl::InvalidArgumentError("request body is not a JSON object");
    }
    bool b = false;
    if (!obj["stream"].get(b)) out->stream = b;
    simdjson::dom::object so;
    if (!obj["stream_options"].get(so) && !so["include_usage"].get(b)) out->include_usage = b;
    std::string_view model;
    if (!obj["model"].get(model)) out->model = std::string(model);
    out->max_tokens = o_.default_max_tokens;
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      simdjson::dom::element e;
      if (obj[key].get(e) || e.is_null()) continue;
      uint64_t v = 0;
      if (e.get(v) || v == 0 || v > o_.profile.max_model_len) {
        return absl::InvalidArgumentError(common::StrCat(key, " must be a positive integer"));
      }
      out->max_tokens = static_cast<uint32_t>(v);
    }
    KVGATE_RETURN_IF_ERROR(canonicalizer_.Canonicalize(body, api, &canonical_));
    if (canonical_.prompts.size() != 1) {
      return absl::InvalidArgumentError("kvgate-sim serves exactly one prompt per request");
    }
    const kvindex::CanonicalPrompt& p = canonical_.prompts[0];
    out->prompt.clear();
    if (p.kind == kvindex::PromptKind::kTokens) {
      out->prompt = p.tokens;
    } else {
      AppendBytesToTokens4(p.bytes, &out->prompt);
    }
    if (out->prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
    return absl::OkStatus();
  }

  Fault DrawFault(const Request& req, uint64_t n) const {
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

  EngineRunner& PickRunner(const Request& req, absl::Status* status) {
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

  net::awaitable<bool> Completion(beast::tcp_stream& stream, Request& req, kvindex::ApiKind api) {
    const uint64_t n = ++requests_;
    if (o_.faults.crash_after > 0 && n > o_.faults.crash_after) {
      spdlog::error("kvgate-sim: crashing on request {} (--crash-after {})", n,
                    o_.faults.crash_after);
      std::_Exit(3);
    }
    std::string request_id = HeaderValue(req, "x-request-id");
    if (request_id.empty()) request_id = common::StrCat("sim-", index_, "-", n);
    if (Starting()) {
      co_return co_await SendError(stream, req, http::status::service_unavailable,
                                   "server is starting", "ServiceUnavailableError", request_id);
    }
    const Fault fault = DrawFault(req, n);
    if (fault == Fault::kError) {
      co_return co_await SendError(stream, req, http::status::internal_server_error,
                                   "injected fault", "InternalServerError", request_id);
    }
    if (fault == Fault::kHang) {
      char sink[256];
      for (;;) {
        auto [ec, k] = co_await stream.async_read_some(net::buffer(sink), kNoThrow);
        if (ec) break;
      }
      co_return false;
    }
    Parsed parsed;
    if (absl::Status s = Parse(req.body(), api, &parsed); !s.ok()) {
      co_return co_await SendError(stream, req, http::status::bad_request, std::string(s.message()),
                                   "BadRequestError", request_id);
    }
    if (!parsed.model.empty() && parsed.model != o_.model) {
      co_return co_await SendError(stream, req, http::status::not_found,
                                   common::StrCat("The model `", parsed.model, "` does not exist."),
                                   "NotFoundError", request_id);
    }
    auto pd = ParsePdRequest(o_.role, o_.pd_protocol, req.body(), request_id);
    if (!pd.ok()) {
      co_return co_await SendError(stream, req, http::status::bad_request,
                                   std::string(pd.status().message()), "BadRequestError",
                                   request_id);
    }
    if (pd->prefill_only) parsed.max_tokens = 1;
    const Profile& prof = o_.profile;
    const uint64_t total = parsed.prompt.size() + uint64_t{parsed.max_tokens};
    if (total > prof.max_model_len) {
      co_return co_await SendError(
          stream, req, http::status::bad_request,
          common::StrCat("This model's maximum context length is ", prof.max_model_len,
                         " tokens. However, you requested ", total, " tokens (",
                         parsed.prompt.size(), " in the messages, ", parsed.max_tokens,
                         " in the completion)."),
          "BadRequestError", request_id);
    }
    if ((total + prof.block_size - 1) / prof.block_size > prof.num_gpu_blocks) {
      co_return co_await SendError(stream, req, http::status::bad_request,
                                   common::StrCat("request needs more KV blocks than the ",
                                                  prof.num_gpu_blocks, " the engine has"),
                                   "BadRequestError", request_id);
    }
    absl::Status rank_status;
    EngineRunner& runner = PickRunner(req, &rank_status);
    if (!rank_status.ok()) {
      co_return co_await SendError(stream, req, http::status::bad_request,
                                   std::string(rank_status.message()), "BadRequestError",
                                   request_id);
    }
    auto pending = std::make_shared<Pending>(stream.get_executor());
    const uint64_t engine_id = n;
    EngineRequest er;
    er.id = engine_id;
    er.prompt = std::move(parsed.prompt);
    er.max_tokens = parsed.max_tokens;
    // P/D: a prefill keeps the prompt's blocks for its decode; a decode first pulls them.
    bool hold_pending = pd->stage == PdStage::kPrefill;
    er.hold = hold_pending;
    const std::vector<uint32_t> held_prompt = hold_pending ? er.prompt : std::vector<uint32_t>();
    double arrived = -1;
    if (pd->stage == PdStage::kDecode) {
      arrived = clock_.Now();
      er.remote_tokens = co_await pd_->Pull(*pd, er.prompt);
      if (er.remote_tokens > 0) co_await pd_->AwaitTransferTime(arrived, er.remote_tokens);
    }
    runner.Submit(pending, std::move(er), arrived);
    // A request that ends before its KV is handed to the agent must not keep its blocks.
    auto drop = [&] {
      runner.Abort(engine_id);
      if (hold_pending) runner.ReleaseHeld(engine_id);
    };

    const bool chat = api == kvindex::ApiKind::kChatCompletions;
    const std::string id = common::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    std::string prefix;  // Shared head of every chunk.
    common::StrAppend(&prefix, "{\"id\":\"", id, "\",\"object\":\"",
                      chat ? "chat.completion.chunk" : "text_completion",
                      "\",\"created\":", created, ",\"model\":");
    common::AppendJsonString(prefix, o_.model);

    if (!parsed.stream) {
      while (!pending->finished) {
        pending->wake.expires_at(SteadyTime::max());
        co_await pending->wake.async_wait(kNoThrow);
      }
      std::string kv_params = "null";
      if (hold_pending) {
        hold_pending = false;
        kv_params = co_await FinishPrefill(*pd, runner, engine_id, held_prompt);
      }
      std::string text;
      for (uint32_t t : pending->tokens) text += TokenText(t);
      std::string body = common::StrCat("{\"id\":\"", id, "\",\"object\":\"",
                                        chat ? "chat.completion" : "text_completion",
                                        "\",\"created\":", created, ",\"model\":");
      common::AppendJsonString(body, o_.model);
      body += ",\"choices\":[{\"index\":0,";
      if (chat) {
        body += "\"message\":{\"role\":\"assistant\",\"content\":";
        common::AppendJsonString(body, text);
        body += ",\"tool_calls\":[]},";
      } else {
        body += "\"text\":";
        common::AppendJsonString(body, text);
        body += ",";
      }
      common::StrAppend(
          &body, "\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],",
          "\"usage\":",
          UsageJson(pending->prompt_tokens, static_cast<uint32_t>(pending->tokens.size()),
                    pending->cached_tokens, StoreTokens(*pending)),
          ",\"prompt_logprobs\":null,\"kv_transfer_params\":", kv_params, "}");
      if (fault == Fault::kClose) co_return false;  // Connection closed, no answer.
      co_return co_await Send(stream, req, http::status::ok, "application/json", std::move(body),
                              request_id);
    }

    http::response<http::empty_body> head{http::status::ok, req.version()};
    head.set(http::field::server, "kvgate-sim");
    head.set(http::field::content_type, "text/event-stream; charset=utf-8");
    head.set(http::field::cache_control, "no-cache");
    head.set("x-request-id", request_id);
    head.chunked(true);
    head.keep_alive(req.keep_alive());
    http::response_serializer<http::empty_body> hsr{head};
    auto [hec, hn] = co_await http::async_write_header(stream, hsr, kNoThrow);
    if (hec) {
      drop();
      co_return false;
    }
    std::string out;
    if (chat) {
      common::StrAppend(&out, "data: ", prefix,
                        ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                        "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    }
    size_t sent = 0;
    const size_t cut = fault == Fault::kClose ? std::max<size_t>(1, parsed.max_tokens / 2)
                                              : std::numeric_limits<size_t>::max();
    for (;;) {
      while (sent < pending->tokens.size() && sent < cut) {
        const bool last = pending->finished && sent + 1 == pending->tokens.size();
        const char* fin = last ? "\"length\"" : "null";
        const std::string text = TokenText(pending->tokens[sent]);
        if (chat) {
          common::StrAppend(&out, "data: ", prefix,
                            ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"", text,
                            "\"},\"logprobs\":null,\"finish_reason\":", fin,
                            last ? ",\"stop_reason\":null" : "", "}]}\n\n");
        } else {
          common::StrAppend(&out, "data: ", prefix, ",\"choices\":[{\"index\":0,\"text\":\"", text,
                            "\",\"logprobs\":null,\"finish_reason\":", fin,
                            ",\"stop_reason\":null}]}\n\n");
        }
        ++sent;
      }
      const bool done = pending->finished && sent == pending->tokens.size();
      if (done && hold_pending) {
        hold_pending = false;
        (void)co_await FinishPrefill(*pd, runner, engine_id, held_prompt);
      }
      if (done) {
        if (parsed.include_usage) {
          common::StrAppend(
              &out, "data: ", prefix, ",\"choices\":[],\"usage\":",
              UsageJson(pending->prompt_tokens, static_cast<uint32_t>(pending->tokens.size()),
                        pending->cached_tokens, StoreTokens(*pending)),
              "}\n\n");
        }
        out += "data: [DONE]\n\n";
      }
      if (!out.empty()) {
        auto [ec, k] =
            co_await net::async_write(stream, http::make_chunk(net::buffer(out)), kNoThrow);
        out.clear();
        if (ec) {
          drop();
          co_return false;
        }
      }
      if (sent >= cut) {
        drop();
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream.socket().close(ignored);
        co_return false;
      }
      if (done) break;
      // Tokens that arrived while the write was in flight need no wait.
      if (sent < pending->tokens.size() || pending->finished) continue;
      pending->wake.expires_at(SteadyTime::max());
      co_await pending->wake.async_wait(kNoThrow);
    }
    auto [ec, k] = co_await net::async_write(stream, http::make_chunk_last(), kNoThrow);
    co_return !ec && req.keep_alive();
  }

  // Hands a finished prefill's KV to the agent; @return the response's kv_transfer_params.
  // sglang-bootstrap answers only once the decode took the KV (or it timed out).
  net::awaitable<std::string> FinishPrefill(const PdRequest& pd, EngineRunner& runner,
                                            uint64_t engine_id,
                                            const std::vector<uint32_t>& prompt) {
    auto held = pd_->Hold(pd.key, runner, engine_id, prompt);
    if (pd.answer_after_release) co_await pd_->AwaitRelease(held);
    co_return o_.pd_protocol == PdProtocol::kVllmNixl ? pd_->KvTransferParams(*held, pd.key)
                                                      : std::string("null");
  }

  std::string ModelsJson() const {
    std::string m;
    common::AppendJsonString(m, o_.model);
    return common::StrCat("{\"object\":\"list\",\"data\":[{\"id\":", m,
                          ",\"object\":\"model\",\"created\":0,\"owned_by\":\"vllm\",\"root\":", m,
                          ",\"parent\":null,\"max_model_len\":", o_.profile.max_model_len,
                          ",\"permission\":[]}]}");
  }

  std::string BlocksJson() const {
    std::string out = "{\"ranks\":[";
    for (size_t i = 0; i < runners_.size(); ++i) {
      const BlockPool& pool = runners_[i]->engine().pool();
      common::StrAppend(&out, i ? "," : "", "{\"rank\":", i, ",\"GPU\":[",
                        common::StrJoin(pool.CachedHashes(Medium::kGpu), ","), "],\"CPU\":[",
                        common::StrJoin(pool.CachedHashes(Medium::kCpu), ","), "]}");
    }
    return out + "]}";
  }

  // The usage's kv_store_tokens: only with a store.
  std::optional<uint32_t> StoreTokens(const Pending& p) const {
    return store_ ? std::optional<uint32_t>(p.store_tokens) : std::nullopt;
  }

  net::io_context& io_;
  zmq::context_t& zmq_;
  const SimOptions& o_;
  const uint32_t index_;
  const SimClock& clock_;
  std::shared_ptr<store::StoreClient> store_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<StoreKvCache>> caches_;  // Before runners_: outlive the engines.
  std::vector<std::unique_ptr<EngineRunner>> runners_;
  std::unique_ptr<PdAgent> pd_;  // P/D roles only; after runners_: it frees their held blocks.
  std::optional<net::steady_timer> replay_timer_;
  kvindex::Canonicalizer canonicalizer_;
  kvindex::CanonicalRequest canonical_;
  simdjson::dom::parser json_;
  uint64_t requests_ = 0;
};

}  // namespace

struct SimProcess::Impl {
  explicit Impl(SimOptions o)
      : options(std::move(o)), clock(std::chrono::steady_clock::now(), options.time_scale), io(1) {}
  SimOptions options;
  SimClock clock;
  zmq::context_t zmq_context{1};
  net::io_context io;  // Declared after the ZMQ context and before the servers.
  std::shared_ptr<store::StoreClient> store;  // Shared by every engine (--store).
  std::vector<std::unique_ptr<SimServer>> servers;
  std::thread thread;
};

SimProcess::SimProcess(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimProcess::~SimProcess() {
  Stop();
  impl_->servers.clear();
}

absl::Status SimProcess::Start() {
  Impl& s = *impl_;
  if (!s.options.store.empty()) {
    store::StoreClientOptions co;
    co.master = s.options.store;
    co.name = common::StrCat("sim-", ::getpid(), "-", s.options.base_port);
    co.timeout = std::chrono::milliseconds(500);  // A dead store must not stall the engines.
    co.in_flight_wait = std::chrono::milliseconds(200);
    auto client = store::StoreClient::Create(co);
    if (!client.ok()) return client.status();
    s.store = std::move(*client);
    spdlog::info("kvgate-sim: engines use the store at {}", s.options.store);
  }
  for (uint32_t i = 0; i < s.options.workers; ++i) {
    auto server = std::make_unique<SimServer>(s.io, s.zmq_context, s.options, i, s.clock, s.store);
    if (absl::Status st = server->Start(); !st.ok()) return st;
    spdlog::info("kvgate-sim worker {} listening on {}:{} ", i, s.options.host, server->port());
    s.servers.push_back(std::move(server));
  }
  return absl::OkStatus();
}

void SimProcess::Run() {
  net::signal_set signals(impl_->io, SIGINT, SIGTERM);
  signals.async_wait([this](const boost::system::error_code& ec, int) {
    if (!ec) impl_->io.stop();
  });
  impl_->io.run();
}

void SimProcess::StartThread() {
  impl_->thread = std::thread([this] {
    auto guard = net::make_work_guard(impl_->io);
    impl_->io.run();
  });
}

void SimProcess::Stop() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::vector<uint16_t> SimProcess::ports() const {
  std::vector<uint16_t> out;
  for (const auto& s : impl_->servers) out.push_back(s->port());
  return out;
}

std::vector<uint16_t> SimProcess::bootstrap_ports() const {
  std::vector<uint16_t> out;
  if (impl_->options.role == PdRole::kMixed) return out;
  for (const auto& s : impl_->servers) out.push_back(s->bootstrap_port());
  return out;
}

std::vector<EventEndpoints> SimProcess::event_endpoints() const {
  std::vector<EventEndpoints> out;
  for (uint32_t i = 0; i < impl_->servers.size(); ++i) {
    for (const auto& r : impl_->servers[i]->runners()) {
      if (KvEventPublisher* p = r->publisher()) {
        out.push_back({i, r->rank(), p->endpoint(), p->replay_endpoint()});
      }
    }
  }
  return out;
}

std::string SimProcess::Summary() const {
  uint64_t requests = 0;
  uint64_t steps = 0;
  uint64_t tokens = 0;
  double max_lag = 0;
  double sim_time = 0;
  for (const auto& s : impl_->servers) {
    requests += s->requests();
    for (const auto& r : s->runners()) {
      steps += r->engine().counters().steps;
      tokens += r->engine().counters().generation_tokens;
      max_lag = std::max(max_lag, r->max_lag());
      sim_time = std::max(sim_time, r->sim_now());
    }
  }
  return common::StrCat("requests=", requests, " steps=", steps, " generated_tokens=", tokens,
                        " sim_time_s=", sim_time, " real_time_s=", impl_->clock.RealElapsed(),
                        " max_lag_s=", max_lag);
}

}  // namespace kvgate::sim
