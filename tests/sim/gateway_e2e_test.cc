// The gateway (kvgate, a separate process) in front of an in-process kvgate-sim: requests are
// proxied and streamed tokens arrive incrementally, not in one piece at the end.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/sim/server.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_util.h"

extern char** environ;

namespace kvgate::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// KVGATE_GATEWAY_BIN, else the kvgate next to this test, else build/debug/bin/kvgate.
std::string GatewayBinary() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KVGATE_GATEWAY_BIN")) candidates.push_back(env);
  candidates.push_back(std::string(KVGATE_TEST_BIN_DIR) + "/kvgate");
  candidates.push_back(std::string(KVGATE_TEST_SOURCE_DIR) + "/build/debug/bin/kvgate");
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

class Gateway {
 public:
  Gateway(const std::string& binary, const std::string& worker_url) {
    log_ = testing::WriteTempFile("kvgate.log", "");
    std::vector<std::string> args = {binary, "--listen", "127.0.0.1:0", "--worker", worker_url,
                                     "--threads", "1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_APPEND, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_APPEND, 0);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Gateway() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  uint16_t Port() const {
    uint16_t port = 0;
    testing::WaitFor([&] {
      std::smatch m;
      const std::string text = Log();
      if (std::regex_search(text, m, std::regex("listening on [^ ]+:([0-9]+) "))) {
        port = static_cast<uint16_t>(std::stoi(m[1]));
      }
      return port != 0;
    });
    return port;
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

TEST(GatewayEndToEnd, ProxiesToTheSimulatorAndStreamsIncrementally) {
  const std::string binary = GatewayBinary();
  if (binary.empty()) GTEST_SKIP() << "kvgate binary not built (set KVGATE_GATEWAY_BIN)";
  SimOptions o;
  o.base_port = 0;
  o.time_scale = 1.0;  // Real time: a decode step is ~7 ms, so 12 tokens take ~80 ms.
  o.profile.num_gpu_blocks = 512;
  SimProcess sim(o);
  ASSERT_TRUE(sim.Start().ok());
  sim.StartThread();
  Gateway gw(binary, common::StrCat("http://127.0.0.1:", sim.ports()[0]));
  const uint16_t port = gw.Port();
  ASSERT_NE(port, 0) << gw.Log();

  const std::string body =
      R"({"model":"sim-model","messages":[{"role":"user","content":"Tell me about caches."}],)"
      R"("max_tokens":12,"stream":true,"stream_options":{"include_usage":true}})";
  auto whole = testing::Fetch(port, "POST", "/v1/chat/completions",
                              R"({"model":"sim-model","messages":[{"role":"user","content":"hi"}],)"
                              R"("max_tokens":3})");
  ASSERT_EQ(whole.status, 200) << whole.body << gw.Log();
  EXPECT_THAT(whole.body, HasSubstr(R"("completion_tokens":3)"));

  testing::StreamingRequest s(port, "/v1/chat/completions", body, {{"x-request-id", "e2e-1"}});
  ASSERT_TRUE(s.ReadHeader());
  ASSERT_EQ(s.status(), 200) << gw.Log();
  EXPECT_EQ(s.Header("x-request-id"), "e2e-1");
  const std::string first = s.ReadSome();
  EXPECT_THAT(first, Not(HasSubstr("[DONE]")));  // The rest is still being generated.
  std::string all = first;
  int pieces = 1;
  while (!s.done()) {
    const std::string piece = s.ReadSome();
    if (piece.empty()) break;
    all += piece;
    ++pieces;
  }
  EXPECT_GE(pieces, 3) << all;  // Role chunk and tokens arrive over ~12 engine steps.
  EXPECT_THAT(all, HasSubstr("data: [DONE]"));
  EXPECT_THAT(all, HasSubstr(R"("completion_tokens":12)"));
  sim.Stop();
}

}  // namespace
}  // namespace kvgate::sim
