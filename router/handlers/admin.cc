#include "router/handlers/admin.h"

#include <algorithm>

#include "common/json_util.h"
#include "common/strings.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"
#include "router/routing/parsed_request.h"
#include "router/routing/pd_choice.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

void AppendKey(std::string& out, std::string_view key) {
  common::AppendJsonString(out, key);
  out.push_back(':');
}

void AppendNumber(std::string& out, double v) {
  if (!(v == v) || v > 1e300 || v < -1e300) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  out += buf;
}

void AppendLoad(std::string& out, const LoadSnapshot& l) {
  common::StrAppend(&out, "{\"in_flight\":", l.in_flight,
                    ",\"pending_prefill_tokens\":", l.pending_prefill_tokens,
                    ",\"active_decode\":", l.active_decode,
                    ",\"active_kv_blocks\":", l.active_kv_blocks, "}");
}

void AppendEngine(std::string& out, const EngineStats& e) {
  common::StrAppend(&out, "{\"scraped\":", e.valid, ",\"running\":");
  AppendNumber(out, e.running);
  out += ",\"waiting\":";
  AppendNumber(out, e.waiting);
  out += ",\"kv_usage\":";
  AppendNumber(out, e.kv_usage);
  common::StrAppend(&out, ",\"num_gpu_blocks\":", e.num_gpu_blocks, "}");
}

void AppendTierCounts(std::string& out, const std::array<uint64_t, kvindex::kNumTiers>& n) {
  out += "{";
  for (int t = 0; t < kvindex::kNumTiers; ++t) {
    if (t > 0) out += ",";
    common::StrAppend(&out, "\"", kvindex::TierName(static_cast<kvindex::Tier>(t)), "\":", n[t]);
  }
  out += "}";
}

// A hybrid model's KV-cache groups beside full attention (nothing for other models).
void AppendGroups(std::string& out, const std::vector<kvindex::GroupView>& groups) {
  if (groups.empty()) return;
  out += ",\"groups\":[";
  for (size_t i = 0; i < groups.size(); ++i) {
    const kvindex::GroupView& g = groups[i];
    common::StrAppend(&out, i > 0 ? "," : "", "{\"group\":", g.group, ",\"kind\":\"",
                      kvindex::GroupKindName(g.spec.kind),
                      "\",\"sliding_window\":", g.spec.sliding_window,
                      ",\"block_size\":", g.block_size, ",\"blocks\":");
    AppendTierCounts(out, g.blocks);
    out += "}";
  }
  out += "]";
}

// Approximate mode's imitation of a hybrid worker's other groups (workers[].kv_groups).
void AppendImitatedGroups(std::string& out, const std::vector<kvindex::ImitatedGroupView>& groups) {
  if (groups.empty()) return;
  out += ",\"groups\":[";
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    common::StrAppend(&out, i > 0 ? "," : "", "{\"kind\":\"", kvindex::GroupKindName(g.spec.kind),
                      "\",\"sliding_window\":", g.spec.sliding_window,
                      ",\"capacity_blocks\":", g.capacity_blocks, ",\"blocks\":", g.blocks, "}");
  }
  out += "]";
}

// For a hybrid worker's chosen rank: the full-attention match and what each other group serves
// of it (the hit is the smallest).
void AppendGroupMatch(std::string& out, const GatewayState& state, const RoutePlan& plan,
                      std::string_view model, const Worker& w, const Candidate& c) {
  const kvindex::Holder holder =
      PreciseMode::HolderOf(w, static_cast<uint32_t>(std::max(c.dp_rank, 0)));
  if (!state.precise.groups().Hybrid(holder) || !w.config().kv_events) return;
  const uint32_t bs = w.config().kv_events->block_size;
  std::vector<kvindex::BlockHash> chain;
  PreciseMode::TokenChain(plan.tokens, model, bs, &chain);
  const auto m = state.precise.index().Match(chain, {&holder, 1});
  const uint32_t full = m.empty() ? 0 : m[0].any_tier_blocks;
  common::StrAppend(&out, ",\"full_attention_tokens\":", uint64_t{full} * bs, ",\"groups\":[");
  const auto groups = state.precise.groups().Explain(holder, chain, bs, full);
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [g, hit] = groups[i];
    common::StrAppend(&out, i > 0 ? "," : "", "{\"group\":", g.group, ",\"kind\":\"",
                      kvindex::GroupKindName(g.spec.kind), "\",\"hit_tokens\":", uint64_t{hit} * bs,
                      "}");
  }
  out += "]";
}

