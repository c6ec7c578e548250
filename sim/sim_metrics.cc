#include "sim/sim_metrics.h"

#include <chrono>
#include <cstdio>

#include "common/json_util.h"
#include "common/strings.h"

namespace kvgate::sim {
namespace {

// Taken at static initialisation: before main() makes the servers and their series.
const double kSimMetricsCreatedUnixSeconds =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

}  // namespace

void AppendMetricFamily(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help) {
  common::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void AppendCounter(std::string* out, std::string_view name, std::string_view help,
                   const std::vector<std::pair<std::string, uint64_t>>& samples) {
  const std::string total = common::StrCat(name, "_total");
  AppendMetricFamily(out, total, "counter", help);
  std::vector<std::string> label_sets;
  for (const auto& [labels, value] : samples) {
    // Exact integers: "%.6g" would round token counts in the millions.
    common::StrAppend(out, total, labels, " ", value, "\n");
    label_sets.push_back(labels);
  }
  AppendCreated(out, name, help, label_sets);
}

void AppendCreated(std::string* out, std::string_view name, std::string_view help,
                   const std::vector<std::string>& label_sets) {
  const std::string created = common::StrCat(name, "_created");
  AppendMetricFamily(out, created, "gauge", help);
  // Full precision, as prometheus_client's "1.712345678123e+09" ("%.6g" would be 1e4 s off).
  char when[32];
  const int n = std::snprintf(when, sizeof(when), "%.12e", kSimMetricsCreatedUnixSeconds);
  const std::string_view value(when, n > 0 ? static_cast<size_t>(n) : 0);
  for (const auto& labels : label_sets) common::StrAppend(out, created, labels, " ", value, "\n");
}

std::string RenderSimMetrics(const SimOptions& options,
                             const std::vector<std::unique_ptr<EngineRunner>>& runners,
                             bool with_store, const PdAgent* pd) {
  std::string out;
  std::string model;
  common::AppendJsonString(model, options.model);  // A quoted label value.
  auto labels = [&](const EngineRunner& r, std::string_view extra = "") {
    return common::StrCat("{engine=\"", r.rank(), "\",model_name=", model, extra, "}");
  };
  auto family = [&](std::string_view name, std::string_view type, std::string_view help) {
    AppendMetricFamily(&out, name, type, help);
  };
  auto all_labels = [&](std::string_view extra = "") {
    std::vector<std::string> sets;
    for (const auto& r : runners) sets.push_back(labels(*r, extra));
    return sets;
  };
  auto gauge = [&](std::string_view name, std::string_view help, auto value_of) {
    family(name, "gauge", help);
    for (const auto& r : runners) {
      common::StrAppend(&out, name, labels(*r), " ", static_cast<double>(value_of(*r)), "\n");
    }
  };
  auto counter = [&](std::string_view name, std::string_view help, auto value_of) {
    std::vector<std::pair<std::string, uint64_t>> samples;
    for (const auto& r : runners) {
      samples.emplace_back(labels(*r), uint64_t{value_of(r->engine().counters())});
    }
    AppendCounter(&out, name, help, samples);
  };
  auto histogram = [&](std::string_view name, std::string_view help, auto hist_of) {
    family(name, "histogram", help);
    for (const auto& r : runners) {
      const Histogram& h = hist_of(*r);
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        common::StrAppend(&out, name, "_bucket",
                          labels(*r, common::StrCat(",le=\"", h.bounds[i], "\"")), " ",
                          static_cast<double>(h.counts[i]), "\n");
      }
      // prometheus_client's order: the buckets, _count, _sum.
      common::StrAppend(&out, name, "_bucket", labels(*r, ",le=\"+Inf\""), " ",
                        static_cast<double>(h.count), "\n", name, "_count", labels(*r), " ",
                        static_cast<double>(h.count), "\n", name, "_sum", labels(*r), " ", h.sum,
                        "\n");
    }
    AppendCreated(&out, name, help, all_labels());
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        [](const EngineRunner& r) { return r.engine().num_running(); });
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        [](const EngineRunner& r) { return r.engine().num_waiting(); });
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        [](const EngineRunner& r) { return r.engine().kv_cache().Usage(); });
  gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (deprecated alias).",
        [](const EngineRunner& r) { return r.engine().kv_cache().Usage(); });
  counter("vllm:prefix_cache_queries",
          "Prefix cache queries, in terms of number of queried tokens.",
          [](const EngineCounters& c) { return c.prefix_cache_queries; });
  counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          [](const EngineCounters& c) { return c.prefix_cache_hits; });
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
          [](const EngineCounters& c) { return c.prompt_tokens; });
  counter("vllm:generation_tokens", "Number of generation tokens processed.",
          [](const EngineCounters& c) { return c.generation_tokens; });
  counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
          [](const EngineCounters& c) { return c.preemptions; });
  {
    std::vector<std::pair<std::string, uint64_t>> samples;
    for (const auto& r : runners) {
      samples.emplace_back(labels(*r, ",finished_reason=\"length\""),
                           r->engine().counters().finished);
    }
    AppendCounter(&out, "vllm:request_success", "Count of successfully processed requests.",
                  samples);
  }
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            [](const EngineRunner& r) -> const Histogram& { return r.ttft(); });
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            [](const EngineRunner& r) -> const Histogram& { return r.e2e(); });
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            [](const EngineRunner& r) -> const Histogram& { return r.queue(); });
  family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  const Profile& p = options.profile;
  for (const auto& r : runners) {
    common::StrAppend(&out, "vllm:cache_config_info{block_size=\"", p.block_size,
                      "\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"", r->rank(),
                      "\",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"", p.num_cpu_blocks,
                      "\",num_gpu_blocks=\"", p.num_gpu_blocks,
                      "\",prefix_caching_hash_algo=\"xxh3_64\"} 1.0\n");
  }
  gauge("kvgate_sim_lag_seconds",
        "Real seconds the last step ended behind its simulated deadline (simulator health).",
        [](const EngineRunner& r) { return r.lag(); });
  gauge("kvgate_sim_max_lag_seconds", "Largest kvgate_sim_lag_seconds seen.",
        [](const EngineRunner& r) { return r.max_lag(); });
  gauge("kvgate_sim_time_seconds", "Simulated clock of the engine.",
        [](const EngineRunner& r) { return r.sim_now(); });
  counter("kvgate_sim_steps", "Engine steps run.", [](const EngineCounters& c) { return c.steps; });
  counter("kvgate_sim_usage_cached_tokens",
          "Sum of the cached_tokens the responses reported (each request once).",
          [](const EngineCounters& c) { return c.usage_cached_tokens; });
  if (with_store) {
    counter("vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in "
            "terms of number of queried tokens.",
            [](const EngineCounters& c) { return c.external_prefix_cache_queries; });
    counter("vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in "
            "terms of number of cached tokens.",
            [](const EngineCounters& c) { return c.external_prefix_cache_hits; });
    counter("kvgate_sim_store_lookups", "Store lookups asked (an admission attempt each).",
            [](const EngineCounters& c) { return c.store_lookups; });
    counter("kvgate_sim_store_lookup_blocks", "Blocks the store lookups named.",
            [](const EngineCounters& c) { return c.store_lookup_blocks; });
    counter("kvgate_sim_usage_store_tokens",
            "Of kvgate_sim_usage_cached_tokens, those loaded from the store.",
            [](const EngineCounters& c) { return c.usage_store_tokens; });
  }
  uint64_t held_blocks = 0;
  for (const auto& r : runners) held_blocks += r->engine().num_held_blocks();
  AppendPdMetrics(pd ? pd->counters() : PdCounters{}, held_blocks, pd ? pd->held_requests() : 0,
                  &out);
  return out;
}

}  // namespace kvgate::sim
