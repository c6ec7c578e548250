#include "sim/sim_metrics.h"

#include "common/json_util.h"
#include "common/strings.h"

namespace kvgate::sim {

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
    common::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  auto gauge = [&](std::string_view name, std::string_view help, auto value_of) {
    family(name, "gauge", help);
    for (const auto& r : runners) {
      common::StrAppend(&out, name, labels(*r), " ", static_cast<double>(value_of(*r)), "\n");
    }
  };
  auto counter = [&](std::string_view name, std::string_view help, auto value_of) {
    family(name, "counter", help);
    for (const auto& r : runners) {
      // Exact integers: "%.6g" would round token counts in the millions.
      common::StrAppend(&out, name, "_total", labels(*r), " ",
                        uint64_t{value_of(r->engine().counters())}, "\n");
    }
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
      common::StrAppend(&out, name, "_bucket", labels(*r, ",le=\"+Inf\""), " ",
                        static_cast<double>(h.count), "\n", name, "_sum", labels(*r), " ", h.sum,
                        "\n", name, "_count", labels(*r), " ", static_cast<double>(h.count), "\n");
    }
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        [](const EngineRunner& r) { return r.engine().num_running(); });
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        [](const EngineRunner& r) { return r.engine().num_waiting(); });
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        [](const EngineRunner& r) { return r.engine().pool().Usage(); });
  gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (deprecated alias).",
        [](const EngineRunner& r) { return r.engine().pool().Usage(); });
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
  family("vllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& r : runners) {
    common::StrAppend(&out, "vllm:request_success_total", labels(*r, ",finished_reason=\"length\""),
                      " ", static_cast<double>(r->engine().counters().finished), "\n");
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