// Precise mode's view of one worker: its state, blocks per tier (from its events) and each DP
// rank's event stream; with `block_ids`, the engine's ids of every block it holds. `index_stats`:
// the precise index's, read once for every worker.
void AppendPrecise(std::string& out, const GatewayState& state, const Worker& w,
                   const std::vector<kvevents::SourceStatus>& sources,
                   const kvindex::IndexStats& index_stats, bool block_ids) {
  const auto now = SteadyClock::now();
  const PreciseMode& precise = state.precise;
  out += "{\"state\":";
  common::AppendJsonString(out, PreciseStateName(w.precise_state()));
  out += ",\"reason\":";
  common::AppendJsonString(out, precise.Reason(w));
  // The agents' APIs: each proven apart (an engine may convert one differently).
  out += ",\"apis\":{";
  for (int a = 0; a < kNumPreciseApis; ++a) {
    const auto api = static_cast<PreciseApi>(a);
    if (a > 0) out += ",";
    common::StrAppend(&out, "\"", PreciseApiName(api),
                      "\":{\"agrees\":", w.precise_api_agrees(api) ? "true" : "false",
                      ",\"reason\":");
    common::AppendJsonString(out, precise.ApiReason(w, api));
    out += "}";
  }
  out += "}";
  std::array<uint64_t, kvindex::kNumTiers> total{};
  std::string ranks;
  bool complete = true;
  for (uint32_t r = 0; r < w.config().dp_size; ++r) {
    const kvindex::Holder holder = PreciseMode::HolderOf(w, r);
    const auto counts = precise.applier().BlockCounts(holder);
    for (int t = 0; t < kvindex::kNumTiers; ++t) total[t] += counts[t];
    const kvevents::SourceStatus* st = nullptr;
    for (const auto& s : sources) {
      if (s.source.holder == holder) st = &s;
    }
    if (r > 0) ranks += ",";
    common::StrAppend(&ranks, "{\"dp_rank\":", r, ",\"blocks\":");
    AppendTierCounts(ranks, counts);
    // Whether a match binary-searches this rank's blocks per tier (false: it walks them); a
    // rank the index has no blocks of is trivially closed.
    const kvindex::HolderStats* hs = nullptr;
    for (const auto& h : index_stats.holders) {
      if (h.holder == holder) hs = &h;
    }
    ranks += ",\"prefix_closed\":{";
    for (int t = 0; t < kvindex::kNumTiers; ++t) {
      common::StrAppend(&ranks, t > 0 ? "," : "", "\"",
                        kvindex::TierName(static_cast<kvindex::Tier>(t)),
                        "\":", hs == nullptr || hs->tiers[t].prefix_closed ? "true" : "false");
    }
    ranks += "}";
    AppendGroups(ranks, precise.groups().Groups(holder));
    if (st == nullptr) {
      complete = false;
      ranks += ",\"subscribed\":false}";
      continue;
    }
    complete &= st->view_complete && !st->replaying;
    ranks += ",\"subscribed\":true,\"endpoint\":";
    common::AppendJsonString(ranks, st->source.endpoint);
    ranks += ",\"replay_endpoint\":";
    common::AppendJsonString(ranks, st->source.replay_endpoint);
    ranks += ",\"topic\":";
    common::AppendJsonString(ranks, st->source.topic);
    ranks += ",\"next_seq\":";
    ranks += st->next_seq ? std::to_string(*st->next_seq) : "null";
    common::StrAppend(&ranks, ",\"replaying\":", st->replaying,
                      ",\"view_complete\":", st->view_complete, ",\"batches\":", st->batches,
                      ",\"replayed_batches\":", st->replayed_batches, ",\"gaps\":", st->gaps,
                      ",\"replays\":", st->replays, ",\"lost_batches\":", st->lost_batches,
                      ",\"restarts\":", st->restarts, ",\"bad_messages\":", st->bad_messages,
                      ",\"orphan_blocks\":", st->orphan_blocks, ",\"last_event_age_s\":");
    if (st->last_message == SteadyClock::time_point{}) {
      ranks += "null";
    } else {
      AppendNumber(ranks, std::chrono::duration<double>(now - st->last_message).count());
    }
    ranks += ",\"error\":";
    common::AppendJsonString(ranks, st->error);
    if (block_ids) {
      ranks += ",\"engine_block_ids\":{";
      for (int t = 0; t < kvindex::kNumTiers; ++t) {
        if (t > 0) ranks += ",";
        const auto tier = static_cast<kvindex::Tier>(t);
        common::StrAppend(&ranks, "\"", kvindex::TierName(tier), "\":[",
                          common::StrJoin(precise.applier().EngineBlocks(holder, tier), ","), "]");
      }
      ranks += "}";
    }
    ranks += "}";
  }
  out += ",\"blocks\":";
  AppendTierCounts(out, total);
  common::StrAppend(&out, ",\"view_complete\":", complete, ",\"ranks\":[", ranks, "]}");
}

