// 1,000 concurrent streaming requests through a gateway with one thread.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/fake_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

struct Tally {
  int ok = 0;
  int failed = 0;
  std::string first_error;
};

net::awaitable<void> OneStream(uint16_t port, std::string body, Tally& tally) {
  auto fail = [&](std::string why) {
    ++tally.failed;
    if (tally.first_error.empty()) tally.first_error = std::move(why);
  };
  beast::tcp_stream stream(co_await net::this_coro::executor);
  stream.expires_after(std::chrono::seconds(60));
  auto [cec] = co_await stream.async_connect(
      tcp::endpoint(net::ip::make_address("127.0.0.1"), port), kNoThrow);
  if (cec) co_return fail("connect: " + cec.message());
  http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set("x-fake-chunks", "6");
  req.set("x-fake-delay-ms", "20");
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(stream, req, kNoThrow);
  if (wec) co_return fail("write: " + wec.message());
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  auto [rec, rn] = co_await http::async_read(stream, buffer, res, kNoThrow);
  if (rec) co_return fail("read: " + rec.message());
  if (res.result_int() != 200) co_return fail(common::StrCat("status ", res.result_int()));
  if (res.body().find("tok5") == std::string::npos ||
      res.body().find("data: [DONE]") == std::string::npos) {
    co_return fail("incomplete stream: " + res.body().substr(0, 200));
  }
  ++tally.ok;
}

TEST(GatewayConcurrency, ThousandConcurrentStreamsOnOneThread) {
  FakeUpstream::Options fo;
  fo.threads = 2;
  FakeUpstream fake(fo);
  fake.Start();
  config::Config c;
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.threads = 1;
  c.health_check.enabled = false;
  c.upstream.max_idle_per_worker = 1000;
  AddTestWorker(c, fake.url());
  auto gw = StartTestGateway(c);
  ASSERT_NE(gw, nullptr);

  constexpr int kStreams = 1000;
  net::io_context ioc;
  Tally tally;
  const std::string body = ChatBody(true);
  for (int i = 0; i < kStreams; ++i) {
    net::co_spawn(ioc, OneStream(gw->port(), body, tally), net::detached);
  }
  ioc.run();
  EXPECT_EQ(tally.ok, kStreams) << tally.first_error;
  EXPECT_EQ(tally.failed, 0) << tally.first_error;
  // The fake counts a stream after its last write returns, which can trail the client's read.
  EXPECT_TRUE(WaitFor([&] { return fake.completed_streams() == static_cast<uint64_t>(kStreams); }))
      << fake.completed_streams();
  gw->Stop();
}

}  // namespace
}  // namespace kvgate::testing
