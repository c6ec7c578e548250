// The raw body relay against a worker that writes exact bytes: every upstream framing reaches
// the client as the framed body the client's HTTP version understands, whatever pieces the
// bytes came in, and a malformed response is a clean 502 or a closed connection, logged.
#include <linux/tcp.h>  // tcp_info with tcpi_data_segs_in (glibc's lacks it)
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <random>

#include "common/strings.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/server/gateway.h"
#include "tests/fakes/scripted_upstream.h"
#include "tests/fakes/test_client.h"
#include "tests/integration/test_gateway.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

const std::string kBody = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

std::string Request(const std::string& extra_headers = "", const std::string& version = "1.1") {
  return common::StrCat("POST /v1/chat/completions HTTP/", version, "\r\nHost: gw\r\n",
                        extra_headers, "Content-Length: ", kBody.size(), "\r\n\r\n", kBody);
}

class RelayTest : public ::testing::Test {
 protected:
  void Start(ScriptedUpstream::Responder responder) {
    upstream_ = std::make_unique<ScriptedUpstream>(std::move(responder));
    config::Config c;
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.threads = 1;
    c.health_check.enabled = false;
    // No engine scrapes: every request the scripted worker sees is the test's own, and none
    // reaches a responder whose captures went out of scope with the test body.
    c.routing.engine_metrics_interval_ms = 0;
    c.routing.policy = "round_robin";
    c.retry.max_attempts = 1;
    AddTestWorker(c, upstream_->url());
    gateway_ = StartTestGateway(std::move(c));
    ASSERT_NE(gateway_, nullptr);
    port_ = gateway_->port();
  }
  ~RelayTest() override {
    if (gateway_) gateway_->Stop();
  }

  std::unique_ptr<ScriptedUpstream> upstream_;
  std::unique_ptr<router::Gateway> gateway_;
  uint16_t port_ = 0;
};

// The body of a raw HTTP/1.1 response, de-chunked when it is chunked (a strict client).
std::string BodyOf(const std::string& response, bool* chunked = nullptr) {
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return "<no head>";
  const std::string head = response.substr(0, head_end);
  std::string rest = response.substr(head_end + 4);
  const bool is_chunked = head.find("transfer-encoding: chunked") != std::string::npos;
  if (chunked != nullptr) *chunked = is_chunked;
  if (!is_chunked) return rest;
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t eol = rest.find("\r\n", pos);
    if (eol == std::string::npos) return out + "<truncated>";
    const size_t n = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) return out;
    out += rest.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
}

TEST_F(RelayTest, ChunkExtensionsTrailersAndLastChunkRelayedAsIs) {
  const std::string framed =
      "7;ext=1\r\ndata: a\r\n"          // a chunk with an extension
      "0a\r\ndata: bb\r\n\r\n"          // a size with a leading zero
      "0;fin\r\nX-Trailer: t\r\n\r\n";  // the last chunk with an extension and a trailer
  Start([framed](const std::string&) {  // by value: a late model refresh may call it
    return Script{
        {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
         "Transfer-Encoding: chunked\r\n\r\n",
         framed}};
  });
  const std::string r = RawExchange(port_, Request("Connection: close\r\n"), 5s);
  ASSERT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n")) << r;
  // The chunked bytes as the worker framed them: extensions and trailers included.
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), framed);
  EXPECT_EQ(BodyOf(r), "data: adata: bb\r\n");
}

