// The kvgate binary as a process: --check, SIGHUP reload, SIGTERM drain.
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ConfigYaml(const std::vector<std::string>& workers) {
  std::string y =
      "listen: \"127.0.0.1:0\"\nthreads: 1\nhealth_check: {enabled: false}\n"
      "routing: {policy: round_robin}\n"
      "drain_timeout_ms: 10000\nworkers:\n";
  for (const auto& w : workers) y += "  - url: " + w + "\n";
  return y;
}

// One fake worker and a kvgate process serving it with ConfigYaml plus `extra` (the file stays
// at `path`, for the reload tests). Tests take its parts by name: auto& [f, path, p, port] = g.
struct GatewayOnFake {
  explicit GatewayOnFake(const std::string& extra = "")
      : path(WriteTempFile("kvgate.yaml", ConfigYaml({StartedUrl(fake)}) + extra)),
        p({"--config", path}),
        port(p.Port()) {}
  static std::string StartedUrl(FakeUpstream& f) {
    f.Start();
    return f.url();
  }
  FakeUpstream fake{{}};
  std::string path;
  Process p;
  uint16_t port;
};

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
  const std::string token = WriteSecretFile("admin-token", "first-token\n");
  GatewayOnFake g("admin: {token_file: " + token + "}\n");
  auto& [f, path, p, port] = g;
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
  GatewayOnFake g;
  auto& [f, path, p, port] = g;
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
  GatewayOnFake g("drain_delay_ms: 60000\n");
  auto& [f, path, p, port] = g;
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

// Issue 33, config that lied: a directory passed --check with 0 workers, duplicate keys passed
// and the first won, and `listen: localhost:8000` passed --check and then failed at start.
TEST(Process, CheckRefusesWhatStartWouldRefuse) {
  Process dir({"--config", "/tmp", "--check"});
  EXPECT_NE(dir.Wait(), 0);
  EXPECT_THAT(dir.Log(), HasSubstr("/tmp: cannot read config file: Is a directory"));
  const std::string dup =
      WriteTempFile("dup.yaml",
                    "listen: 127.0.0.1:8000\nworkers: [{url: 'http://127.0.0.1:1'}]\n"
                    "listen: 127.0.0.1:9000\n");
  Process d({"--config", dup, "--check"});
  EXPECT_NE(d.Wait(), 0);
  EXPECT_THAT(d.Log(), HasSubstr("dup.yaml:3: listen: duplicate key (first at "));
  const std::string bad_cert = WriteTempFile(
      "cert.yaml", ConfigYaml({"http://127.0.0.1:1"}) +
                       "tls: {cert_file: /nonexistent/tls.crt, key_file: /nonexistent/tls.key}\n");
  Process c({"--config", bad_cert, "--check"});
  EXPECT_NE(c.Wait(), 0);
  EXPECT_THAT(c.Log(), HasSubstr("/nonexistent/tls.crt"));
  // A name resolves: what --check passes, start serves.
  FakeUpstream f({});
  f.Start();
  const std::string named =
      WriteTempFile("named.yaml",
                    "listen: localhost:0\nthreads: 1\nhealth_check: {enabled: false}\n"
                    "workers:\n  - url: " +
                        f.url() + "\n");
  Process check({"--config", named, "--check"});
  EXPECT_EQ(check.Wait(), 0) << check.Log();
  Process serve({"--config", named});
  ASSERT_NE(serve.Port(), 0) << serve.Log();
  EXPECT_EQ(Fetch(serve.Port(), "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
}

// Issue 33: a rejected SIGHUP reload was not counted and its log entry spanned two lines.
TEST(Process, RejectedReloadIsCountedAndLoggedInOneLine) {
  GatewayOnFake g;
  auto& [f, path, p, port] = g;
  ASSERT_NE(port, 0) << p.Log();
  std::ofstream(path, std::ios::trunc) << "threads: 1\nwieght: 2\nworkers: nope\n";
  p.Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] {
    return Fetch(port, "GET", "/metrics")
               .body.find("kvgate_config_reloads_total{result=\"rejected\"} 1") !=
           std::string::npos;
  })) << p.Log();
  const std::string log = p.Log();
  const size_t at = log.find("reload rejected, keeping the running configuration: ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(at, log.find('\n', at) - at);
  EXPECT_THAT(line, HasSubstr("wieght: unknown key"));
  EXPECT_THAT(line, HasSubstr("workers"));  // the second problem, on the same line
  EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
}

