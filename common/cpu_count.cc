#include "common/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace kvgate::common {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

// CPUs for a quota of `quota` per `period` microseconds, rounded up; 0 (no limit to obey) for
// a zero quota. -1 when either is not a number (v1 writes -1 for "no limit").
int CpusFromQuota(std::string_view quota, std::string_view period) {
  uint64_t q = 0, p = 0;
  if (!ParseUint64(Trim(quota), &q) || !ParseUint64(Trim(period), &p) || p == 0) return -1;
  return q == 0 ? 0 : static_cast<int>(std::max<uint64_t>(1, (q + p - 1) / p));
}

// `path` and each parent up to "/", deepest first.
std::vector<std::string> SelfAndParents(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path.empty() ? "/" : path);
    const size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) break;
    path.resize(slash);
  }
  return out;
}

// The smaller of two limits, where 0 and below is "none".
int MinLimit(int a, int b) { return a <= 0 ? std::max(b, 0) : (b <= 0 ? a : std::min(a, b)); }

}  // namespace

int CpusFromCpuMax(std::string_view text) {
  text = Trim(text);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return -1;
  const std::string_view quota = text.substr(0, space);
  const std::string_view period = text.substr(space + 1);
  if (quota != "max") return CpusFromQuota(quota, period);
  uint64_t p = 0;
  return ParseUint64(Trim(period), &p) && p > 0 ? 0 : -1;
}

int CgroupCpuLimit(const std::string& cgroup_root, std::string_view proc_cgroup) {
  int limit = 0;
  // Lines are "id:controllers:path": "0::/p" for v2, "N:cpu,cpuacct:/p" for v1's cpu.
  for (const absl::string_view line :
       absl::StrSplit(absl::string_view(proc_cgroup.data(), proc_cgroup.size()), '\n')) {
    const size_t a = line.find(':');
    const size_t b = a == absl::string_view::npos ? a : line.find(':', a + 1);
    if (b == absl::string_view::npos) continue;
    const absl::string_view controllers = line.substr(a + 1, b - a - 1);
    const std::string path(line.substr(b + 1));
    if (controllers.empty()) {
      for (const std::string& dir : SelfAndParents(path)) {
        limit =
            MinLimit(limit, CpusFromCpuMax(ReadSmallFile(StrCat(cgroup_root, dir, "/cpu.max"))));
      }
      continue;
    }
    const std::vector<absl::string_view> names = absl::StrSplit(controllers, ',');
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    const std::string v1 =
        StrCat(cgroup_root, "/", std::string_view(controllers.data(), controllers.size()));
    for (const std::string& dir : SelfAndParents(path)) {
      const std::string base = StrCat(v1, dir == "/" ? "" : dir);
      limit = MinLimit(limit, CpusFromQuota(ReadSmallFile(base + "/cpu.cfs_quota_us"),
                                            ReadSmallFile(base + "/cpu.cfs_period_us")));
    }
  }
  return limit;
}

int UsableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  const int quota = CgroupCpuLimit("/sys/fs/cgroup", ReadSmallFile("/proc/self/cgroup"));
  if (quota > 0) cpus = std::min(cpus, quota);
  return std::max(1, cpus);
}

}  // namespace kvgate::common