// The stores kvgate follows: their event streams and the blocks each holds (store tier).
void AppendStores(std::string& out, const GatewayState& state,
                  const std::vector<kvevents::SourceStatus>& sources) {
  const PreciseMode& precise = state.precise;
  const auto stores_ptr = precise.Stores();
  const auto& stores = *stores_ptr;
  out += "[";
  for (size_t i = 0; i < stores.size(); ++i) {
    const kvindex::Holder holder = PreciseMode::StoreHolder(i);
    if (i > 0) out += ",";
    out += "{\"name\":";
    common::AppendJsonString(out, stores[i].name);
    out += ",\"model\":";
    common::AppendJsonString(out, stores[i].model);
    out += ",\"address\":";
    if (stores[i].address) {
      common::AppendJsonString(out, stores[i].address->ToString());
    } else {
      out += "null";
    }
    common::StrAppend(&out, ",\"up\":", precise.StoreUp(i), ",\"kv_events\":");
    common::AppendJsonString(out, stores[i].kv_events.endpoint);
    common::StrAppend(
        &out, ",\"block_size\":", stores[i].kv_events.block_size, ",\"blocks\":",
        precise.applier().BlockCounts(holder)[static_cast<int>(kvindex::Tier::kStore)]);
    for (const auto& st : sources) {
      if (!(st.source.holder == holder)) continue;
      common::StrAppend(&out, ",\"batches\":", st.batches, ",\"stored_blocks\":", st.stored_blocks,
                        ",\"removed_blocks\":", st.removed_blocks,
                        ",\"orphan_blocks\":", st.orphan_blocks,
                        ",\"view_complete\":", st.view_complete, ",\"error\":");
      common::AppendJsonString(out, st.error);
    }
    out += "}";
  }
  out += "]";
}

}  // namespace

