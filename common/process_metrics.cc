#include "common/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/build_info.h"

namespace kvgate::common {
namespace {

void Family(std::string* out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  char num[64];
  const auto end = std::to_chars(num, num + sizeof(num), value).ptr;  // shortest round trip
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
  out->append(name).append(" ").append(num, end).append("\n");
}

// Fields of /proc/self/stat after the command name (which may hold spaces and parentheses):
// fields[0] is field 3 (state) of proc(5).
bool StatFields(std::vector<std::string>* fields) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) fields->push_back(f);
  return fields->size() > 21;
}

double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  double n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory's own descriptor
}

}  // namespace

std::string ProcessMetricsText(std::string_view program) {
  std::string out;
  std::vector<std::string> f;
  if (StatFields(&f)) {
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    // proc(5): utime 14, stime 15, starttime 22, vsize 23, rss 24 (fields[n - 3]).
    Family(&out, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.",
           (std::stod(f[11]) + std::stod(f[12])) / ticks);
    Family(&out, "process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.",
           BootTime() + std::stod(f[19]) / ticks);
    Family(&out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
           std::stod(f[20]));
    Family(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           std::stod(f[21]) * page);
  }
  if (const double fds = OpenFds(); fds >= 0) {
    Family(&out, "process_open_fds", "gauge", "Number of open file descriptors.", fds);
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    Family(&out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
           static_cast<double>(lim.rlim_cur));
  }
  out.append(
      "# HELP kvgate_build_info The program, version and git commit this process was built "
      "from (always 1)\n# TYPE kvgate_build_info gauge\nkvgate_build_info{program=\"");
  out.append(program).append("\",version=\"").append(BuildVersion());
  out.append("\",commit=\"").append(BuildCommit()).append("\"} 1\n");
  return out;
}

}  // namespace kvgate::common
