// The body framing tracker: where a message ends and which bytes are payload, whatever pieces
// the network delivers it in.
#include "net/body_framing.h"

#include <random>

#include "gtest/gtest.h"

namespace kvgate::router::http1 {
namespace {

struct FeedResult {
  BodyFraming::Status status = BodyFraming::Status::kMore;
  size_t consumed = 0;  // over all pieces
  std::string payload;
  std::string error;
};

// Feeds `body` cut at `cuts` (ascending offsets).
FeedResult Feed(BodyKind kind, uint64_t length, std::string_view body,
                std::vector<size_t> cuts = {}) {
  BodyFraming f(kind, length);
  FeedResult r;
  cuts.push_back(body.size());
  size_t at = 0;
  for (size_t cut : cuts) {
    if (cut < at) continue;
    std::string_view piece = body.substr(at, cut - at);
    size_t consumed = 0;
    r.status = f.Feed(piece, &consumed, [&](std::string_view d) { r.payload.append(d); });
    r.consumed += consumed;
    at = cut;
    if (r.status != BodyFraming::Status::kMore) break;
  }
  r.error = f.error();
  return r;
}

TEST(BodyFraming, ChunkedWithExtensionsTrailersAndEmptyLastChunk) {
  const std::string body =
      "5;name=value;quoted=\"a b\"\r\nhello\r\n"
      "6\r\n world\r\n"
      "0;last\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\n";
  const FeedResult r = Feed(BodyKind::kChunked, 0, body + "NEXT");
  EXPECT_EQ(r.status, BodyFraming::Status::kDone);
  EXPECT_EQ(r.consumed, body.size());  // stops exactly at the end of the message
  EXPECT_EQ(r.payload, "hello world");
}

TEST(BodyFraming, UpperCaseAndLeadingZeroSizes) {
  const FeedResult r = Feed(BodyKind::kChunked, 0, "0000A\r\n0123456789\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, BodyFraming::Status::kDone);
  EXPECT_EQ(r.payload, "0123456789");
}

// A token stream: many small chunks in one piece, and the same stream a byte at a time, give
// the same payload; a size has at most sixteen digits.
TEST(BodyFraming, ManyWholeChunksInOnePiece) {
  std::string body, payload;
  for (int i = 0; i < 100; ++i) {
    const std::string event = "data: {\"i\":" + std::to_string(i) + "}\n\n";
    char size[32];
    std::snprintf(size, sizeof(size), i % 2 ? "%zx" : "%016zX", event.size());
    body += std::string(size) + "\r\n" + event + "\r\n";
    payload += event;
  }
  body += "0\r\n\r\n";
  const FeedResult whole = Feed(BodyKind::kChunked, 0, body + "NEXT");
  EXPECT_EQ(whole.status, BodyFraming::Status::kDone) << whole.error;
  EXPECT_EQ(whole.consumed, body.size());
  EXPECT_EQ(whole.payload, payload);
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < body.size(); ++i) every_byte.push_back(i);
  const FeedResult bytes = Feed(BodyKind::kChunked, 0, body + "NEXT", every_byte);
  EXPECT_EQ(bytes.status, BodyFraming::Status::kDone) << bytes.error;
  EXPECT_EQ(bytes.payload, payload);
  // Sixteen digits are the most a size may have, whole or not.
  EXPECT_EQ(Feed(BodyKind::kChunked, 0, "000000000000000A\r\n0123456789\r\n0\r\n\r\n").payload,
            "0123456789");
  EXPECT_EQ(Feed(BodyKind::kChunked, 0, "0000000000000000A\r\n0123456789\r\n0\r\n\r\n").status,
            BodyFraming::Status::kError);
}

TEST(BodyFraming, MalformedChunkedBodies) {
  for (const char* bad :
       {"zz\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n", "5\nhello\r\n0\r\n\r\n", "\r\n",
        "11111111111111111\r\n", "5\r\nhello\r\n0\r\nbad\x01trailer\r\n\r\n", "-5\r\n",
        "5\r\nhello\r\n0\r\n\rX"}) {
    const FeedResult r = Feed(BodyKind::kChunked, 0, bad);
    EXPECT_EQ(r.status, BodyFraming::Status::kError) << bad;
    EXPECT_FALSE(r.error.empty()) << bad;
  }
}

TEST(BodyFraming, ContentLengthAndClose) {
  FeedResult r = Feed(BodyKind::kLength, 5, "helloEXTRA");
  EXPECT_EQ(r.status, BodyFraming::Status::kDone);
  EXPECT_EQ(r.consumed, 5u);
  EXPECT_EQ(r.payload, "hello");
  r = Feed(BodyKind::kUntilClose, 0, "all of it");
  EXPECT_EQ(r.status, BodyFraming::Status::kMore);
  EXPECT_EQ(r.payload, "all of it");
  BodyFraming close(BodyKind::kUntilClose, 0);
  EXPECT_EQ(close.OnEof(), BodyFraming::Status::kDone);
  BodyFraming short_body(BodyKind::kLength, 10);
  EXPECT_EQ(short_body.OnEof(), BodyFraming::Status::kError);
  BodyFraming chunked(BodyKind::kChunked, 0);
  EXPECT_EQ(chunked.OnEof(), BodyFraming::Status::kError);
  BodyFraming none(BodyKind::kNone, 0);
  EXPECT_TRUE(none.done());
}

TEST(BodyFraming, LimitsOnLinesAndTrailers) {
  const std::string long_ext = "5;" + std::string(5000, 'e') + "\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(Feed(BodyKind::kChunked, 0, long_ext).status, BodyFraming::Status::kError);
  std::string trailers = "0\r\n";
  for (int i = 0; i < 2000; ++i) trailers += "X-T: 0123456789\r\n";
  EXPECT_EQ(Feed(BodyKind::kChunked, 0, trailers + "\r\n").status, BodyFraming::Status::kError);
}

// The same chunked body split at random byte boundaries always yields the same payload and end.
TEST(BodyFraming, RandomSplitsGiveTheSameResult) {
  std::mt19937 rng(20261201);
  for (int round = 0; round < 300; ++round) {
    std::string body, payload;
    const int chunks = 1 + static_cast<int>(rng() % 12);
    for (int c = 0; c < chunks; ++c) {
      const size_t n = rng() % 300;
      if (n == 0) continue;  // a zero size would end the body early
      std::string data;
      for (size_t i = 0; i < n; ++i) data.push_back(static_cast<char>('a' + rng() % 26));
      char size[32];
      std::snprintf(size, sizeof(size), rng() % 2 ? "%zx" : "%zX", n);
      body += size;
      if (rng() % 3 == 0) body += ";ext=" + std::to_string(rng() % 1000);
      body += "\r\n" + data + "\r\n";
      payload += data;
    }
    body += "0\r\n";
    if (rng() % 2) body += "Trailer-" + std::to_string(round) + ": v\r\n";
    body += "\r\n";
    std::vector<size_t> cuts;
    const int pieces = static_cast<int>(rng() % 20);
    for (int i = 0; i < pieces; ++i) cuts.push_back(rng() % (body.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    const FeedResult r = Feed(BodyKind::kChunked, 0, body + "tail", cuts);
    ASSERT_EQ(r.status, BodyFraming::Status::kDone) << "round " << round << ": " << r.error;
    EXPECT_EQ(r.consumed, body.size()) << "round " << round;
    EXPECT_EQ(r.payload, payload) << "round " << round;
  }
}

}  // namespace
}  // namespace kvgate::router::http1
