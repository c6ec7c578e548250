// kvgate: the gateway binary. Wires the CLI, signals and the Gateway together.
#include <malloc.h>

#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "common/build_info.h"
#include "common/logging.h"
#include "common/strings.h"
#include "net/asio.h"
#include "router/server/cli.h"
#include "router/server/gateway.h"
#include "spdlog/spdlog.h"

namespace {

// An agent's request body is 100 KB-1 MB, and each request allocates and frees a few buffers of
// its size (the body, its canonical prompt). glibc gave every freed one back to the kernel
// (madvise) and faulted the pages in again for the next request: 0.5-1 madvise a request and
// about a third of the 400 KB rows' throughput (docs/benchmarks.md, issue 31). Each thread's heap
// now keeps up to 32 MiB free, and buffers up to 32 MiB come from it. Operators who set glibc's
// malloc tunables themselves keep theirs. With tcmalloc (router/CMakeLists.txt) glibc's malloc
// is not used: tcmalloc keeps freed spans in its page heap and returns them to the kernel slowly.
void KeepLargeBuffersInTheHeap() {
#if !defined(KVGATE_WITH_TCMALLOC)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  constexpr int kBytes = 32 << 20;
  mallopt(M_MMAP_THRESHOLD, kBytes);
  mallopt(M_TRIM_THRESHOLD, kBytes);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvgate;
  KeepLargeBuffersInTheHeap();
  common::InitLogging();
  auto options = router::ParseCli(argc, argv);
  if (!options.ok()) {
    std::cerr << "kvgate: " << options.status().message() << "\n";
    return 2;
  }
  if (options->help) {
    std::cout << router::CliUsage();
    return 0;
  }
  if (options->version) {
    std::cout << common::VersionLine("kvgate") << "\n";
    return 0;
  }
  auto cfg = router::BuildConfig(*options);
  if (!cfg.ok()) {
    std::cerr << "kvgate: invalid configuration:\n" << cfg.status().message() << "\n";
    return 1;
  }
  if (options->check) {
    // Everything start does short of binding and serving: the TLS certificates and keys, the
    // access log, the snapshot of the workers. A config --check passes must start.
    if (auto checked = router::Gateway::Create(*cfg); !checked.ok()) {
      std::cerr << "kvgate: invalid configuration:\n" << checked.status().message() << "\n";
      return 1;
    }
    std::cout << "configuration OK: " << cfg->workers.size() << " workers, policy "
              << cfg->routing.policy << "\n";
    return 0;
  }
  (void)common::SetLogLevel(cfg->log_level);
  (void)common::SetLogFormat(cfg->log_format);
  if (cfg->workers.empty()) spdlog::warn("no workers configured: every request will get 503");

  const auto drain_timeout = std::chrono::milliseconds(cfg->drain_timeout_ms);
  const auto drain_delay = std::chrono::milliseconds(cfg->drain_delay_ms);
  auto gateway = router::Gateway::Create(*cfg);
  if (!gateway.ok()) {
    std::cerr << "kvgate: " << gateway.status().message() << "\n";
    return 1;
  }
  // Signals are handled on the main thread, away from the gateway's event loops. Caught from
  // before the listener opens: a SIGHUP sent as soon as the port answered killed the process
  // (SIGHUP's default action) when it came before this set existed.
  router::net::io_context signals_ctx;
  router::net::signal_set signals(signals_ctx, SIGHUP, SIGTERM, SIGINT);
  signals.add(SIGUSR1);
  std::signal(SIGPIPE, SIG_IGN);
  if (auto s = (*gateway)->Start(); !s.ok()) {
    std::cerr << "kvgate: " << s.message() << "\n";
    return 1;
  }
  int exit_code = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          spdlog::info("SIGHUP: reloading configuration");
          auto next = router::BuildConfig(*options);
          if (!next.ok()) {
            (*gateway)->ReloadRejected(next.status());
          } else {
            const std::string level = next->log_level, format = next->log_format;
            if ((*gateway)->Reload(*std::move(next)).ok()) {
              (void)common::SetLogLevel(level);
              (void)common::SetLogFormat(format);
            }
          }
          signals.async_wait(on_signal);
          return;
        }
        if (sig == SIGUSR1) {
          // logrotate's postrotate: the access log's file was moved away; write a new one.
          if (auto s = (*gateway)->ReopenLogs(); !s.ok()) {
            spdlog::error("SIGUSR1: cannot reopen the access log: {}", s.message());
          } else {
            spdlog::info("SIGUSR1: access log reopened");
          }
          signals.async_wait(on_signal);
          return;
        }
        const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        if (drain_delay.count() > 0) {
          // Not ready first, still serving: the endpoints controller takes the pod out of
          // Services while clients can still connect.
          spdlog::info("{}: not ready; serving {} ms more before draining", name,
                       drain_delay.count());
          (*gateway)->StopReadiness();
          std::this_thread::sleep_for(drain_delay);
        }
        spdlog::info("{}: draining", name);
        const bool clean = (*gateway)->Drain(drain_timeout);
        spdlog::info("drained {}; exiting", clean ? "cleanly" : "at the deadline");
        exit_code = 0;
      };
  signals.async_wait(on_signal);
  signals_ctx.run();
  spdlog::default_logger()->flush();
  return exit_code;
}