absl::StatusOr<std::string> ExplainJson(GatewayState& state, const Snapshot& snapshot,
                                        std::string_view body, size_t capacity,
                                        std::string_view path, HeaderLookup header) {
  const config::Config& cfg = *snapshot.config;
  ParsedRequest parsed;
  const ApiEndpoint endpoint = EndpointOf(path);
  if (auto s = ParseRequest(body, capacity, endpoint, snapshot.policies->AnyUsesPrefixCache(),
                            cfg.routing.session_keys, header, &parsed);
      !s.ok()) {
    return s;
  }
  const auto now = SteadyClock::now();
  auto plan =
      state.planner.Plan(parsed, path, snapshot.workers, *snapshot.policies, cfg.routing, now);
  if (!plan.ok()) return plan.status();
  plan->learn = endpoint != ApiEndpoint::kCountTokens;
  if (endpoint == ApiEndpoint::kResponses && !parsed.json.previous_response_id.empty()) {
    if (auto s = RoutePlanner::PinToResponseOwner(*plan, state.response_pins, snapshot.workers,
                                                  parsed.json.previous_response_id, now);
        !s.ok()) {
      return s;
    }
  }
  Decision d = state.planner.Decide(*plan, 0, /*commit=*/false, now);
  const std::string& model = parsed.model();
  std::string out = "{";
  AppendKey(out, "policy");
  common::AppendJsonString(out, plan->policy->name());
  out += ",";
  AppendKey(out, "model");
  common::AppendJsonString(out, model);
  out += ",\"api\":";
  common::AppendJsonString(out, ApiName(endpoint));
  // Which routing.session_keys source gave the session key, and the key itself.
  out += ",\"session\":{\"source\":";
  common::AppendJsonString(out, parsed.session_source);
  out += ",\"key\":";
  common::AppendJsonString(out, parsed.session_key);
  out += "},\"pinned_to_response\":";
  if (plan->pinned_response.empty()) {
    out += "null";
  } else {
    out += "{\"response_id\":";
    common::AppendJsonString(out, plan->pinned_response);
    out += ",\"worker\":";
    common::AppendJsonString(out, d.worker->name());
    out += ",\"reason\":\"only the worker that stored the previous response can continue it\"}";
  }
  common::StrAppend(&out, ",\"learns\":", plan->learn ? "true" : "false");
  common::StrAppend(&out, ",\"prompt_tokens\":", plan->prompt_tokens,
                    ",\"prompt_blocks\":", plan->chain.size(),
                    ",\"block_tokens\":", cfg.routing.block_tokens, ",");
  AppendKey(out, "chosen");
  common::AppendJsonString(out, d.worker->name());
  out += ",\"candidates\":[";
  const auto& workers = plan->available;
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const Candidate& c = d.candidates[i];
    const Worker& w = *workers[i];
    const CandidateScore s = i < d.scores.size() ? d.scores[i] : CandidateScore{};
    if (i > 0) out += ",";
    out += "{";
    AppendKey(out, "worker");
    common::AppendJsonString(out, c.name);
    const uint32_t bt = cfg.routing.block_tokens;
    common::StrAppend(&out, ",\"chosen\":", i == d.index,
                      ",\"matched_tokens\":{\"gpu\":", uint64_t{c.cached_blocks[0]} * bt,
                      ",\"host\":", uint64_t{c.cached_blocks[1]} * bt,
                      ",\"store\":", uint64_t{c.cached_blocks[2]} * bt,
                      "},\"store_tokens\":", uint64_t{c.cached_blocks[2]} * bt, ",\"load\":");
    AppendLoad(out, c.load);
    out += ",\"engine\":";
    AppendEngine(out, c.engine);
    out += ",\"prefill_tokens_per_second\":";
    AppendNumber(
        out, c.prefill_rate > 0 ? c.prefill_rate : cfg.routing.kvaware.prefill_tokens_per_second);
    out += ",\"predicted_ttft_s\":";
    if (s.predicted_ttft_s >= 0) {
      AppendNumber(out, s.predicted_ttft_s);
    } else {
      out += "null";
    }
    if (s.predicted_ttft_s >= 0) {
      const TtftParts& t = s.ttft_parts;
      const std::pair<std::string_view, double> parts[] = {
          {"queue", t.queue},
          {"prefill", t.prefill},
          {"host_load", t.host_load},
          {"store_load", t.store_load},
          {"decode_interference", t.decode_interference},
          {"kv_wait", t.kv_wait}};
      out += ",\"predicted_ttft_parts_s\":";
      char sep = '{';
      for (const auto& [name, seconds] : parts) {
        out += sep;
        sep = ',';
        AppendKey(out, name);
        AppendNumber(out, seconds);
      }
      out += "}";
    }
    out += ",\"score\":";
    AppendNumber(out, s.score);
    common::StrAppend(&out, ",\"eligible\":", s.eligible, ",\"note\":");
    common::AppendJsonString(out, s.note);
    common::StrAppend(&out, ",\"match_source\":\"", c.precise ? "events" : "approximate",
                      "\",\"precise_state\":\"", PreciseStateName(w.precise_state()), "\"");
    if (c.precise) {
      common::StrAppend(&out, ",\"dp_rank\":", c.dp_rank,
                        ",\"precise_blocks\":", d.precise_blocks[i]);
      AppendGroupMatch(out, state, *plan, model, w, c);
    }
    out += "}";
  }
  out += "]";
  // Prefill/decode: both picks, and whether prefill would be skipped and why.
  if (PdProtocolFor(cfg.pd, model)) {
    const PdChoice pd =
        ChoosePd(state.planner, *plan, cfg.pd, model, /*commit=*/false, SteadyClock::now());
    out += ",\"pd\":{\"protocol\":";
    common::AppendJsonString(out, pd::PdProtocolName(pd.protocol));
    out += ",\"decision\":";
    common::AppendJsonString(out, pd.mode == PdMode::kNotPd ? "not_pd" : PdDecisionLabel(pd));
    common::StrAppend(&out, ",\"prefill_skipped\":", pd.mode == PdMode::kDirect, ",\"reason\":");
    common::AppendJsonString(out, pd.reason);
    auto worker = [&out](const char* key, const std::optional<Decision>& d) {
      common::StrAppend(&out, ",\"", key, "\":");
      if (d) {
        common::AppendJsonString(out, d->worker->name());
      } else {
        out += "null";
      }
    };
    worker("decode", pd.decode);
    worker("prefill", pd.prefill);
    common::StrAppend(&out, ",\"decode_uncached_tokens\":", pd.decode_uncached_tokens,
                      ",\"skip_prefill_below_tokens\":", cfg.pd.skip_prefill_below_tokens, "}");
  }
  // What each store could supply of this prompt: its leading blocks in the store tier.
  const auto stores_ptr = state.precise.Stores();
  const auto& stores = *stores_ptr;
  if (!stores.empty()) {
    out += ",\"stores\":[";
    std::vector<kvindex::BlockHash> chain;
    std::vector<kvindex::MatchResult> matches;
    for (size_t i = 0; i < stores.size(); ++i) {
      const uint32_t bs = stores[i].kv_events.block_size;
      PreciseMode::TokenChain(plan->tokens, model, bs, &chain);
      const kvindex::Holder holder = PreciseMode::StoreHolder(i);
      state.precise.index().Match(chain, {&holder, 1}, &matches);
      const uint32_t blocks =
          matches.empty() ? 0 : matches[0].blocks[static_cast<int>(kvindex::Tier::kStore)];
      if (i > 0) out += ",";
      out += "{\"name\":";
      common::AppendJsonString(out, stores[i].name);
      common::StrAppend(&out, ",\"up\":", state.precise.StoreUp(i), ",\"prefix_blocks\":", blocks,
                        ",\"prefix_tokens\":", uint64_t{blocks} * bs, "}");
    }
    out += "],\"store_tokens_per_second\":";
    AppendNumber(out, state.planner.store_rate().TokensPerSecond(
                          cfg.routing.kvaware.store_tokens_per_second));
    common::StrAppend(&out, ",\"store_rate_samples\":", state.planner.store_rate().samples());
  }
  out += "}";
  return out;
}

