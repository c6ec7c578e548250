// File: common/process_metrics.h
// The standard Prometheus process collector's metrics (process_cpu_seconds_total,
// process_resident_memory_bytes, process_start_time_seconds, process_open_fds, ...) read from
// /proc/self, and kvgate_build_info, as exposition text that kvgate's and kvgate-store's
// /metrics append to their own.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::common {

/// Text exposition format (version 0.0.4): the process_* families (absent on a system without
/// /proc) and `kvgate_build_info{program,version,commit} 1`.
std::string ProcessMetricsText(std::string_view program);

}  // namespace kvgate::common
