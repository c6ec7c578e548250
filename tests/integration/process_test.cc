// The kvgate binary as a process: --check, SIGHUP reload, SIGTERM drain.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_util.h"

extern char** environ;

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string Binary() {
  const char* dir = std::getenv("KVGATE_BIN_DIR");
  return std::string(dir ? dir : KVGATE_TEST_BIN_DIR) + "/kvgate";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A running kvgate process with stdout/stderr captured to a file.
class Process {
 public:
  explicit Process(std::vector<std::string> args) {
    log_ = WriteTempFile("kvgate.log", "");
    args.insert(args.begin(), Binary());
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
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  // The port from the "listening on HOST:PORT" log line.
  uint16_t Port() {
    uint16_t port = 0;
    WaitFor([&] {
      std::smatch m;
      const std::string text = ReadFile(log_);
      if (std::regex_search(text, m, std::regex("listening on [^ ]+:([0-9]+) "))) {
        port = static_cast<uint16_t>(std::stoi(m[1]));
      }
      return port != 0;
    });
    return port;
  }
  void Signal(int sig) { kill(pid_, sig); }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool Exited(int* code) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }
  std::string Log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

std::string ConfigYaml(const std::vector<std::string>& workers) {
  std::string y = "listen: \"127.0.0.1:0\"\nthreads: 1\nhealth_check: {enabled: false}\n"
                  "routing: {policy: round_robin}\n"
                  "drain_timeout_ms: 10000\nworkers:\n";
  for (const auto& w : workers) y += "  - url: " + w + "\n";
  return y;
}

TEST(Process, CheckAcceptsValidConfig) {
  const std::string path = WriteTempFile("ok.yaml", ConfigYaml({"http://127.0.0.1:1"}));
  Process p({"--config", path, "--check"});
  EXPECT_EQ(p.Wait(), 0) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr("configuration OK"));
}

TEST(Process, CheckRejectsBadConfigNamingKeyAndLine) {
  const std::string path =
      WriteTempFile("bad.yaml", "threads: 1\nworkers:\n  - url: http://a:1\n    wieght: 2\n");
  Process p({"--config", path, "--check"});
  EXPECT_NE(p.Wait(), 0);
  EXPECT_THAT(p.Log(), HasSubstr("bad.yaml:4: workers[0].wieght: unknown key"));
}

TEST(Process, VersionAndHelp) {
  Process v({"--version"});
  EXPECT_EQ(v.Wait(), 0);
  EXPECT_THAT(v.Log(), HasSubstr("kvgate "));
  Process h({"--help"});
  EXPECT_EQ(h.Wait(), 0);
  EXPECT_THAT(h.Log(), HasSubstr("--listen HOST:PORT"));
  Process bad({"--frobnicate"});
  EXPECT_NE(bad.Wait(), 0);
}

TEST(Process, QuickStartWithoutConfigFile) {
  FakeUpstream f({});
  f.Start();
  Process p({"--listen", "127.0.0.1:0", "--worker", f.url(), "--threads", "1"});
  const uint16_t port = p.Port();
  ASSERT_NE(port, 0) << p.Log();
  EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  EXPECT_EQ(Fetch(port, "GET", "/ready").status, 200);
}

TEST(Process, SighupReloadAddsWorker) {
  FakeUpstream a({});
  FakeUpstream b({});
  a.Start();
  b.Start();
  const std::string path = WriteTempFile("kvgate.yaml", ConfigYaml({a.url()}));
  Process p({"--config", path});
  const uint16_t port = p.Port();
  ASSERT_NE(port, 0) << p.Log();
  ASSERT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  std::ofstream(path) << ConfigYaml({a.url(), b.url()});
  p.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] {
    return Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status == 200 &&
           b.requests() > 0;
  })) << p.Log();
  // A bad file is rejected and the running config stays.
  std::ofstream(path) << "workers: [\n";
  p.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] { return p.Log().find("reload rejected") != std::string::npos; }));
  EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
}

TEST(Process, SigtermDrainsInFlightStreams) {
  FakeUpstream f({});
  f.Start();
  const std::string path = WriteTempFile("kvgate.yaml", ConfigYaml({f.url()}));
  Process p({"--config", path});
  const uint16_t port = p.Port();
  ASSERT_NE(port, 0) << p.Log();
  StreamingRequest s(port, "/v1/chat/completions", ChatBody(true),
                     {{"x-fake-mode", "lockstep"}, {"x-fake-chunks", "4"}});
  ASSERT_TRUE(s.ReadHeader());
  p.Signal(SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return p.Log().find("draining") != std::string::npos; }));
  int code = -1;
  EXPECT_FALSE(p.Exited(&code));  // still serving the stream
  for (int i = 0; i < 4; ++i) f.ReleaseChunk();
  EXPECT_THAT(s.ReadAll(5s), HasSubstr("[DONE]"));
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(WaitFor([&] { return p.Exited(&code); }, 10s)) << p.Log();
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace kvgate::testing