// Issue 33: the access log could not be reopened for logrotate; the app log was text only.
TEST(Process, SigusrOneReopensTheAccessLogAndJsonLogsAreOneObjectALine) {
  const std::string access = WriteTempFile("access.log", "");
  GatewayOnFake g("log_format: json\naccess_log: {enabled: true, path: " + access + "}\n");
  auto& [f, path, p, port] = g;
  ASSERT_NE(port, 0) << p.Log();
  ASSERT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  ASSERT_TRUE(
      WaitFor([&] { return ReadFile(access).find("\"status\":200") != std::string::npos; }));
  const std::string rotated = access + ".1";
  ASSERT_EQ(::rename(access.c_str(), rotated.c_str()), 0);  // logrotate's move
  p.Signal(SIGUSR1);
  ASSERT_TRUE(WaitFor([&] { return p.Log().find("access log reopened") != std::string::npos; }))
      << p.Log();
  ASSERT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  EXPECT_TRUE(
      WaitFor([&] { return ReadFile(access).find("\"status\":200") != std::string::npos; }));
  EXPECT_EQ(ReadFile(rotated).find("\n") + 1, ReadFile(rotated).size());  // one line, the first
  // The app log after the config was read: one JSON object a line.
  const std::string log = p.Log();
  const size_t at = log.find("{\"time\":\"");
  ASSERT_NE(at, std::string::npos) << log;
  std::istringstream lines(log.substr(at));
  int objects = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    EXPECT_THAT(line, ::testing::StartsWith("{\"time\":\"")) << line;
    EXPECT_THAT(line, ::testing::EndsWith("}")) << line;
    EXPECT_THAT(line, HasSubstr("\"level\":\"")) << line;
    ++objects;
  }
  EXPECT_GE(objects, 1);
  EXPECT_THAT(log, HasSubstr(R"("msg":"SIGUSR1: access log reopened")"));
}

// Issue 33: `threads: 0` started one loop per host core, whatever the CPUs the process may use.
// A kvgate started with a one-CPU affinity mask (as a pod's cpuset, or taskset) runs one.
TEST(Process, ThreadsZeroFollowsTheCpusTheProcessMayUse) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);  // the child inherits it
  Process p({"--listen", "127.0.0.1:0", "--worker", "http://127.0.0.1:1", "--threads", "0"});
  ASSERT_EQ(::sched_setaffinity(0, sizeof(all), &all), 0);
  ASSERT_NE(p.Port(), 0) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr(" with 1 threads,"));
}

// One kvgate per address (issue 33): the threads' SO_REUSEPORT group would let a second kvgate
// on the same address take part of the traffic with its own config. It must refuse to start,
// and say which process holds the address.
TEST(Process, SecondKvgateOnTheSameAddressFailsToStart) {
  FakeUpstream f({});
  f.Start();
  const uint16_t port = FreePort();
  const std::string listen = common::StrCat("127.0.0.1:", port);
  Process first({"--listen", listen, "--worker", f.url(), "--threads", "2"});
  ASSERT_EQ(first.Port(), port) << first.Log();
  Process second({"--listen", listen, "--worker", f.url(), "--threads", "2"});
  int code = 0;  // bounded: a second kvgate that starts would serve forever
  ASSERT_TRUE(WaitFor([&] { return second.Exited(&code); }, 10s)) << second.Log();
  EXPECT_NE(code, 0) << second.Log();
  EXPECT_THAT(second.Log(), HasSubstr(common::StrCat("cannot listen on ", listen,
                                                     ": another kvgate (pid ", first.pid(), ")")));
  // Every request still reaches the first.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Fetch(port, "POST", "/v1/chat/completions", ChatBody(false)).status, 200);
  }
  EXPECT_EQ(f.requests(), 10u);
}

// Another program's SO_REUSEPORT listener on the port (which the threads' sockets would join):
// refused as well, with the errno.
TEST(Process, AnotherProgramsReusePortListenerIsRefused) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  Process p({"--listen", common::StrCat("127.0.0.1:", port), "--worker", "http://127.0.0.1:1"});
  int code = 0;
  ASSERT_TRUE(WaitFor([&] { return p.Exited(&code); }, 10s)) << p.Log();
  EXPECT_NE(code, 0) << p.Log();
  EXPECT_THAT(p.Log(), HasSubstr("Address already in use (another process listens there)"));
  ::close(fd);
}

}  // namespace
}  // namespace kvgate::testing
