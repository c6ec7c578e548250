#include "router/control/precise_prober.h"

#include <atomic>
#include <map>
#include <random>

#include "common/json_util.h"
#include "common/strings.h"
#include "kvindex/agent_chat.h"
#include "kvindex/canonicalize.h"
#include "net/http_client.h"
#include "net/tls_socket.h"
#include "spdlog/spdlog.h"
#include "tokenizer/hf_tokenizer.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;
using Clock = SteadyClock;

constexpr milliseconds kTick{50};
constexpr milliseconds kMatchPoll{20};
constexpr std::chrono::seconds kRetryAfterFailure{30};
constexpr std::chrono::seconds kMetricsEvery{1};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct PreciseProber::Impl {
  Impl(net::io_context& ioc, GatewayState& state) : ioc(ioc), state(state) {}

  // What the loop remembers per worker id between ticks.
  struct Track {
    bool was_available = false;
    bool probing = false;   // a probe is out (a first one, or a re-check of a verified worker)
    bool silenced = false;  // Unverified because its events stopped (probe off only).
    uint64_t restarts = 0;
    uint64_t routed_at_last_event = 0;
    Clock::time_point last_message{};
    Clock::time_point verified_at{};
    Clock::time_point retry_at{};
  };

  net::awaitable<void> Loop() {
    net::steady_timer timer(ioc);
    Clock::time_point next_metrics{};
    while (!stopped) {
      const auto snapshot = state.snapshot();
      const auto& cfg = snapshot->config;
      const WorkerList& workers = snapshot->workers;
      Reconfigure(workers, cfg->stores);
      const auto now = Clock::now();
      const auto sources = state.precise.Sources();
      for (const auto& w : workers) {
        if (w->config().kv_events) Tick(w, *cfg, sources, now);
      }
      if (now >= next_metrics) {
        state.precise.RefreshMetrics(workers);
        next_metrics = now + kMetricsEvery;
      }
      timer.expires_after(kTick);
      co_await timer.async_wait(kNoThrow);
    }
  }

  // Subscribes again when the workers, or the model a worker serves, changed.
  void Reconfigure(const WorkerList& workers, const std::vector<config::StoreConfig>& stores) {
    std::string key;
    for (const auto& st : stores)
      common::StrAppend(&key, "store:", st.name, "=", st.model, "@", st.kv_events.endpoint, ";");
    for (const auto& w : workers) {
      if (!w->config().kv_events) continue;
      const auto models = w->Models();
      common::StrAppend(&key, reinterpret_cast<uintptr_t>(w.get()), "=",
                        models.empty() ? "" : models.front(), ";");
    }
    if (key == configured_key) return;
    configured_key = std::move(key);
    state.precise.Configure(workers, stores);
  }

  void Tick(const WorkerSharedPtr& w, const config::Config& cfg,
            const std::vector<kvevents::SourceStatus>& sources, Clock::time_point now) {
    Track& t = tracks[w->id()];
    PreciseMode& precise = state.precise;
    const bool available = w->IsAvailable(now);
    const uint64_t restarts = precise.Restarts(*w);
    if (restarts != t.restarts) {
      t.restarts = restarts;
      if (!t.probing) precise.SetState(*w, PreciseState::kPending, "its engine restarted");
    }
    if (available && !t.was_available && !t.probing &&
        (w->precise_state() == PreciseState::kVerified ||
         w->precise_state() == PreciseState::kUnverified)) {
      precise.SetState(*w, PreciseState::kPending, "it became available again");
    }
    t.was_available = available;
    Clock::time_point last_message{};
    for (const auto& s : sources) {
      if (s.source.holder.worker == w->id()) last_message = std::max(last_message, s.last_message);
    }
    if (last_message > t.last_message) {
      t.last_message = last_message;
      t.routed_at_last_event = w->routed();
      if (t.silenced && w->precise_state() == PreciseState::kUnverified) {
        t.silenced = false;
        precise.SetState(*w, PreciseState::kPending, "its events resumed");
      }
    }
    const auto models = w->Models();
    switch (w->precise_state()) {
      case PreciseState::kPending:
        if (!available || t.probing || models.empty() || now < t.retry_at) break;
        if (!cfg.routing.precise.probe) {
          precise.SetState(*w, PreciseState::kVerified,
                           "routing.precise.probe is off: events trusted without proof");
          t.verified_at = now;
          break;
        }
        t.probing = true;
        precise.SetState(*w, PreciseState::kProbing, "probe sent");
        net::co_spawn(ioc, Probe(w, models.front(), cfg, /*recheck=*/false), net::detached);
        break;
      case PreciseState::kVerified: {
        if (t.probing) break;
        const auto quiet = now - std::max(t.last_message, t.verified_at);
        const uint64_t routed = w->routed() - t.routed_at_last_event;
        const auto limit = milliseconds(cfg.routing.precise.silence_timeout_ms);
        const auto every = milliseconds(cfg.routing.precise.reverify_interval_ms);
        const bool silent = limit.count() > 0 && routed > 0 && quiet > limit;
        const std::string doubt =
            silent ? common::StrCat("no KV events for ", static_cast<int>(Seconds(quiet)),
                                    " s while ", routed, " requests were routed to it")
                   : std::string();
        if (!cfg.routing.precise.probe) {
          // Nothing to settle the doubt with: silence is all the evidence there is.
          if (silent) {
            t.silenced = true;
            precise.SetState(*w, PreciseState::kUnverified, doubt);
          }
          break;
        }
        // Silence is a doubt, not evidence: requests that hit the cache in full make an
        // engine publish nothing. The worker stays verified (routed precisely) while a probe
        // asks it for positive evidence, as it does on a schedule.
        if ((silent || (every.count() > 0 && now - t.verified_at > every)) && available &&
            !models.empty()) {
          t.probing = true;
          spdlog::info("precise mode: probing worker {} again ({})", w->name(),
                       silent ? doubt : "scheduled re-check");
          net::co_spawn(ioc, Probe(w, models.front(), cfg, /*recheck=*/true), net::detached);
        }
        break;
      }
      case PreciseState::kUnverified:
        if (!t.silenced && !t.probing && now >= t.retry_at) {
          precise.SetState(*w, PreciseState::kPending, "retrying the probe");
        }
        break;
      case PreciseState::kOff:
      case PreciseState::kProbing:
        break;
    }
  }

  // One probe per DP rank: a completion of a fresh prompt, whose blocks the engine must then
  // publish exactly as kvgate predicts them. Then one probe per agent API (rank 0): a Messages
  // and a Responses request, whose blocks prove the engine converts that API as kvgate does.
  // A `recheck` of a verified worker leaves it verified while it runs; only a failed probe,
  // positive evidence of drift, turns it unverified.
  net::awaitable<void> Probe(WorkerSharedPtr w, std::string model, config::Config cfg,
                             bool recheck) {
    const config::KvEventsConfig& ke = *w->config().kv_events;
    const config::PreciseConfig& pc = cfg.routing.precise;
    PreciseMode& precise = state.precise;
    auto fail = [&](std::string why) {
      Track& t = tracks[w->id()];
      t.probing = false;
      t.retry_at = Clock::now() + kRetryAfterFailure;
      precise.SetState(*w, PreciseState::kUnverified, std::move(why));
    };
    const tokenizer::Tokenizer* tokenizer = PreciseMode::TokenizerFor(pc, model);
    if (tokenizer == nullptr) {
      fail("no tokenizer configured for its model");
      co_return;
    }
    // A model tokenizer whose chat template cannot be rendered still routes completions
    // precisely; its chat requests fall back to approximate routing: say so.
    if (const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(tokenizer);
        hf != nullptr && !hf->has_chat_template()) {
      spdlog::error("precise mode: chat requests for model {} route approximately: {}", model,
                    hf->chat_template_status().ToString());
    }
    const auto started = Clock::now();
    for (uint32_t rank = 0; rank < w->config().dp_size; ++rank) {
      // Three blocks of bytes4 text; a model's tokenizer (~4-5 bytes a token on this English
      // text) still makes >= 2 full blocks. Completions text is tokenised with the special
      // tokens vLLM adds (add_special_tokens defaults to true there), as the engine does.
      std::string body = "{\"model\":";
      common::AppendJsonString(body, model);
      body += ",\"prompt\":";
      common::AppendJsonString(body, ProbeText(ke, rank));
      body += ",\"max_tokens\":1,\"temperature\":0}";
      auto canonical = canonicalizer.Canonicalize(body, kvindex::ApiKind::kCompletions);
      std::vector<uint32_t> tokens;
      if (!canonical.ok() || canonical->prompts.empty() ||
          !tokenizer->Tokenize(canonical->prompts[0], &tokens).ok()) {
        tokens.clear();
      }
      const std::string failed =
          co_await SendProbe(w, model, tokens, "/v1/completions", std::move(body), rank, cfg);
      if (!failed.empty()) {
        fail(failed);
        co_return;
      }
    }
    for (const PreciseApi api : {PreciseApi::kMessages, PreciseApi::kResponses}) {
      co_await ProbeApi(w, model, *tokenizer, api, cfg);
    }
    tracks[w->id()].probing = false;
    tracks[w->id()].verified_at = Clock::now();
    tracks[w->id()].routed_at_last_event = w->routed();
    precise.SetState(
        *w, PreciseState::kVerified,
        common::StrCat(recheck ? "re-verified: " : "",
                       "the probe's blocks came back in its events after ",
                       static_cast<int>(Seconds(Clock::now() - started) * 1000), " ms"));
  }

  std::string ProbeText(const config::KvEventsConfig& ke, uint32_t rank) {
    std::string prompt = common::StrCat("kvgate precise-mode probe ", rng(), " rank ", rank, ":");
    while (prompt.size() < size_t{3} * ke.block_size * 4) prompt += " the quick brown fox";
    return prompt;
  }

  // The agent API's probe: the tokens kvgate predicts for the request (its conversion, then the
  // chat template or the canonical prompt, as the planner does) must come back in the events.
  net::awaitable<void> ProbeApi(WorkerSharedPtr w, std::string model,
                                const tokenizer::Tokenizer& tokenizer, PreciseApi api,
                                const config::Config& cfg) {
    const bool messages = api == PreciseApi::kMessages;
    std::string body = "{\"model\":";
    common::AppendJsonString(body, model);
    body += messages ? ",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
                     : ",\"max_output_tokens\":1,\"store\":false,\"input\":";
    common::AppendJsonString(body, ProbeText(*w->config().kv_events, 0));
    body += messages ? "}]}" : "}";
    const kvindex::ApiKind kind =
        messages ? kvindex::ApiKind::kMessages : kvindex::ApiKind::kResponses;
    std::vector<uint32_t> tokens;
    absl::Status s;
    if (tokenizer.HasChatTemplate()) {
      std::string chat;
      s = converter.ConvertToChatBody(body, kind, &chat);
      if (s.ok()) s = tokenizer.TokenizeChat(chat, &tokens);
    } else {
      auto canonical = canonicalizer.Canonicalize(body, kind);
      s = canonical.ok() && !canonical->prompts.empty()
              ? tokenizer.Tokenize(canonical->prompts[0], &tokens)
              : absl::InvalidArgumentError("the probe did not canonicalise");
    }
    if (!s.ok()) tokens.clear();
    std::string path = messages ? "/v1/messages" : "/v1/responses";  // named: see SendProbe
    const std::string failed =
        co_await SendProbe(w, model, tokens, std::move(path), std::move(body), 0, cfg);
    state.precise.SetApiAgreement(
        *w, api, failed.empty(),
        failed.empty() ? "its probe's blocks came back in the events as predicted" : failed);
  }

  // Sends one probe request and waits for the engine's events to carry the blocks of `tokens`.
  // @return "" when they did, else why not (in the words an operator needs).
  net::awaitable<std::string> SendProbe(WorkerSharedPtr w, std::string model,
                                        std::vector<uint32_t> tokens, std::string path,
                                        std::string body, uint32_t rank, config::Config cfg) {
    const config::KvEventsConfig& ke = *w->config().kv_events;
    const milliseconds timeout(cfg.routing.precise.probe_timeout_ms);
    const tokenizer::Tokenizer* tokenizer = PreciseMode::TokenizerFor(cfg.routing.precise, model);
    std::vector<kvindex::BlockHash> chain;
    PreciseMode::TokenChain(tokens, model, ke.block_size, &chain);
    if (chain.empty()) co_return std::string("the probe prompt did not make a full block");
    const kvindex::Holder holder = PreciseMode::HolderOf(*w, rank);
    const uint64_t batches_before = Batches(holder);
    std::vector<std::pair<std::string, std::string>> headers;
    if (w->config().dp_size > 1) headers.emplace_back("x-data-parallel-rank", std::to_string(rank));
    if (!cfg.upstream.api_key.empty()) {
      headers.emplace_back("authorization", "Bearer " + cfg.upstream.api_key);
    }
    // Named first: GCC 12 mishandles a conditional's temporary inside a co_await.
    std::shared_ptr<ssl::context> tls;
    if (const auto snapshot = state.snapshot(); snapshot->tls) tls = snapshot->tls->upstream;
    auto r = co_await HttpCall(ioc, w->config().url, "POST", path, std::move(body), timeout,
                               std::move(headers), std::move(tls));
    if (!r.ok() || r->status != 200) {
      // Named first: GCC 12 mishandles a conditional's temporary in a coroutine.
      std::string why = r.ok() ? common::StrCat("HTTP ", r->status) : r.status().ToString();
      co_return common::StrCat("the probe request (", path, ") failed: ", why);
    }
    const auto deadline = Clock::now() + timeout;
    net::steady_timer timer(ioc);
    while (!stopped) {
      const auto m = state.precise.index().Match(chain, {&holder, 1});
      if (!m.empty() && m[0].any_tier_blocks == chain.size()) co_return std::string();
      if (Clock::now() >= deadline) break;
      timer.expires_after(kMatchPoll);
      co_await timer.async_wait(kNoThrow);
    }
    const std::string_view name = tokenizer != nullptr ? tokenizer->name() : "";
    co_return Diagnose(holder, ke, batches_before, name);
  }

  uint64_t Batches(kvindex::Holder holder) const {
    for (const auto& s : state.precise.Sources()) {
      if (s.source.holder == holder) return s.batches;
    }
    return 0;
  }

  // Why the probe's blocks never showed up, in the words an operator needs.
  std::string Diagnose(kvindex::Holder holder, const config::KvEventsConfig& ke,
                       uint64_t batches_before, std::string_view tokenizer) const {
    for (const auto& s : state.precise.Sources()) {
      if (s.source.holder != holder) continue;
      if (!s.error.empty())
        return common::StrCat("cannot subscribe to ", s.source.endpoint, ": ", s.error);
      if (s.batches == batches_before) {
        return common::StrCat("no KV events arrived from ", s.source.endpoint,
                              " after the probe (check the engine's --kv-events-config: "
                              "enable_kv_cache_events, endpoint, topic \"",
                              s.source.topic, "\")");
      }
    }
    const uint32_t engine_block = state.precise.applier().LastBlockSize(holder);
    if (engine_block != 0 && engine_block != ke.block_size) {
      return common::StrCat("the engine stores ", engine_block,
                            "-token blocks but kv_events.block_size is ", ke.block_size);
    }
    return common::StrCat("events arrived but did not carry the predicted blocks: the tokenizer (",
                          tokenizer, ") or the model namespace differs from the engine's");
  }

  net::io_context& ioc;
  GatewayState& state;
  std::atomic<bool> stopped{false};  // Stop() runs on another thread
  std::map<uint32_t, Track> tracks;
  std::string configured_key;
  kvindex::Canonicalizer canonicalizer;
  kvindex::AgentChatConverter converter;
  std::mt19937_64 rng{std::random_device{}()};
};

PreciseProber::PreciseProber(net::io_context& ioc, GatewayState& state)
    : impl_(std::make_unique<Impl>(ioc, state)) {}

PreciseProber::~PreciseProber() = default;

void PreciseProber::Start() { net::co_spawn(impl_->ioc, impl_->Loop(), net::detached); }

void PreciseProber::Stop() { impl_->stopped = true; }

}  // namespace kvgate::router
