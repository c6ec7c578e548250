#include "router/policies/engine_stats.h"

#include <algorithm>
#include <string>

#include "common/strings.h"

namespace kvgate::router {
namespace {

// Value of label `name` in a `{a="x",b="y"}` block, or empty.
std::string_view LabelValue(std::string_view labels, std::string_view name) {
  size_t pos = 0;
  while ((pos = labels.find(name, pos)) != std::string_view::npos) {
    const bool starts = pos == 0 || labels[pos - 1] == '{' || labels[pos - 1] == ',';
    const size_t eq = pos + name.size();
    if (starts && eq + 1 < labels.size() && labels[eq] == '=' && labels[eq + 1] == '"') {
      const size_t end = labels.find('"', eq + 2);
      if (end == std::string_view::npos) return {};
      return labels.substr(eq + 2, end - eq - 2);
    }
    pos = eq;
  }
  return {};
}

}  // namespace

EngineStats ParseEngineMetrics(std::string_view text) {
  EngineStats s;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    std::string_view name = line.substr(0, std::min(brace, line.find(' ')));
    std::string_view labels;
    if (brace != std::string_view::npos && brace < space) {
      const size_t close = line.rfind('}');
      if (close == std::string_view::npos || close < brace) continue;
      labels = line.substr(brace, close - brace + 1);
    }
    double v = 0;
    if (!common::ParseDouble(line.substr(space + 1), &v)) continue;
    if (name == "vllm:num_requests_running" || name == "sglang:num_running_reqs") {
      s.running += v;
    } else if (name == "vllm:num_requests_waiting" || name == "sglang:num_queue_reqs") {
      s.waiting += v;
    } else if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc" ||
               name == "sglang:token_usage") {
      s.kv_usage = std::max(s.kv_usage, v);
    } else if (name == "vllm:prefix_cache_queries_total") {
      s.prefix_cache_queries += v;
    } else if (name == "vllm:prefix_cache_hits_total") {
      s.prefix_cache_hits += v;
    } else if (name == "vllm:cache_config_info") {
      uint64_t blocks = 0;
      uint64_t block_size = 0;
      if (common::ParseUint64(LabelValue(labels, "num_gpu_blocks"), &blocks)) {
        s.num_gpu_blocks += blocks;
      }
      if (common::ParseUint64(LabelValue(labels, "block_size"), &block_size)) {
        s.block_size = static_cast<uint32_t>(block_size);
      }
    } else {
      continue;
    }
    s.valid = true;
  }
  return s;
}

}  // namespace kvgate::router