// vLLM sends a stream's head before the prefill and its first event with the first token: the
// TTFT kvgate learns prefill rates from is timed to the first body byte, not to the head.
TEST_F(RelayTest, TimeToFirstTokenIsTheFirstEventNotTheHead) {
  // The first event is longer than the head: read into the same scratch, it overwrites the
  // head's bytes (the content type must be read before).
  const std::string event = "data: " + std::string(300, 'a') + "\n\n";
  Start([event](const std::string&) {
    return Script{{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
                   fmt::format("{:x}\r\n{}\r\n", event.size(), event), "0\r\n\r\n"},
                  // 100 ms over the bound below: the worker's clock starts when it reads the
                  // request, kvgate's when its write returns, a few ms later under ASan.
                  400ms};
  });
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  ASSERT_EQ(r.status, 200);
  auto metric = [&](const std::string& series) {
    const HttpResponse m = Fetch(port_, "GET", "/metrics");
    const std::string key = "\n" + series + "{worker=\"" + upstream_->url() + "\"} ";
    const size_t at = ("\n" + m.body).find(key);
    return at == std::string::npos ? -1.0 : std::stod(m.body.substr(at + key.size() - 1));
  };
  EXPECT_EQ(metric("kvgate_upstream_time_to_first_token_seconds_count"), 1);
  EXPECT_GE(metric("kvgate_upstream_time_to_first_token_seconds_sum"), 0.3);
  EXPECT_LT(metric("kvgate_upstream_time_to_first_byte_seconds_sum"), 0.3);
  // A whole answer's body comes after its decode: it times no first token.
  upstream_.reset();
  gateway_->Stop();
  Start([](const std::string&) {
    return Script{
        {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n", "{}"},
        50ms};
  });
  EXPECT_EQ(Fetch(port_, "POST", "/v1/chat/completions", kBody).status, 200);
  EXPECT_EQ(metric("kvgate_upstream_time_to_first_byte_seconds_count"), 1);
  EXPECT_LE(metric("kvgate_upstream_time_to_first_token_seconds_count"), 0);  // none or 0
}

TEST_F(RelayTest, ContentLengthBodyRelayedAsIs) {
  Start([&](const std::string&) {
    return Script{{"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello", " world"}, 5ms};
  });
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  EXPECT_EQ(r.Header("content-length"), "11");
}

TEST_F(RelayTest, AWorkerThatClosesItsKeepAliveAfterEachAnswerCostsTheNextRequestNothing) {
  // Each answer says keep-alive and the worker then closes. The gateway pools the connection
  // without watching it (a watch waits for the thread's next sweep, issue 31), so the next
  // request, sent at once, takes a connection that is already closed: the stale-connection
  // retry must carry it on a fresh one.
  Start([&](const std::string&) {
    return Script{{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, 0ms, /*close_after=*/true};
  });
  for (int i = 0; i < 20; ++i) {
    const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
    EXPECT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(r.body, "ok") << "request " << i;
  }
  size_t posts = 0;  // beside the gateway's own GET /v1/models
  for (const std::string& q : upstream_->requests()) posts += q.starts_with("POST ") ? 1 : 0;
  EXPECT_EQ(posts, 20u) << "each request reached the worker once";
}

TEST_F(RelayTest, CloseDelimitedBodyFromAnHttp10WorkerIsChunkedForHttp11Clients) {
  Start([&](const std::string&) {
    return Script{{"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ", "part two"},
                  5ms,
                  /*close_after=*/true};
  });
  bool chunked = false;
  const std::string r = RawExchange(port_, Request("Connection: close\r\n"), 5s);
  EXPECT_EQ(BodyOf(r, &chunked), "part one, part two");
  EXPECT_TRUE(chunked);
  // A keep-alive client keeps its connection: the chunked framing tells it where the body ends.
  const HttpResponse again = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  EXPECT_EQ(again.body, "part one, part two");
}

TEST_F(RelayTest, ChunkedBodyIsDechunkedForHttp10Clients) {
  Start([&](const std::string&) {
    return Script{{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                   "6\r\n world\r\n0\r\n\r\n"},
                  5ms};
  });
  bool closed = false;
  const std::string r = RawExchange(port_, Request("", "1.0"), 5s, &closed);
  ASSERT_THAT(r, StartsWith("HTTP/1.0 200 OK\r\n"));
  EXPECT_THAT(r.substr(0, r.find("\r\n\r\n")), Not(HasSubstr("transfer-encoding")));
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "hello world");
  EXPECT_TRUE(closed);  // the end of the body is the end of the connection
}

TEST_F(RelayTest, RandomSplitsDeliverExactlyTheFramedBody) {
  std::mt19937 rng(7);
  std::string framed, payload;
  for (int c = 0; c < 40; ++c) {
    const size_t n = 1 + rng() % 200;
    std::string data;
    for (size_t i = 0; i < n; ++i) data.push_back(static_cast<char>('a' + rng() % 26));
    char size[16];
    std::snprintf(size, sizeof(size), "%zx", n);
    framed += common::StrCat(size, c % 5 == 0 ? ";e=x" : "", "\r\n", data, "\r\n");
    payload += data;
  }
  framed += "0\r\nT: v\r\n\r\n";
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string all = head + framed;
  for (int round = 0; round < 6; ++round) {
    std::vector<size_t> cuts;
    for (int i = 0; i < 12; ++i) cuts.push_back(rng() % all.size());
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::string> pieces;
    size_t at = 0;
    for (size_t cut : cuts) {
      if (cut > at) pieces.push_back(all.substr(at, cut - at));
      at = std::max(at, cut);
    }
    pieces.push_back(all.substr(at));
    upstream_.reset();
    if (gateway_) gateway_->Stop();
    Start([pieces](const std::string&) { return Script{pieces, 2ms}; });
    const std::string r = RawExchange(port_, Request("Connection: close\r\n"), 5s);
    EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), framed) << "round " << round;
    EXPECT_EQ(BodyOf(r), payload) << "round " << round;
  }
}

