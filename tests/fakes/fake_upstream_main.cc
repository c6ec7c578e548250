// kvgate-fake-upstream: the test suite's fake worker as a process, for `make demo` and the
// proxy benchmark. Prints "port=N" once listening; runs until SIGTERM/SIGINT.
#include <boost/asio.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "common/build_info.h"
#include "common/strings.h"
#include "tests/fakes/fake_upstream.h"

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-fake-upstream")) return 0;
  kvgate::testing::FakeUpstream::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    uint64_t v = 0;
    if (arg == "--port" && kvgate::common::ParseUint64(next(), &v)) {
      o.port = static_cast<uint16_t>(v);
    } else if (arg == "--threads" && kvgate::common::ParseUint64(next(), &v)) {
      o.threads = static_cast<uint32_t>(v);
    } else if (arg == "--chunks" && kvgate::common::ParseUint64(next(), &v)) {
      o.chunks = static_cast<uint32_t>(v);
    } else if (arg == "--delay-ms" && kvgate::common::ParseUint64(next(), &v)) {
      o.delay_ms = static_cast<uint32_t>(v);
    } else if (arg == "--model") {
      o.model = next();
    } else {
      std::cerr << "usage: kvgate-fake-upstream [--port P] [--threads N] [--chunks N] "
                   "[--delay-ms D] [--model NAME]\n";
      return 2;
    }
  }
  kvgate::testing::FakeUpstream fake(o);
  fake.Start();
  std::printf("port=%u\n", fake.port());
  std::fflush(stdout);
  boost::asio::io_context ctx;
  boost::asio::signal_set signals(ctx, SIGTERM, SIGINT);
  signals.async_wait([](const boost::system::error_code&, int) {});
  ctx.run();
  fake.Stop();
  return 0;
}