std::string WorkersJson(const GatewayState& state, bool block_ids) {
  const auto now = SteadyClock::now();
  const auto sources = state.precise.Sources();
  const kvindex::IndexStats stats = state.planner.index().Stats();
  const kvindex::IndexStats precise_stats = state.precise.index().Stats();
  std::string out = "{\"workers\":[";
  bool first = true;
  const SnapshotConstSharedPtr snapshot = state.snapshot();
  for (const auto& w : snapshot->workers) {
    if (!first) out += ",";
    first = false;
    out += "{";
    AppendKey(out, "url");
    common::AppendJsonString(out, w->name());
    common::StrAppend(&out, ",\"id\":", w->id(), ",\"role\":\"",
                      config::WorkerRoleName(w->config().role), "\",\"healthy\":", w->healthy(),
                      ",\"available\":", w->IsAvailable(now), ",\"draining\":", w->draining(),
                      ",\"discovery\":\"", EndpointStateName(w->discovery_state()),
                      "\",\"dp_size\":", w->config().dp_size,
                      ",\"breaker_open\":", w->BreakerOpen(now), ",\"weight\":");
    AppendNumber(out, w->config().weight);
    out += ",\"models\":[";
    bool first_model = true;
    for (const auto& m : w->Models()) {
      if (!first_model) out += ",";
      first_model = false;
      common::AppendJsonString(out, m);
    }
    out += "],\"load\":";
    AppendLoad(out, w->load());
    out += ",\"local_load\":";  // this replica's reservations (load adds the other replicas')
    AppendLoad(out, w->local_load());
    out += ",\"engine\":";
    AppendEngine(out, w->engine_stats());
    out += ",\"prefill_tokens_per_second\":";
    AppendNumber(out, w->PrefillRate(snapshot->config->routing.kvaware.prefill_tokens_per_second));
    out += ",\"prefill_overhead_seconds\":";
    AppendNumber(out, w->PrefillOverhead());
    out += ",\"index\":";
    const kvindex::Holder h = RoutePlanner::HolderOf(*w);
    bool found = false;
    for (const auto& hs : stats.holders) {
      if (hs.holder.worker != h.worker || hs.holder.dp_rank != h.dp_rank) continue;
      found = true;
      out += "{\"blocks\":{";
      for (int t = 0; t < kvindex::kNumTiers; ++t) {
        if (t > 0) out += ",";
        common::StrAppend(&out, "\"", kvindex::TierName(static_cast<kvindex::Tier>(t)),
                          "\":", hs.tiers[t].blocks);
      }
      common::StrAppend(&out, "},\"capacity_blocks\":", hs.tiers[0].capacity_blocks,
                        ",\"evicted_blocks\":", hs.tiers[0].evicted_blocks,
                        ",\"removed_blocks\":", hs.tiers[0].removed_blocks);
      if (block_ids) {
        // The approximate index's blocks, sorted: replicas that agree list the same ones.
        auto held = state.planner.index().Held(h, kvindex::Tier::kGpu, hs.tiers[0].blocks);
        std::sort(held.begin(), held.end());
        common::StrAppend(&out, ",\"gpu_block_hashes\":[", common::StrJoin(held, ","), "]");
      }
      AppendImitatedGroups(out, state.planner.groups().Groups(h));
      out += "}";
    }
    if (!found) out += "{\"blocks\":{\"gpu\":0,\"host\":0,\"store\":0}}";
    out += ",\"precise\":";
    if (w->config().kv_events) {
      AppendPrecise(out, state, *w, sources, precise_stats, block_ids);
    } else {
      out += "null";
    }
    out += "}";
  }
  out += "],\"stores\":";
  AppendStores(out, state, sources);
  common::StrAppend(&out, ",\"index\":{\"distinct_blocks\":", stats.distinct_blocks,
                    ",\"residencies\":", stats.residencies,
                    ",\"memory_bytes\":", stats.memory_bytes,
                    ",\"max_residencies\":", stats.max_residencies, "}}");
  return out;
}