TEST_F(RelayTest, PiecesLargerThanAWaitsBufferAndHeadsSplitAcrossWaitsArriveWhole) {
  // The relay reads what it waited for into a 4 KiB buffer of its own and the rest of a piece
  // into the thread's scratch; a head cut between two waits is gathered.
  std::mt19937 rng(11);
  std::string body(100000, ' ');
  for (char& c : body) c = static_cast<char>('a' + rng() % 26);
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
  const std::vector<std::string> pieces = {head.substr(0, 20), head.substr(20) + body.substr(0, 10),
                                           body.substr(10, 40000), body.substr(40010)};
  Start([pieces](const std::string&) { return Script{pieces, 5ms}; });
  for (int i = 0; i < 2; ++i) {  // the second reuses the worker connection
    const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
    EXPECT_EQ(r.status, 200) << "request " << i;
    EXPECT_TRUE(r.body == body) << "request " << i << ": " << r.body.size() << " bytes";
  }
}

TEST_F(RelayTest, AnAnswerLargerThanTheWaitsBufferReachesTheClientInOneWrite) {
  // The worker answers after the gateway began waiting, 6 KB in one write: the wait's 4 KiB
  // read leaves the rest in the socket, which the relay reads before it writes, so the client
  // gets head and body as one segment (each write is one on loopback), not two.
  const std::string body(6000, 'x');
  const std::string answer =
      common::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
  Start([answer](const std::string&) { return Script{{"", answer}, 20ms}; });
  const int fd = ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const timeval patience{10, 0};  // a gateway that kept the connection open fails, not hangs
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  const std::string request = Request("Connection: close\r\n");
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, n);
  tcp_info info{};
  socklen_t len = sizeof(info);
  ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
  ::close(fd);
  EXPECT_EQ(BodyOf(got), body);
  EXPECT_EQ(info.tcpi_data_segs_in, 1u) << "the answer came in more than one write";
}

TEST_F(RelayTest, MalformedChunkSizeBeforeAnyByteIsA502) {
  Start([&](const std::string&) {
    return Script{
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"}};
  });
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_THAT(r.body, HasSubstr("malformed"));
  EXPECT_TRUE(WaitFor([&] {
    return gateway_->MetricsText().find(
               R"(kvgate_http_requests_total{api="chat",code="502",endpoint="/v1/chat/completions")") !=
           std::string::npos;
  }));
}

TEST_F(RelayTest, MalformedChunkSizeMidStreamClosesTheConnection) {
  Start([&](const std::string&) {
    return Script{
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "zz\r\nbroken\r\n"},
        20ms};
  });
  bool closed = false;
  const std::string r = RawExchange(port_, Request(), 5s, &closed);
  ASSERT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(closed);  // no last chunk: the client sees a broken response
  EXPECT_THAT(r, HasSubstr("hello"));
  EXPECT_THAT(r, Not(HasSubstr("0\r\n\r\n")));
  EXPECT_TRUE(
      WaitFor([&] { return gateway_->MetricsText().find(R"(code="502")") != std::string::npos; }));
}

TEST_F(RelayTest, InformationalHeadsAreDropped) {
  Start([&](const std::string&) {
    return Script{{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n",
                   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
                  5ms};
  });
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
}

TEST_F(RelayTest, HopByHopResponseFieldsAreDropped) {
  Start([&](const std::string&) {
    return Script{
        {"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\n"
         "Keep-Alive: timeout=5\r\nX-Public: 2\r\nContent-Length: 2\r\n\r\nok"}};
  });
  const HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", kBody);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("x-public"), "2");
  EXPECT_EQ(r.Header("x-private"), "");
  EXPECT_EQ(r.Header("keep-alive"), "");
}

}  // namespace
}  // namespace kvgate::testing
