// The kvgate binary as a process: --check, SIGHUP reload, SIGTERM drain.
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A kvgate process with its output captured.
class Process : public ChildProcess {
 public:
  explicit Process(std::vector<std::string> args) : ChildProcess(WithBinary(std::move(args))) {}

 private:
  static std::vector<std::string> WithBinary(std::vector<std::string> args) {
    args.insert(args.begin(), BinDir() + "/kvgate");
    return args;
  }
};

std::string ConfigYaml(const std::vector<std::string>& workers) {
  std::string y =
      "listen: \"127.0.0.1:0\"\nthreads: 1\nhealth_check: {enabled: false}\n"
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
  EXPECT_THAT(v.Log(), HasSubstr(" (commit "));
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

// The admin token from a file (a mounted Secret): SIGHUP reads it again, so a rotated Secret
// replaces the token without a restart; a reload that cannot read it keeps the running one.
TEST(Process, SighupReadsTheAdminTokenFileAgain) {
  FakeUpstream f({});
  f.Start();
  const std::string token = WriteSecretFile("admin-token", "first-token\n");
  const std::string path =
      WriteTempFile("kvgate.yaml", ConfigYaml({f.url()}) + "admin: {token_file: " + token + "}\n");
  Process p({"--config", path});
  const uint16_t port = p.Port();
  ASSERT_NE(port, 0) << p.Log();
  const auto admin = [&](const std::string& t) {
    return Fetch(port, "GET", "/admin/workers", "", {{"Authorization", "Bearer " + t}}).status;
  };
  EXPECT_EQ(Fetch(port, "GET", "/admin/workers").status, 401);
  EXPECT_EQ(admin("first-token"), 200);
  std::ofstream(token, std::ios::trunc) << "second-token\n";
  p.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] { return admin("second-token") == 200; })) << p.Log();
  EXPECT_EQ(admin("first-token"), 401);
  ::chmod(token.c_str(), 0644);  // now readable by anyone: refused, the running token stays
  p.Signal(SIGHUP);
  EXPECT_TRUE(WaitFor([&] { return p.Log().find("open to other users") != std::string::npos; }))
      << p.Log();
  EXPECT_EQ(admin("second-token"), 200);
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

// drain_delay_ms: after SIGTERM /ready says 503 at once while requests, and new connections,
// are still served; only then do the listeners close.
TEST(Process, SigtermWithDrainDelayTurnsUnreadyFirstAndKeepsServing) {
  FakeUpstream f({});
  f.Start();
  const std::string path =
      WriteTempFile("kvgate.yaml", ConfigYaml({f.url()}) + "drain_delay_ms: 60000\n");
  Process p({"--config", path});
  const uint16_t port = p.Port();
  ASSERT_NE(port, 0) << p.Log();
  ASSERT_EQ(Fetch(port, "GET", "/ready").status, 200);
  p.Signal(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return Fetch(port, "GET", "/ready").status == 503; })) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr("serving 60000 ms more before draining"));
  EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  EXPECT_EQ(Fetch(port, "GET", "/health").status, 200);
  int code = -1;
  EXPECT_FALSE(p.Exited(&code));
  p.Signal(SIGKILL);  // the kubelet's, at the end of the grace period
}

}  // namespace
}  // namespace kvgate::testing
