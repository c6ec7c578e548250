// File: common/cpu_count.h
// How many CPUs this process may really use: the CPUs its affinity mask allows, lowered to the
// cgroup CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`) of its own cgroup and every
// parent. A pod on a 64-core node with a 2-CPU limit gets 2, not 64 (what
// std::thread::hardware_concurrency answers). Used for `threads: 0`.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::common {

/// CPUs granted by a cgroup v2 `cpu.max` line ("max 100000" -> 0 for no limit,
/// "150000 100000" -> 2: a fractional quota rounds up). -1 when the text is not a cpu.max line.
int CpusFromCpuMax(std::string_view text);

/// The smallest quota, in CPUs, set on the cgroup `/proc/self/cgroup` names (`proc_cgroup`'s
/// text) or any parent of it, read under `cgroup_root` (normally /sys/fs/cgroup; v2 unified or
/// v1 `cpu` controller). 0 when no level sets a limit or the files are absent.
int CgroupCpuLimit(const std::string& cgroup_root, std::string_view proc_cgroup);

/// min(CPUs in the affinity mask, the cgroup limit), at least 1.
int UsableCpus();

}  // namespace kvgate::common
