// kvgate-sim: the simulated vLLM fleet binary. See docs/simulator.md.
#include <iostream>

#include "common/build_info.h"
#include "common/logging.h"
#include "sim/cli.h"
#include "sim/server.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  using namespace kvgate;
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-sim")) return 0;
  common::InitLogging();
  auto options = sim::ParseSimCli(argc, argv);
  if (!options.ok()) {
    std::cerr << "kvgate-sim: " << options.status().message() << "\n";
    return 2;
  }
  if (options->help) {
    std::cout << sim::SimUsage();
    return 0;
  }
  if (auto s = common::SetLogLevel(options->log_level); !s.ok()) {
    std::cerr << "kvgate-sim: " << s.message() << "\n";
    return 2;
  }
  sim::SimProcess process(*options);
  if (auto s = process.Start(); !s.ok()) {
    std::cerr << "kvgate-sim: " << s.message() << "\n";
    return 1;
  }
  const auto ports = process.ports();
  for (size_t i = 0; i < ports.size(); ++i) {
    std::cout << "port=" << ports[i] << " worker=" << i << "\n";
  }
  const auto bootstrap = process.bootstrap_ports();
  for (size_t i = 0; i < bootstrap.size(); ++i) {
    std::cout << "bootstrap port=" << bootstrap[i] << " worker=" << i << "\n";
  }
  for (const auto& e : process.event_endpoints()) {
    std::cout << "kv_events worker=" << e.worker << " rank=" << e.rank << " endpoint=" << e.endpoint
              << " replay=" << e.replay_endpoint << "\n";
  }
  std::cout << "ready" << std::endl;
  spdlog::info("kvgate-sim: {} worker(s) x {} engine(s), model {}, profile {}, time scale {}",
               options->workers, options->dp_size, options->model, options->profile.name,
               options->time_scale);
  process.Run();
  spdlog::info("kvgate-sim: stopped: {}", process.Summary());
  return 0;
}
