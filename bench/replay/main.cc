// kvgate-replay: trace replayer and load generator for kvgate. See docs/replay.md.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/replay/cli.h"
#include "bench/replay/replayer.h"
#include "common/build_info.h"

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-replay")) return 0;
  using namespace kvgate::replay;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto cli = ParseCommandLine(args);
  if (!cli.ok()) {
    std::fprintf(stderr, "kvgate-replay: %s\n\n%s", std::string(cli.status().message()).c_str(),
                 Usage().c_str());
    return 2;
  }
  if (cli->help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  auto result = RunReplay(cli->replay);
  if (!result.ok()) {
    std::fprintf(stderr, "kvgate-replay: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (!cli->report_path.empty()) {
    std::ofstream out(cli->report_path, std::ios::trunc);
    out << ReportToJson(result->report);
    if (!out) {
      std::fprintf(stderr, "kvgate-replay: cannot write %s\n", cli->report_path.c_str());
      return 1;
    }
  }
  if (!cli->records_path.empty()) {
    std::ofstream out(cli->records_path, std::ios::trunc);
    out << RecordsToJsonl(result->records);
    if (!out) {
      std::fprintf(stderr, "kvgate-replay: cannot write %s\n", cli->records_path.c_str());
      return 1;
    }
  }
  if (!cli->request_sample_path.empty()) {
    std::ofstream out(cli->request_sample_path, std::ios::trunc);
    out << RequestsToJsonl(result->sampled_requests);
    if (!out) {
      std::fprintf(stderr, "kvgate-replay: cannot write %s\n", cli->request_sample_path.c_str());
      return 1;
    }
  }
  if (cli->table) std::fputs(ReportToTable(result->report).c_str(), stdout);
  return 0;
}