net::awaitable<void> HandleAdminWorkers(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  const bool block_ids = ex.head.query.find("blocks=1") != std::string_view::npos;
  co_await WriteResponse(tc, ex, 200, "application/json", WorkersJson(state, block_ids));
}

net::awaitable<void> HandleAdminExplain(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  std::string_view path = ex.head.Find("x-kvgate-endpoint");
  if (path.empty()) path = "/v1/chat/completions";
  auto json = ExplainJson(state, *ex.snapshot, ex.body, ex.body_capacity, path,
                          [&ex](std::string_view name) { return ex.head.Find(name); });
  if (json.ok()) {
    co_await WriteResponse(tc, ex, 200, "application/json", *json);
    co_return;
  }
  const auto code = json.status().code();
  co_await WriteError(tc, ex,
                      code == absl::StatusCode::kNotFound      ? 404
                      : code == absl::StatusCode::kUnavailable ? 503
                                                               : 400,
                      common::Sv(json.status().message()), "invalid_request_error",
                      "explain_failed");
}

net::awaitable<void> HandleAdminCluster(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  co_await WriteResponse(tc, ex, 200, "application/json", state.planner.cluster().StatusJson());
}

net::awaitable<void> HandleAdminDrain(GatewayState& state, ThreadContext& tc, Exchange& ex) {
  std::string body(ex.body);
  body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  std::string_view url;
  bool draining = true;
  bool parsed = !parser.iterate(body.data(), body.size(), body.capacity()).get(doc) &&
                !doc["worker"].get_string().get(url);
  if (parsed) {
    auto d = doc["draining"];
    if (d.error() != simdjson::NO_SUCH_FIELD) parsed = !d.get_bool().get(draining);
  }
  if (!parsed) {
    co_await WriteError(tc, ex, 400,
                        "expected {\"worker\": \"http://host:port\", \"draining\": true|false}",
                        "invalid_request_error", "invalid_body");
    co_return;
  }
  for (const auto& w : ex.snapshot->workers) {
    if (w->name() != url) continue;
    w->SetDraining(draining);
    state.planner.cluster().Drained(*w, draining);
    spdlog::warn("worker {} {} (admin)", w->name(), draining ? "draining" : "no longer draining");
    std::string out = "{\"worker\":";
    common::AppendJsonString(out, w->name());
    common::StrAppend(&out, ",\"draining\":", draining ? "true" : "false", "}");
    co_await WriteResponse(tc, ex, 200, "application/json", out);
    co_return;
  }
  co_await WriteError(tc, ex, 404, common::StrCat("no worker ", url), "invalid_request_error",
                      "unknown_worker");
}

}  // namespace kvgate::router
