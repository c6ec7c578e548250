#include "bench/replay/replayer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "bench/replay/bounds.h"
#include "bench/replay/floor.h"
#include "bench/replay/prediction.h"
#include "bench/replay/sse.h"
#include "common/strings.h"
#include "common/url.h"
#include "fmt/format.h"

namespace kvgate::replay {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using common::StrCat;

// Errors come back as values; Asio never throws on the data path.
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Asks the kernel to ACK the next segments at once. A server without TCP_NODELAY (FakeUpstream,
// some Python servers) otherwise holds each small SSE event until our delayed ACK (~40 ms on
// Linux), which would show up as TTFT and TPOT. Quick-ack mode is not sticky, so this is set
// before every read.
void QuickAck(tcp::socket& socket) {
#ifdef TCP_QUICKACK
  const int one = 1;
  ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#endif
}

// True when the peer closed (or reset) an idle connection: a read would return EOF now.
bool PeerClosed(tcp::socket& socket) {
  char c;
  const ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Tracks how many streams are open per worker and the maximum seen.
struct WorkerLoad {
  std::map<std::string, uint64_t> current;
  std::map<std::string, uint64_t> max;
  void Open(const std::string& w) {
    const uint64_t n = ++current[w];
    uint64_t& m = max[w];
    m = std::max(m, n);
  }
  void Close(const std::string& w) { --current[w]; }
};

// What a stream returned besides the record: the text (the next turn's history) and the
// Responses id (the next turn's previous_response_id).
struct Answer {
  std::string text;
  std::string response_id;
};

StreamDialect DialectOf(Api api) {
  if (api == Api::kMessages) return StreamDialect::kAnthropic;
  if (api == Api::kResponses) return StreamDialect::kResponses;
  return StreamDialect::kOpenAi;
}

// One keep-alive connection to the target.
struct Connection {
  explicit Connection(net::any_io_executor ex) : stream(ex) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool reused = false;
};

// The shared state of one replay: client, pool, records, stop conditions. Lives on the stack
// of RunOn(); every coroutine runs on its single-threaded io_context. Thread-compatible.
class Session {
 public:
  Session(net::io_context& ioc, const ReplayOptions& options, common::HttpUrl url)
      : ioc_(ioc), options_(options), url_(std::move(url)), start_(Clock::now()) {
    if (options_.duration_s > 0) deadline_ = start_ + FromSeconds(options_.duration_s);
  }

  Clock::time_point start() const { return start_; }
  const ReplayOptions& options() const { return options_; }
  std::vector<RequestRecord>& records() { return records_; }
  RequestSample& sample() { return sample_; }
  const std::map<std::string, uint64_t>& max_concurrent() const { return load_.max; }
  uint64_t conversations_started() const { return conversations_; }
  void CountConversation() { ++conversations_; }

  // True once no new request may be sent.
  bool Stopping() const {
    if (options_.max_requests > 0 && sent_ >= options_.max_requests) return true;
    return deadline_ && Clock::now() >= *deadline_;
  }

  // Sleeps until `when` in slices, returning early (false) when the replay is stopping.
  net::awaitable<bool> SleepUntil(Clock::time_point when) {
    net::steady_timer timer(ioc_);
    while (Clock::now() < when) {
      if (Stopping()) co_return false;
      timer.expires_at(std::min(when, Clock::now() + std::chrono::milliseconds(100)));
      co_await timer.async_wait(kNoThrow);
    }
    co_return !Stopping();
  }

  // Reserves the right to send one request; false when stopping.
  bool TryStartRequest() {
    if (Stopping()) return false;
    ++sent_;
    return true;
  }

  // Sends one streaming request and fills `*rec` (send time, latencies, usage, worker,
  // errors); the generated text and response id go to `*answer` if non-null; with `blocks`,
  // the request's TTFT floor. Never throws.
  net::awaitable<void> Send(const ApiRequest& request, RequestRecord* rec, Answer* answer,
                            const BoundsRequest* blocks = nullptr) {
    ++in_flight_;
    const Clock::time_point t0 = Clock::now();
    rec->send_s = Seconds(t0 - start_);
    http::request<http::string_body> req{http::verb::post, StrCat(url_.base_path, request.path),
                                         11};
    req.set(http::field::host, url_.Authority());
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.set(http::field::user_agent, "kvgate-replay");
    for (const auto& [k, v] : request.headers) req.set(k, v);
    for (const auto& [k, v] : options_.headers) req.set(k, v);  // --header wins.
    req.body() = request.body;
    req.keep_alive(!options_.connection_per_request);
    req.prepare_payload();
    if (options_.request_sample_size > 0) Sample(req, request);
    co_await Exchange(req, t0, rec, answer, blocks);
    rec->e2e_s = Seconds(Clock::now() - t0);
    --in_flight_;
    ++finished_;
    if (!rec->ok()) ++failed_;
    output_tokens_ += rec->completion_tokens;
    prompt_tokens_ += rec->prompt_tokens;
    cached_tokens_ += rec->cached_tokens;
    store_tokens_ += rec->store_tokens;
  }

  // Writes the progress line (stderr), at most 4 times a second until `*done`; with `lines`, a
  // whole line every 5 s instead (for a log or a pipe, where \r does not redraw).
  net::awaitable<void> Progress(const bool* done, bool lines) {
    net::steady_timer timer(ioc_);
    if (lines) {
      Clock::time_point next = start_ + std::chrono::seconds(5);
      while (!*done) {
        timer.expires_at(std::min(next, Clock::now() + std::chrono::milliseconds(250)));
        co_await timer.async_wait(kNoThrow);
        if (*done || Clock::now() < next) continue;
        next += std::chrono::seconds(5);
        const double cached = prompt_tokens_ ? 100.0 * cached_tokens_ / prompt_tokens_ : 0.0;
        const double store = prompt_tokens_ ? 100.0 * store_tokens_ / prompt_tokens_ : 0.0;
        fmt::print(stderr,
                   "progress: {:.0f} s, {} requests done ({} errors), {} in flight, {:.1f}% of "
                   "prompt tokens cached ({:.1f}% from a store)\n",
                   Seconds(Clock::now() - start_), finished_, failed_, in_flight_, cached, store);
        std::fflush(stderr);
      }
      co_return;
    }
    while (!*done) {
      timer.expires_after(std::chrono::milliseconds(250));
      co_await timer.async_wait(kNoThrow);
      const double elapsed = Seconds(Clock::now() - start_);
      fmt::print(stderr,
                 "\r[{:7.1f}s] sent {}  done {}  errors {}  in flight {}  conversations {}  "
                 "{:.0f} out tok/s   ",
                 elapsed, sent_, finished_, failed_, in_flight_, conversations_,
                 elapsed > 0 ? output_tokens_ / elapsed : 0.0);
      std::fflush(stderr);
    }
    fmt::print(stderr, "\n");
  }

 private:
  // Offers the request as sent (with --header) to the sample, without the transport's headers.
  void Sample(const http::request<http::string_body>& req, const ApiRequest& request) {
    ApiRequest sent{request.path, {}, request.body};
    for (const auto& field : req) {
      const http::field f = field.name();
      if (f == http::field::host || f == http::field::content_length ||
          f == http::field::connection) {
        continue;
      }
      sent.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    sample_.Offer(sent);
  }

  // A pooled connection (unless `fresh`) whose peer has not closed it, or a new one.
  net::awaitable<std::unique_ptr<Connection>> Acquire(bool fresh, beast::error_code* ec) {
    while (!fresh && !idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      if (PeerClosed(conn->stream.socket())) continue;
      conn->reused = true;
      co_return conn;
    }
    if (endpoints_.empty()) {
      tcp::resolver resolver(ioc_);
      auto [rec, results] =
          co_await resolver.async_resolve(url_.host, std::to_string(url_.port), kNoThrow);
      if (rec) {
        *ec = rec;
        co_return nullptr;
      }
      for (const auto& r : results) endpoints_.push_back(r.endpoint());
    }
    auto conn = std::make_unique<Connection>(ioc_.get_executor());
    conn->stream.expires_after(std::chrono::seconds(10));
    auto [cec, ep] = co_await conn->stream.async_connect(endpoints_, kNoThrow);
    if (cec) {
      *ec = cec;
      co_return nullptr;
    }
    conn->stream.socket().set_option(tcp::no_delay(true));
    co_return conn;
  }

  net::awaitable<void> Exchange(http::request<http::string_body>& req, Clock::time_point t0,
                                RequestRecord* rec, Answer* answer, const BoundsRequest* blocks) {
    const auto timeout = FromSeconds(options_.request_timeout_s);
    for (int attempt = 0; attempt < 2; ++attempt) {
      beast::error_code ec;
      // A retry never takes another pooled connection: it may be just as stale.
      std::unique_ptr<Connection> conn =
          co_await Acquire(/*fresh=*/attempt > 0 || options_.connection_per_request, &ec);
      if (!conn) {
        rec->error = StrCat("connect: ", ec.message());
        co_return;
      }
      const bool may_retry = conn->reused && attempt == 0;
      if (blocks && attempt == 0) {
        // Counted as the request goes out: new connections may reorder requests sent at once.
        rec->compulsory_tokens = compulsory_.Add(*blocks);
        rec->floor_s = FloorSeconds({options_.floor_prefill_rate, options_.floor_context_factor,
                                     options_.floor_step_s, options_.floor_step_tokens},
                                    rec->compulsory_tokens, blocks->input_tokens);
      }
      conn->stream.expires_after(timeout);
      auto [wec, wn] = co_await http::async_write(conn->stream, req, kNoThrow);
      if (wec) {
        if (may_retry) continue;  // A stale keep-alive connection; try a fresh one.
        rec->error = StrCat("write: ", wec.message());
        co_return;
      }
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(boost::none);
      QuickAck(conn->stream.socket());
      auto [hec, hn] =
          co_await http::async_read_header(conn->stream, conn->buffer, parser, kNoThrow);
      if (hec) {
        if (may_retry && hn == 0) continue;
        rec->error = StrCat("read header: ", hec.message());
        co_return;
      }
      const auto& head = parser.get();
      rec->status = static_cast<int>(head.result_int());
      if (auto it = head.find("X-Kvgate-Worker"); it != head.end()) {
        rec->worker = std::string(it->value());
      }
      if (auto it = head.find("X-Kvgate-Prediction"); it != head.end()) {
        ParsePredictionHeader({it->value().data(), it->value().size()}, &rec->prediction);
      }
      if (auto it = head.find("X-Kvgate-Predicted-Cached-Tokens"); it != head.end()) {
        uint64_t n = 0;
        if (common::ParseUint64({it->value().data(), it->value().size()}, &n)) {
          rec->predicted_cached_tokens = static_cast<int64_t>(std::min<uint64_t>(n, INT64_MAX));
        }
      }
      const bool success = rec->status >= 200 && rec->status < 300;
      load_.Open(rec->worker);
      co_await ReadBody(conn.get(), parser, success, t0, rec, answer);
      load_.Close(rec->worker);
      if (rec->ok() && parser.is_done() && parser.keep_alive() &&
          !options_.connection_per_request) {
        conn->stream.expires_never();
        idle_.push_back(std::move(conn));
      }
      co_return;
    }
  }

  net::awaitable<void> ReadBody(Connection* conn, http::response_parser<http::buffer_body>& parser,
                                bool success, Clock::time_point t0, RequestRecord* rec,
                                Answer* answer) {
    SseSplitter splitter;
    std::string error_body;
    uint64_t content_events = 0;
    bool saw_done = false;
    auto on_data = [&](std::string_view data) {
      StreamEvent ev;
      if (!events_.Parse(data, &ev)) return;
      if (ev.done) saw_done = true;
      if (ev.token) {
        if (rec->ttft_s < 0) rec->ttft_s = Seconds(Clock::now() - t0);
        ++content_events;
        if (answer) answer->text.append(ev.content);
      }
      if (ev.usage) {
        // Each usage overrides the counts it carries (Anthropic's last one may lack some).
        rec->usage = true;
        if (ev.usage_fields & kUsagePrompt) rec->prompt_tokens = ev.prompt_tokens;
        if (ev.usage_fields & kUsageCompletion) rec->completion_tokens = ev.completion_tokens;
        if (ev.usage_fields & kUsageCached) rec->cached_tokens = ev.cached_tokens;
        if (ev.usage_fields & kUsageStore) rec->store_tokens = ev.store_tokens;
        if (ev.usage_fields & kUsageEngineTtft) rec->engine_ttft_s = ev.engine_ttft_s;
      }
      if (answer && !ev.response_id.empty()) answer->response_id = ev.response_id;
      if (!ev.error.empty() && rec->error.empty()) rec->error = StrCat("stream: ", ev.error);
    };
    char buf[16384];
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof(buf);
      QuickAck(conn->stream.socket());
      auto [ec, n] = co_await http::async_read_some(conn->stream, conn->buffer, parser, kNoThrow);
      if (ec == http::error::need_buffer) ec = {};
      const size_t got = sizeof(buf) - parser.get().body().size;
      if (success) {
        splitter.Feed(std::string_view(buf, got), on_data);
      } else if (error_body.size() < 4096) {
        error_body.append(buf, std::min<size_t>(got, 4096 - error_body.size()));
      }
      if (ec) {
        if (ec == http::error::end_of_stream && (saw_done || !success)) break;
        if (rec->error.empty()) rec->error = StrCat("read body: ", ec.message());
        co_return;
      }
    }
    if (success) splitter.Finish(on_data);
    if (!success) {
      if (rec->error.empty()) rec->error = StrCat("HTTP ", rec->status, ": ", error_body);
    } else if (!rec->usage) {
      rec->completion_tokens = content_events;
    }
  }

  net::io_context& ioc_;
  const ReplayOptions& options_;
  common::HttpUrl url_;
  Clock::time_point start_;
  std::optional<Clock::time_point> deadline_;
  std::vector<tcp::endpoint> endpoints_;
  std::vector<std::unique_ptr<Connection>> idle_;
  StreamEventParser events_{DialectOf(options_.api)};
  WorkerLoad load_;
  std::vector<RequestRecord> records_;
  RequestSample sample_{options_.request_sample_size};
  CompulsoryTokens compulsory_;
  uint64_t sent_ = 0;
  uint64_t finished_ = 0;
  uint64_t failed_ = 0;
  uint64_t in_flight_ = 0;
  uint64_t output_tokens_ = 0;
  uint64_t prompt_tokens_ = 0;  // Of finished requests, for the progress lines.
  uint64_t cached_tokens_ = 0;
  uint64_t store_tokens_ = 0;
  uint64_t conversations_ = 0;
};

// Counts outstanding child coroutines; Wait() resumes when all are done.
class WaitGroup {
 public:
  explicit WaitGroup(net::any_io_executor ex) : timer_(ex, Clock::time_point::max()) {}
  void Add() { ++pending_; }
  void Done() {
    if (--pending_ == 0) timer_.cancel();
  }
  net::awaitable<void> Wait() {
    while (pending_ > 0) co_await timer_.async_wait(kNoThrow);
  }

 private:
  net::steady_timer timer_;
  uint64_t pending_ = 0;
};

// --- open loop (Mooncake) ---

net::awaitable<void> SendMooncake(Session& s, const MooncakeRequest& r, uint64_t index,
                                  WaitGroup& group) {
  RequestRecord rec;
  rec.conversation = "mooncake";
  rec.index = index;
  const ApiRequest request = SingleTurnRequest(s.options().api, MooncakePrompt(r), r.output_length,
                                               s.options().body, StrCat("mooncake/", index));
  std::optional<BoundsRequest> blocks;
  if (s.options().floor_prefill_rate > 0) blocks = MooncakeBoundsRequest(r);
  co_await s.Send(request, &rec, nullptr, blocks ? &*blocks : nullptr);
  s.records().push_back(std::move(rec));
  group.Done();
}

net::awaitable<void> RunOpenLoop(Session& s, const std::vector<MooncakeRequest>& trace) {
  auto ex = co_await net::this_coro::executor;
  std::vector<size_t> order(trace.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return trace[a].timestamp_ms < trace[b].timestamp_ms;
  });
  WaitGroup group(ex);
  const double t0_ms = order.empty() ? 0 : trace[order.front()].timestamp_ms;
  for (size_t i : order) {
    const double offset_s = (trace[i].timestamp_ms - t0_ms) / 1000.0 / s.options().speedup;
    const bool go = co_await s.SleepUntil(s.start() + FromSeconds(offset_s));
    if (!go) break;
    if (!s.TryStartRequest()) break;
    group.Add();
    net::co_spawn(ex, SendMooncake(s, trace[i], i, group), net::detached);
  }
  co_await group.Wait();
}

// --- closed loop (agentic) ---

net::awaitable<void> RunConversation(Session& s, const AgentSession& session, std::string ns,
                                     std::string id);

// A sub-agent starts `t` after its parent did and then runs like any conversation.
net::awaitable<void> RunSubagent(Session& s, const AgentSession& sub, std::string ns,
                                 std::string id, Clock::time_point at) {
  const bool go = co_await s.SleepUntil(at);
  if (go) co_await RunConversation(s, sub, std::move(ns), std::move(id));
}

net::awaitable<void> RunConversation(Session& s, const AgentSession& session, std::string ns,
                                     std::string id) {
  auto ex = co_await net::this_coro::executor;
  const Clock::time_point started = Clock::now();
  const double speedup = s.options().speedup;
  WaitGroup subagents(ex);
  for (const auto& sub : session.subagents) {
    subagents.Add();
    const Clock::time_point at = started + FromSeconds(sub.t / speedup);
    const size_t slash = sub.id.rfind('/');
    std::string sub_id =
        StrCat(id, slash == std::string::npos ? "/" + sub.id : sub.id.substr(slash));
    net::co_spawn(ex, RunSubagent(s, sub, ns, std::move(sub_id), at),
                  [&subagents](std::exception_ptr) { subagents.Done(); });
  }
  AgentConversation conversation(ns, session.PrefixBlocks(), s.options().share_prefix);
  // Sub-agents share their root's agent session (`ns`), as Claude Code's Task sub-agents do.
  AgentClient client(s.options().api, MakeAgentIdentity(ns, id), s.options().body);
  Clock::time_point previous_end = started;
  for (size_t k = 0; k < session.requests.size(); ++k) {
    const AgentRequest& r = session.requests[k];
    if (k > 0) {
      double think = r.think_time;
      if (s.options().max_think_time_s > 0) think = std::min(think, s.options().max_think_time_s);
      const bool go = co_await s.SleepUntil(previous_end + FromSeconds(think / speedup));
      if (!go) break;
    }
    if (!s.TryStartRequest()) break;
    RequestRecord rec;
    rec.conversation = id;
    rec.index = k;
    const ApiRequest request = client.NextTurn(conversation.NextTurn(r), r.out);
    Answer answer;
    std::optional<BoundsRequest> blocks;
    if (s.options().floor_prefill_rate > 0) {
      blocks = AgenticFloorRequest(r, ns, session.PrefixBlocks(), s.options().share_prefix);
    }
    co_await s.Send(request, &rec, &answer, blocks ? &*blocks : nullptr);
    conversation.SetAnswer(std::move(answer.text));
    client.SetResponseId(rec.ok() ? std::move(answer.response_id) : std::string());
    s.records().push_back(std::move(rec));
    previous_end = Clock::now();
  }
  co_await subagents.Wait();
}

uint64_t ConversationCount(const std::vector<AgentSession>& sessions,
                           const ReplayOptions& options) {
  if (options.max_conversations > 0) return options.max_conversations;
  if (options.loop) return UINT64_MAX;
  return sessions.size();
}

// The namespace of instance `i`: the session id, suffixed on repeats so that replaying a file
// twice does not share its private blocks.
std::string InstanceNamespace(const std::vector<AgentSession>& sessions, uint64_t i) {
  const AgentSession& session = sessions[i % sessions.size()];
  const uint64_t round = i / sessions.size();
  return round == 0 ? session.id : StrCat(session.id, "#", round);
}

net::awaitable<void> RunSlot(Session& s, const std::vector<AgentSession>& sessions, uint64_t slot,
                             uint64_t* next, uint64_t total) {
  const ReplayOptions& o = s.options();
  const double delay = o.conversations > 0 ? o.ramp_up_s * slot / o.conversations : 0;
  const bool go = co_await s.SleepUntil(s.start() + FromSeconds(delay));
  if (!go) co_return;
  while (*next < total && !s.Stopping()) {
    const uint64_t i = (*next)++;
    s.CountConversation();
    const std::string ns = InstanceNamespace(sessions, i);
    co_await RunConversation(s, sessions[i % sessions.size()], ns, ns);
  }
}

net::awaitable<void> RunClosedLoop(Session& s, const std::vector<AgentSession>& sessions) {
  auto ex = co_await net::this_coro::executor;
  const uint64_t total = ConversationCount(sessions, s.options());
  const uint64_t slots =
      std::max<uint64_t>(1, std::min<uint64_t>(s.options().conversations, total));
  uint64_t next = 0;
  WaitGroup group(ex);
  for (uint64_t slot = 0; slot < slots; ++slot) {
    group.Add();
    net::co_spawn(ex, RunSlot(s, sessions, slot, &next, total),
                  [&group](std::exception_ptr) { group.Done(); });
  }
  co_await group.Wait();
}

// Runs `body` with a Session on a fresh io_context and builds the report.
template <typename Body>
absl::StatusOr<ReplayResult> RunOn(const ReplayOptions& options, Body body) {
  auto url = common::ParseHttpUrl(options.target);
  if (!url.ok()) return url.status();
  if (!(options.speedup > 0)) return absl::InvalidArgumentError("--speedup must be > 0");
  net::io_context ioc(1);
  Session session(ioc, options, *url);
  bool done = false;
  net::co_spawn(ioc, body(session), [&](std::exception_ptr) { done = true; });
  const bool progress = options.progress < 0 ? ::isatty(STDERR_FILENO) != 0 : options.progress;
  if (progress) net::co_spawn(ioc, session.Progress(&done, options.progress == 2), net::detached);
  ioc.run();
  ReplayResult result;
  result.report = BuildReport(session.records(), session.max_concurrent(),
                              Seconds(Clock::now() - session.start()));
  result.report.target = url->ToString();
  result.report.trace = options.trace;
  result.report.api = std::string(ApiName(options.api));
  result.report.responses_store = options.api == Api::kResponses && options.body.responses_store;
  result.report.conversations = session.conversations_started();
  result.report.floor.prefill_tokens_per_s = options.floor_prefill_rate;
  result.records = std::move(session.records());
  result.sampled_requests = std::move(session.sample().kept());
  return result;
}

double EstimateDuration(const AgentSession& session) {
  double end = 0;
  for (const auto& r : session.requests) end = std::max(end, r.t + r.api_time);
  for (const auto& sub : session.subagents) end = std::max(end, sub.t + EstimateDuration(sub));
  return end;
}

}  // namespace

std::vector<PlannedConversation> PlanConversations(const std::vector<AgentSession>& sessions,
                                                   const ReplayOptions& options) {
  std::vector<PlannedConversation> plan;
  if (sessions.empty()) return plan;
  uint64_t total = ConversationCount(sessions, options);
  const uint64_t slots = std::max<uint64_t>(1, std::min(options.conversations, total));
  if (total == UINT64_MAX) {
    // Looping until a duration: plan enough rounds to fill every slot at least once.
    total =
        sessions.size() * std::max<uint64_t>(1, (slots + sessions.size() - 1) / sessions.size());
  }
  std::vector<double> free_at(slots);
  for (uint64_t i = 0; i < slots; ++i) {
    // Ramp-up offsets are wall time; the plan is in trace time.
    free_at[i] = options.ramp_up_s * i / slots * options.speedup;
  }
  for (uint64_t i = 0; i < total; ++i) {
    auto it = std::min_element(free_at.begin(), free_at.end());
    const AgentSession& session = sessions[i % sessions.size()];
    plan.push_back({&session, InstanceNamespace(sessions, i), *it});
    *it += EstimateDuration(session);
  }
  return plan;
}

absl::StatusOr<ReplayResult> RunMooncake(const std::vector<MooncakeRequest>& trace,
                                         const ReplayOptions& flags) {
  ReplayOptions options = flags;
  if (options.api == Api::kDefault) options.api = Api::kCompletions;
  auto result = RunOn(options, [&](Session& s) { return RunOpenLoop(s, trace); });
  if (!result.ok()) return result;
  result->report.mode = "open-loop";
  if (options.compute_bounds) {
    // Only the requests the replay may send: the first --max-requests, within --duration.
    std::vector<MooncakeRequest> sent;
    double first_ms = INFINITY;
    for (const auto& r : trace) first_ms = std::min(first_ms, r.timestamp_ms);
    for (const auto& r : trace) {
      const double offset_s = (r.timestamp_ms - first_ms) / 1000.0 / options.speedup;
      if (options.duration_s <= 0 || offset_s < options.duration_s) sent.push_back(r);
    }
    std::stable_sort(sent.begin(), sent.end(),
                     [](const auto& a, const auto& b) { return a.timestamp_ms < b.timestamp_ms; });
    if (options.max_requests > 0 && sent.size() > options.max_requests) {
      sent.resize(options.max_requests);
    }
    const auto requests = MooncakeBoundsRequests(sent);
    result->report.bounds = SummarizeBounds(requests, options.fleet_capacity_tokens);
  }
  return result;
}

absl::StatusOr<ReplayResult> RunAgentic(const std::vector<AgentSession>& sessions,
                                        const ReplayOptions& flags) {
  // Agentic turns are conversations: completions is for Mooncake traces only.
  ReplayOptions options = flags;
  if (options.api == Api::kDefault || options.api == Api::kCompletions) options.api = Api::kChat;
  if (sessions.empty()) return absl::InvalidArgumentError("no agentic sessions to replay");
  if (options.loop && options.max_conversations == 0 && options.duration_s <= 0 &&
      options.max_requests == 0) {
    return absl::InvalidArgumentError("--loop needs --duration or --max-requests");
  }
  auto result = RunOn(options, [&](Session& s) { return RunClosedLoop(s, sessions); });
  if (!result.ok()) return result;
  result->report.mode = "closed-loop";
  if (options.compute_bounds) {
    const auto requests =
        AgenticBoundsRequests(PlanConversations(sessions, options), options.share_prefix);
    result->report.bounds = SummarizeBounds(requests, options.fleet_capacity_tokens);
  }
  return result;
}

absl::StatusOr<ReplayResult> RunReplay(const ReplayOptions& options) {
  if (options.trace.empty()) return absl::InvalidArgumentError("--trace is required");
  if (IsMooncakePath(options.trace)) {
    auto trace = LoadMooncakeFile(options.trace);
    if (!trace.ok()) return trace.status();
    return RunMooncake(*trace, options);
  }
  auto sessions = LoadAgentSessions(options.trace);
  if (!sessions.ok()) return sessions.status();
  return RunAgentic(*sessions, options);
}

}  // namespace kvgate::replay
