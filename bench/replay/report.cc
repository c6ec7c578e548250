#include "bench/replay/report.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace kvgate::replay {
namespace {

using common::StrAppend;

void AppendNumber(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  StrAppend(out, v);
}

void AppendLatency(std::string* out, const char* name, const LatencySummary& s) {
  StrAppend(out, "\"", name, "\":{\"count\":", s.count, ",\"mean\":");
  AppendNumber(out, s.mean);
  out->append(",\"p50\":");
  AppendNumber(out, s.p50);
  out->append(",\"p90\":");
  AppendNumber(out, s.p90);
  out->append(",\"p99\":");
  AppendNumber(out, s.p99);
  out->append("}");
}

// Named numbers as JSON members: ,"name":value for each.
void AppendFields(std::string* out, std::initializer_list<std::pair<const char*, double>> fields) {
  for (const auto& [name, v] : fields) {
    StrAppend(out, ",\"", name, "\":");
    AppendNumber(out, v);
  }
}

void AppendPrediction(std::string* out, const PredictionSummary& p) {
  if (p.count == 0) {
    out->append("null");
    return;
  }
  StrAppend(out, "{\"count\":", p.count);
  AppendFields(out, {{"abs_error_p50", p.abs_error_p50},
                     {"abs_error_p90", p.abs_error_p90},
                     {"bias", p.bias},
                     {"over_share", p.over_share},
                     {"under_share", p.under_share},
                     {"predicted_ttft_mean_s", p.predicted_ttft_mean_s},
                     {"actual_ttft_mean_s", p.actual_ttft_mean_s}});
  out->append(",\"parts_mean_s\":{");
  for (size_t k = 0; k < kPredictionParts.size(); ++k) {
    StrAppend(out, k ? "," : "", "\"", kPredictionParts[k], "\":");
    AppendNumber(out, p.part_means_s[k]);
  }
  out->append("}}");
}

void AppendCachedPrediction(std::string* out, const CachedPredictionSummary& c) {
  if (c.count == 0) {
    out->append("null");
    return;
  }
  StrAppend(out, "{\"count\":", c.count, ",\"exact\":", c.exact, ",\"over_tokens\":", c.over_tokens,
            ",\"under_tokens\":", c.under_tokens, ",\"abs_error_p90\":", c.abs_error_p90,
            ",\"abs_error_max\":", c.abs_error_max);
  AppendFields(out, {{"abs_error_mean", c.abs_error_mean}, {"abs_error_share", c.abs_error_share}});
  out->append("}");
}

void AppendFloor(std::string* out, const FloorSummary& f) {
  if (!f.computed) {
    out->append("null");
    return;
  }
  out->append("{\"prefill_tokens_per_s\":");
  AppendNumber(out, f.prefill_tokens_per_s);
  StrAppend(out, ",\"count\":", f.count, ",\"compulsory_tokens\":", f.compulsory_tokens);
  AppendFields(out, {{"mean_s", f.mean_s},
                     {"p99_s", f.p99_s},
                     {"ttft_mean_above_s", f.ttft_mean_above_s},
                     {"ttft_p99_above_s", f.ttft_p99_above_s}});
  out->push_back('}');
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

std::string ErrorKind(const RequestRecord& r) {
  if (r.status == 0) return "transport";
  if (r.status < 200 || r.status >= 300) return common::StrCat("http_", r.status);
  return "stream";  // 2xx but the stream broke or carried an error.
}

}  // namespace

double RequestRecord::tpot_s() const {
  if (ttft_s < 0 || completion_tokens < 2) return -1;
  return (e2e_s - ttft_s) / static_cast<double>(completion_tokens - 1);
}

LatencySummary Summarize(std::vector<double> values) {
  LatencySummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / values.size();
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p * values.size()));
    return values[std::clamp<size_t>(k, 1, values.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  return s;
}

double Report::cached_ratio() const { return Ratio(cached_tokens, prompt_tokens); }
double Report::requests_per_s() const { return Ratio(ok, duration_s); }
double Report::output_tokens_per_s() const { return Ratio(completion_tokens, duration_s); }

Report BuildReport(const std::vector<RequestRecord>& records,
                   const std::map<std::string, uint64_t>& max_concurrent, double duration_s) {
  Report report;
  report.duration_s = duration_s;
  std::vector<double> ttft, tpot, e2e, floors, predicted_actual, engine, engine_above;
  std::vector<TtftPrediction> predicted;
  std::vector<int64_t> cached_predicted;
  std::vector<uint64_t> cached_reported, cached_prompts;
  uint64_t compulsory = 0;
  bool floor = false;
  for (const auto& r : records) {
    ++report.requests;
    WorkerSummary& w = report.workers[r.worker];
    ++w.requests;
    floor = floor || r.floor_s >= 0;
    if (!r.ok()) {
      ++report.errors;
      ++w.errors;
      ++report.error_kinds[ErrorKind(r)];
      continue;
    }
    ++report.ok;
    report.prompt_tokens += r.prompt_tokens;
    report.cached_tokens += r.cached_tokens;
    report.store_tokens += r.store_tokens;
    report.completion_tokens += r.completion_tokens;
    w.prompt_tokens += r.prompt_tokens;
    w.cached_tokens += r.cached_tokens;
    w.store_tokens += r.store_tokens;
    if (r.ttft_s >= 0) {
      ttft.push_back(r.ttft_s);
      if (r.floor_s >= 0) {
        floors.push_back(r.floor_s);
        compulsory += r.compulsory_tokens;
      }
      if (r.engine_ttft_s >= 0) {
        engine.push_back(r.engine_ttft_s);
        if (r.floor_s >= 0) engine_above.push_back(r.engine_ttft_s - r.floor_s);
      }
      if (r.prediction.present()) {
        predicted.push_back(r.prediction);
        predicted_actual.push_back(r.ttft_s);
      }
    }
    if (r.usage && r.predicted_cached_tokens >= 0) {
      cached_predicted.push_back(r.predicted_cached_tokens);
      cached_reported.push_back(r.cached_tokens);
      cached_prompts.push_back(r.prompt_tokens);
    }
    if (r.tpot_s() >= 0) tpot.push_back(r.tpot_s());
    e2e.push_back(r.e2e_s);
  }
  for (const auto& [worker, n] : max_concurrent) report.workers[worker].max_concurrent = n;
  report.ttft = Summarize(std::move(ttft));
  report.tpot = Summarize(std::move(tpot));
  report.e2e = Summarize(std::move(e2e));
  report.engine_ttft = Summarize(std::move(engine));
  report.engine_above_floor = Summarize(std::move(engine_above));
  report.prediction = SummarizePredictions(predicted, predicted_actual);
  report.cached_prediction =
      SummarizeCachedPredictions(cached_predicted, cached_reported, cached_prompts);
  if (floor) report.floor = SummarizeFloor(std::move(floors), compulsory, report.ttft);
  return report;
}

std::string ReportToJson(const Report& r) {
  std::string out = "{\"target\":";
  common::AppendJsonString(out, r.target);
  out.append(",\"trace\":");
  common::AppendJsonString(out, r.trace);
  out.append(",\"mode\":");
  common::AppendJsonString(out, r.mode);
  out.append(",\"api\":");
  common::AppendJsonString(out, r.api);
  StrAppend(&out, ",\"responses_store\":", r.responses_store ? "true" : "false");
  StrAppend(&out, ",\"totals\":{\"requests\":", r.requests, ",\"ok\":", r.ok,
            ",\"errors\":", r.errors, ",\"conversations\":", r.conversations,
            ",\"prompt_tokens\":", r.prompt_tokens, ",\"cached_tokens\":", r.cached_tokens,
            ",\"store_tokens\":", r.store_tokens, ",\"completion_tokens\":", r.completion_tokens,
            ",\"cached_ratio\":");
  AppendNumber(&out, r.cached_ratio());
  out.append(",\"store_ratio\":");
  AppendNumber(&out, Ratio(r.store_tokens, r.prompt_tokens));
  out.append(",\"duration_s\":");
  AppendNumber(&out, r.duration_s);
  out.append(",\"requests_per_s\":");
  AppendNumber(&out, r.requests_per_s());
  out.append(",\"output_tokens_per_s\":");
  AppendNumber(&out, r.output_tokens_per_s());
  out.append("},");
  AppendLatency(&out, "ttft_s", r.ttft);
  out.push_back(',');
  AppendLatency(&out, "tpot_s", r.tpot);
  out.push_back(',');
  AppendLatency(&out, "e2e_s", r.e2e);
  out.push_back(',');
  AppendLatency(&out, "engine_ttft_s", r.engine_ttft);
  out.push_back(',');
  AppendLatency(&out, "engine_above_floor_s", r.engine_above_floor);
  out.append(",\"error_kinds\":{");
  bool first = true;
  for (const auto& [kind, n] : r.error_kinds) {
    if (!first) out.push_back(',');
    first = false;
    common::AppendJsonString(out, kind);
    StrAppend(&out, ":", n);
  }
  out.append("},\"workers\":{");
  first = true;
  for (const auto& [worker, w] : r.workers) {
    if (!first) out.push_back(',');
    first = false;
    common::AppendJsonString(out, worker.empty() ? "unknown" : worker);
    StrAppend(&out, ":{\"requests\":", w.requests, ",\"errors\":", w.errors,
              ",\"prompt_tokens\":", w.prompt_tokens, ",\"cached_tokens\":", w.cached_tokens,
              ",\"store_tokens\":", w.store_tokens, ",\"cached_ratio\":");
    AppendNumber(&out, Ratio(w.cached_tokens, w.prompt_tokens));
    StrAppend(&out, ",\"max_concurrent\":", w.max_concurrent, "}");
  }
  out.append("},\"bounds\":");
  if (!r.bounds.computed) {
    out.append("null");
  } else {
    StrAppend(&out, "{\"input_tokens\":", r.bounds.input_tokens, ",\"ideal_reuse_ratio\":");
    AppendNumber(&out, r.bounds.ideal_reuse_ratio);
    out.append(",\"pooled_lru_reuse_ratio\":");
    AppendNumber(&out, r.bounds.pooled_lru_reuse_ratio);
    StrAppend(&out, ",\"capacity_tokens\":", r.bounds.capacity_tokens, "}");
  }
  out.append(",\"cached_prediction\":");
  AppendCachedPrediction(&out, r.cached_prediction);
  out.append(",\"prediction\":");
  AppendPrediction(&out, r.prediction);
  out.append(",\"floor\":");
  AppendFloor(&out, r.floor);
  out.append("}\n");
  return out;
}

std::string RecordsToJsonl(const std::vector<RequestRecord>& records) {
  std::string out;
  for (const auto& r : records) {
    out.append("{\"conversation\":");
    common::AppendJsonString(out, r.conversation);
    StrAppend(&out, ",\"index\":", r.index, ",\"send_s\":");
    AppendNumber(&out, r.send_s);
    out.append(",\"ttft_s\":");
    if (r.ttft_s < 0) {
      out.append("null");
    } else {
      AppendNumber(&out, r.ttft_s);
    }
    out.append(",\"e2e_s\":");
    AppendNumber(&out, r.e2e_s);
    StrAppend(&out, ",\"status\":", r.status, ",\"prompt_tokens\":", r.prompt_tokens,
              ",\"cached_tokens\":", r.cached_tokens, ",\"store_tokens\":", r.store_tokens,
              ",\"completion_tokens\":", r.completion_tokens, ",\"worker\":");
    common::AppendJsonString(out, r.worker);
    if (r.predicted_cached_tokens >= 0) {
      StrAppend(&out, ",\"predicted_cached_tokens\":", r.predicted_cached_tokens);
    } else {
      out.append(",\"predicted_cached_tokens\":null");
    }
    out.append(",\"prediction\":");
    if (!r.prediction.present()) {
      out.append("null");
    } else {
      out.append("{\"ttft\":");
      AppendNumber(&out, r.prediction.ttft_s);
      for (size_t k = 0; k < kPredictionParts.size(); ++k) {
        if (std::isnan(r.prediction.parts_s[k])) continue;  // Not in the header.
        StrAppend(&out, ",\"", kPredictionParts[k], "\":");
        AppendNumber(&out, r.prediction.parts_s[k]);
      }
      out.push_back('}');
    }
    if (r.floor_s >= 0) {
      StrAppend(&out, ",\"compulsory_tokens\":", r.compulsory_tokens, ",\"floor_s\":");
      AppendNumber(&out, r.floor_s);
    } else {
      out.append(",\"compulsory_tokens\":null,\"floor_s\":null");
    }
    out.append(",\"engine_ttft_s\":");
    if (r.engine_ttft_s < 0) {
      out.append("null");
    } else {
      AppendNumber(&out, r.engine_ttft_s);
    }
    out.append(",\"error\":");
    common::AppendJsonString(out, r.error);
    out.append("}\n");
  }
  return out;
}

std::string ReportToTable(const Report& r) {
  std::string out;
  auto ms = [](double s) { return s * 1000.0; };
  out += fmt::format("kvgate-replay  {}  ->  {}  ({}, api {}{})\n", r.trace, r.target, r.mode,
                     r.api.empty() ? "?" : r.api, r.responses_store ? " with store" : "");
  out += fmt::format("requests {}  ok {}  errors {}  conversations {}  duration {:.2f} s\n",
                     r.requests, r.ok, r.errors, r.conversations, r.duration_s);
  out += fmt::format("throughput {:.2f} req/s  {:.1f} output tok/s\n", r.requests_per_s(),
                     r.output_tokens_per_s());
  out += fmt::format("tokens prompt {}  cached {} ({:.1f}%)  completion {}\n", r.prompt_tokens,
                     r.cached_tokens, 100.0 * r.cached_ratio(), r.completion_tokens);
  if (r.store_tokens > 0) {
    out += fmt::format("  of the cached, loaded from the KV store {} ({:.1f}% of prompt tokens)\n",
                       r.store_tokens, 100.0 * Ratio(r.store_tokens, r.prompt_tokens));
  }
  out += fmt::format("\n{:<10}{:>10}{:>10}{:>10}{:>10}{:>8}\n", "latency", "mean ms", "p50 ms",
                     "p90 ms", "p99 ms", "n");
  auto row = [&](const char* name, const LatencySummary& s) {
    out += fmt::format("{:<10}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}{:>8}\n", name, ms(s.mean),
                       ms(s.p50), ms(s.p90), ms(s.p99), s.count);
  };
  row("TTFT", r.ttft);
  row("TPOT", r.tpot);
  row("E2E", r.e2e);
  if (r.floor.computed) {
    out += fmt::format(
        "TTFT floor (compulsory prefill at {:.0f} tok/s, no queueing): mean {:.2f} ms  p99 {:.2f} "
        "ms; TTFT above it: mean {:.2f} ms  p99 {:.2f} ms\n",
        r.floor.prefill_tokens_per_s, ms(r.floor.mean_s), ms(r.floor.p99_s),
        ms(r.floor.ttft_mean_above_s), ms(r.floor.ttft_p99_above_s));
  }
  if (r.engine_ttft.count > 0) {
    out += fmt::format("TTFT by the engines' clocks ({} requests): mean {:.2f} ms  p99 {:.2f} ms",
                       r.engine_ttft.count, ms(r.engine_ttft.mean), ms(r.engine_ttft.p99));
    if (r.engine_above_floor.count > 0) {
      out += fmt::format("; above the floor: mean {:.2f} ms  p99 {:.2f} ms",
                         ms(r.engine_above_floor.mean), ms(r.engine_above_floor.p99));
    }
    out += "\n";
  }
  if (r.prediction.count > 0) {
    const PredictionSummary& p = r.prediction;
    out += fmt::format(
        "TTFT prediction ({} requests): |error| p50 {:.1f}%  p90 {:.1f}%  bias {:+.1f}%  over "
        "{:.1f}%  under {:.1f}%\n  mean predicted {:.2f} ms",
        p.count, 100 * p.abs_error_p50, 100 * p.abs_error_p90, 100 * p.bias, 100 * p.over_share,
        100 * p.under_share, ms(p.predicted_ttft_mean_s));
    std::string parts;
    for (size_t k = 0; k < kPredictionParts.size(); ++k) {
      if (std::isnan(p.part_means_s[k])) continue;
      parts += fmt::format("{}{} {:.2f}", parts.empty() ? "" : "  ", kPredictionParts[k],
                           ms(p.part_means_s[k]));
    }
    if (!parts.empty()) out += fmt::format(" ({})", parts);
    out += fmt::format(", measured {:.2f} ms\n", ms(p.actual_ttft_mean_s));
  }
  if (r.cached_prediction.count > 0) {
    const CachedPredictionSummary& c = r.cached_prediction;
    out += fmt::format(
        "Cached-token prediction ({} requests): exact {:.1f}%  |error| mean {:.0f}  p90 {}  max {} "
        "tokens ({:.2f}% of prompt tokens)  over {}  under {}\n",
        c.count, 100.0 * static_cast<double>(c.exact) / static_cast<double>(c.count),
        c.abs_error_mean, c.abs_error_p90, c.abs_error_max, 100 * c.abs_error_share, c.over_tokens,
        c.under_tokens);
  }
  out += fmt::format("\n{:<36}{:>9}{:>8}{:>12}{:>12}{:>8}{:>9}\n", "worker", "requests", "errors",
                     "prompt", "cached", "cached%", "max conc");
  for (const auto& [worker, w] : r.workers) {
    out += fmt::format("{:<36}{:>9}{:>8}{:>12}{:>12}{:>8.1f}{:>9}\n",
                       worker.empty() ? "(unknown)" : worker, w.requests, w.errors, w.prompt_tokens,
                       w.cached_tokens, 100.0 * Ratio(w.cached_tokens, w.prompt_tokens),
                       w.max_concurrent);
  }
  if (!r.error_kinds.empty()) {
    out += "\nerrors:";
    for (const auto& [kind, n] : r.error_kinds) out += fmt::format(" {} {}", kind, n);
    out += "\n";
  }
  if (r.bounds.computed) {
    const std::string lru =
        r.bounds.capacity_tokens == 0
            ? std::string("pooled LRU n/a (no --fleet-capacity-tokens)")
            : fmt::format("pooled LRU ({} tokens) {:.1f}%", r.bounds.capacity_tokens,
                          100.0 * r.bounds.pooled_lru_reuse_ratio);
    out += fmt::format("\ntrace bounds: ideal reuse {:.1f}%  {}  of {} input tokens\n",
                       100.0 * r.bounds.ideal_reuse_ratio, lru, r.bounds.input_tokens);
  }
  return out;
}

}  // namespace kvgate::replay
