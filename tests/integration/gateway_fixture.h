// File: tests/integration/gateway_fixture.h
// The fixture of the gateway's in-process tests (gateway_test.cc, gateway_kvaware_test.cc):
// fake workers on loopback and a gateway in front of them, with the OpenAI error check.
#pragma once

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {

class GatewayTest : public ::testing::Test {
 protected:
  ~GatewayTest() override {
    if (gateway_) gateway_->Stop();
  }

  FakeUpstream& AddFake(FakeUpstream::Options o = {}) {
    fakes_.push_back(std::make_unique<FakeUpstream>(o));
    fakes_.back()->Start();
    return *fakes_.back();
  }

  // A config on loopback port 0 with one thread and no background health checks (tests that
  // need them turn them on).
  static config::Config BaseConfig() {
    config::Config c;
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.threads = 1;
    c.health_check.enabled = false;
    c.admin.token = kAdminToken;
    c.routing.policy = "round_robin";  // tests below count on its order
    c.retry.backoff_base_ms = 1;
    c.retry.backoff_max_ms = 2;
    return c;
  }

  void StartGateway(config::Config c) {
    auto gw = router::Gateway::Create(std::move(c));
    ASSERT_TRUE(gw.ok()) << gw.status();
    gateway_ = std::move(*gw);
    ASSERT_TRUE(gateway_->Start().ok());
    port_ = gateway_->port();
  }

  // One fake behind the gateway; the common case.
  FakeUpstream& StartWithOneFake(FakeUpstream::Options o = {}) {
    FakeUpstream& f = AddFake(o);
    auto c = BaseConfig();
    AddTestWorker(c, f.url());
    StartGateway(c);
    return f;
  }

  HttpResponse Chat(bool stream, const Headers& h = {}) {
    return Fetch(port_, "POST", "/v1/chat/completions", ChatBody(stream), h);
  }

  std::vector<std::unique_ptr<FakeUpstream>> fakes_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

inline void ExpectOpenAiError(const HttpResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body << r.error;
  EXPECT_THAT(r.Header("content-type"), ::testing::HasSubstr("application/json"));
  EXPECT_THAT(r.body, ::testing::StartsWith(R"({"error":{"message":)"));
  EXPECT_THAT(r.body, ::testing::HasSubstr(R"("type":)"));
  EXPECT_THAT(r.body, ::testing::HasSubstr(R"("code":)"));
}

}  // namespace kvgate::testing
