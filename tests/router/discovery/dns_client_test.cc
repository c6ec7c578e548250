// The DNS wire format kvgate's discovery speaks: the exact query bytes, responses with name
// compression and an additional section, and malformed packets refused (never read past).
#include "router/discovery/dns_client.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router::dns {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(DnsClient, QueryBytes) {
  auto q = EncodeQuery(0x1234, "vllm.ns.svc.", RecordType::kSrv);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, Bytes({0x12, 0x34, 0x01, 0x00, 0,   1, 0,   0,   0,   0, 0, 0,  4, 'v', 'l',
                       'l',  'm',  2,    'n',  's', 3, 's', 'v', 'c', 0, 0, 33, 0, 1}));
  EXPECT_FALSE(EncodeQuery(1, "a..b", RecordType::kA).ok());
  EXPECT_FALSE(EncodeQuery(1, "", RecordType::kA).ok());
  EXPECT_FALSE(EncodeQuery(1, std::string(64, 'x') + ".com", RecordType::kA).ok());
}

// A response to "_http._tcp.w.t" SRV: one SRV answer whose target "a.w.t" is compressed
// (pointer to "w.t" inside the question), and an A record for it in the additional section.
std::string SrvResponse() {
  std::string p = Bytes({0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 1});
  // question at offset 12: _http(5) _tcp(4) w(1) t(1)
  p += Bytes({5, '_', 'h', 't', 't', 'p', 4, '_', 't', 'c', 'p', 1, 'w', 1, 't', 0, 0, 33, 0, 1});
  // answer: name = pointer to 12; SRV, IN, ttl 30, rdlength 10
  p += Bytes({0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 30, 0, 10});
  // priority 0, weight 5, port 8000, target "a" + pointer to "w.t" (offset 12+11=23)
  p += Bytes({0, 0, 0, 5, 0x1f, 0x40, 1, 'a', 0xc0, 23});
  // additional: "a.w.t" as "a" + pointer, A, IN, ttl 30, 4 bytes 10.0.0.7
  p += Bytes({1, 'A', 0xc0, 23, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 0, 0, 7});
  return p;
}

TEST(DnsClient, SrvWithCompressionAndAdditionalRecords) {
  auto r = DecodeResponse(SrvResponse());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, 0xabcd);
  EXPECT_EQ(r->rcode, 0);
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].type, RecordType::kSrv);
  EXPECT_EQ(r->answers[0].name, "_http._tcp.w.t");
  EXPECT_EQ(r->answers[0].target, "a.w.t");
  EXPECT_EQ(r->answers[0].port, 8000);
  EXPECT_EQ(r->answers[0].weight, 5);
  EXPECT_EQ(r->answers[0].ttl, 30u);
  ASSERT_EQ(r->additional.size(), 1u);
  EXPECT_EQ(r->additional[0].name, "a.w.t");  // lower-cased
  EXPECT_EQ(r->additional[0].address, "10.0.0.7");
}

TEST(DnsClient, AaaaAndRcodes) {
  std::string p = Bytes({0, 1, 0x81, 0x83, 0, 0, 0, 1, 0, 0, 0, 0});
  p += Bytes({1, 'x', 0, 0, 28, 0, 1, 0, 0, 0, 1, 0, 16});
  p += Bytes({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  auto r = DecodeResponse(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rcode, kNxDomain);
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].address, "fd00::1");
}

// Issue 27: a CNAME is decoded, the question is kept, the TC bit read, and only records owned by
// the name asked (or the end of its CNAME chain) belong to it.
TEST(DnsClient, CnameChainsQuestionsAndForeignRecords) {
  // Question "v.t" A; answers: v.t CNAME p.t, p.t A 10.0.0.1, evil.t A 127.0.0.1; TC set.
  std::string p = Bytes({0, 9, 0x83, 0x80, 0, 1, 0, 3, 0, 0, 0, 0});
  p += Bytes({1, 'v', 1, 't', 0, 0, 1, 0, 1});                             // question at 12
  p += Bytes({0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 5, 0, 4, 1, 'p', 0xc0, 14});  // CNAME p + "t"
  p += Bytes({1, 'P', 0xc0, 14, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 0, 0, 1});
  p += Bytes({4, 'e', 'v', 'i', 'l', 0xc0, 14, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 1});
  auto r = DecodeResponse(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->question, "v.t");
  ASSERT_EQ(r->answers.size(), 3u);
  EXPECT_EQ(r->answers[0].type, RecordType::kCname);
  EXPECT_EQ(r->answers[0].target, "p.t");
  const auto owned = OwnedBy(r->answers, "V.t.", RecordType::kA);
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].address, "10.0.0.1");
  EXPECT_TRUE(OwnedBy(r->answers, "other.t", RecordType::kA).empty());
  ASSERT_EQ(OwnedBy(r->answers, "evil.t", RecordType::kA).size(), 1u);
  // A CNAME loop ends.
  std::vector<Record> loop(2);
  loop[0] = {RecordType::kCname, "a.t", "", "b.t"};
  loop[1] = {RecordType::kCname, "b.t", "", "a.t"};
  EXPECT_TRUE(OwnedBy(loop, "a.t", RecordType::kA).empty());
}

TEST(DnsClient, MalformedPacketsAreRefused) {
  const std::string good = SrvResponse();
  // Every truncation of a valid packet is an error, never a read past its end.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeResponse(good.substr(0, n)).ok()) << n;
  }
  // A pointer to itself: a compression loop.
  std::string loop = Bytes({0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1});
  EXPECT_THAT(std::string(DecodeResponse(loop).status().message()), HasSubstr("loop"));
  // A query, not a response.
  EXPECT_FALSE(DecodeResponse(Bytes({0, 1, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0})).ok());
  // An A record of 5 bytes.
  std::string bad_a = Bytes({0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0, 1, 'x', 0,
                             0, 1, 0,    1,    0, 0, 0, 1, 0, 5, 1, 2, 3, 4,   5});
  EXPECT_FALSE(DecodeResponse(bad_a).ok());
}

TEST(DnsClient, ServerEndpoints) {
  EXPECT_EQ(ServerEndpoint("127.0.0.1:5353")->port(), 5353);
  EXPECT_EQ(ServerEndpoint("10.96.0.10")->port(), 53);
  EXPECT_EQ(ServerEndpoint("[::1]:5300")->address().to_string(), "::1");
  EXPECT_FALSE(ServerEndpoint("dns.local:53").ok());
  EXPECT_FALSE(ServerEndpoint("127.0.0.1:0").ok());
}

}  // namespace
}  // namespace kvgate::router::dns
