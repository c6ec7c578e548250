#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/cpu_count.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "common/url.h"
#include "gtest/gtest.h"

namespace kvgate::common {
namespace {

TEST(Url, ParsesHostPortAndPath) {
  auto u = ParseHttpUrl("http://worker-1.ns.svc:8080/base/");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "worker-1.ns.svc");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "/base");
  EXPECT_EQ(u->ToString(), "http://worker-1.ns.svc:8080/base");
  EXPECT_EQ(u->Authority(), "worker-1.ns.svc:8080");
}

TEST(Url, DefaultsPortAndHandlesIpv6) {
  EXPECT_EQ(ParseHttpUrl("http://h")->port, 80);
  auto v6 = ParseHttpUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->Authority(), "[::1]:9000");
}

TEST(Url, RejectsBadInput) {
  for (const char* bad : {"", "localhost:80", "https://h:1", "http://:80", "http://h:99999",
                          "http://h:0", "http://u@h:1", "http://h:x"}) {
    EXPECT_FALSE(ParseHttpUrl(bad).ok()) << bad;
  }
}

TEST(HostPort, Parses) {
  auto hp = ParseHostPort("127.0.0.1:0");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->second, 0);
  EXPECT_FALSE(ParseHostPort("nohost").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
}

TEST(Json, EscapesControlAndQuotes) {
  std::string out;
  AppendJsonString(out, "a\"b\\c\n\x01");
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001")");
}

TEST(Json, OpenAiErrorBody) {
  EXPECT_EQ(
      OpenAiErrorBody("bad \"x\"", "invalid_request_error", "c1"),
      R"({"error":{"message":"bad \"x\"","type":"invalid_request_error","param":null,"code":"c1"}})");
  EXPECT_NE(OpenAiErrorBody("m", "t", "").find(R"("code":null)"), std::string::npos);
}

TEST(Strings, CatJoinAndParse) {
  std::string_view sv = "sv";
  absl::string_view av = "av";
  EXPECT_EQ(StrCat("a", sv, av, 42, '-', uint64_t{7}), "asvav42-7");
  EXPECT_EQ(StrJoin(std::vector<std::string>{"x", "y"}, ", "), "x, y");
  uint64_t v = 0;
  EXPECT_TRUE(ParseUint64("123", &v));
  EXPECT_EQ(v, 123u);
  EXPECT_FALSE(ParseUint64("12x", &v));
  EXPECT_FALSE(ParseUint64("-1", &v));
  double d = 0;
  EXPECT_TRUE(ParseDouble("0.25", &d));
  EXPECT_FALSE(ParseDouble("1e", &d));
}

// threads: 0 on Kubernetes (issue 33): the pod's CPU limit, not the node's cores.
TEST(CpuCount, ReadsCpuMax) {
  EXPECT_EQ(CpusFromCpuMax("max 100000\n"), 0);
  EXPECT_EQ(CpusFromCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromCpuMax("150000 100000"), 2);  // 1.5 CPUs: two threads, one part-time
  EXPECT_EQ(CpusFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(CpusFromCpuMax(""), -1);
  EXPECT_EQ(CpusFromCpuMax("lots of cpus"), -1);
}

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvgate_cgroup_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_ + rel).parent_path());
    std::ofstream(root_ + rel) << text;
  }
  std::string root_;
};

TEST_F(CgroupTree, V2TakesTheSmallestQuotaOnThePath) {
  Write("/cpu.max", "max 100000\n");
  Write("/kubepods/pod1/cpu.max", "400000 100000\n");   // the pod: 4 CPUs
  Write("/kubepods/pod1/ctr/cpu.max", "max 100000\n");  // the container: no own limit
  EXPECT_EQ(CgroupCpuLimit(root_, "0::/kubepods/pod1/ctr\n"), 4);
  Write("/kubepods/pod1/ctr/cpu.max", "120000 100000\n");  // 1.2 CPUs: 2 threads
  EXPECT_EQ(CgroupCpuLimit(root_, "0::/kubepods/pod1/ctr\n"), 2);
  EXPECT_EQ(CgroupCpuLimit(root_, "0::/elsewhere\n"), 0);  // no file: no limit
  EXPECT_EQ(CgroupCpuLimit(root_, "0::/\n"), 0);
}

TEST_F(CgroupTree, V1ReadsTheCpuController) {
  Write("/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  Write("/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  Write("/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write("/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuLimit(root_, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"), 3);
  EXPECT_EQ(CgroupCpuLimit(root_, "4:cpu,cpuacct:/\n"), 0);  // -1: no limit
}

TEST(CpuCount, UsableCpusIsPositiveAndWithinTheMachine) {
  const int n = UsableCpus();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace kvgate::common
