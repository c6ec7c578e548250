// Request and response heads as RFC 9112 frames them, including the inputs a smuggling attempt
// uses: each must be refused with the right status, never read as something else.
#include "net/http1.h"

#include <random>

#include "gtest/gtest.h"

namespace kvgate::router::http1 {
namespace {

ParseResult Req(std::string_view text, RequestHead* h, ParseLimits limits = {}) {
  return ParseRequestHead(text, limits, h);
}

TEST(Http1Request, ParsesAHead) {
  RequestHead h;
  const std::string text =
      "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n"
      "X-Request-Id:  abc \r\n\r\nhello";
  const ParseResult r = Req(text, &h);
  ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error;
  EXPECT_EQ(r.head_bytes, text.size() - 5);
  EXPECT_EQ(h.method, Method::kPost);
  EXPECT_EQ(h.path, "/v1/chat/completions");
  EXPECT_EQ(h.query, "x=1");
  EXPECT_EQ(h.body, BodyKind::kLength);
  EXPECT_EQ(h.content_length, 5u);
  EXPECT_EQ(h.Find("x-request-id"), "abc");
  EXPECT_TRUE(h.keep_alive);
}

TEST(Http1Request, IncompleteUntilTheEmptyLine) {
  RequestHead h;
  EXPECT_EQ(Req("GET / HTTP/1.1\r\nHost: x\r\n", &h).status, ParseStatus::kIncomplete);
  EXPECT_EQ(Req("GET / HTT", &h).status, ParseStatus::kIncomplete);
  EXPECT_EQ(Req("", &h).status, ParseStatus::kIncomplete);
}

TEST(Http1Request, LeadingEmptyLinesAndBareLfAreTolerated) {
  RequestHead h;
  EXPECT_EQ(Req("\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n", &h).status, ParseStatus::kComplete);
  EXPECT_EQ(Req("GET /health HTTP/1.1\nHost: x\n\n", &h).status, ParseStatus::kComplete);
  EXPECT_EQ(h.path, "/health");
}

TEST(Http1Request, KeepAliveByVersionAndConnection) {
  RequestHead h;
  ASSERT_EQ(Req("GET / HTTP/1.0\r\n\r\n", &h).status, ParseStatus::kComplete);
  EXPECT_FALSE(h.keep_alive);
  ASSERT_EQ(Req("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_TRUE(h.keep_alive);
  ASSERT_EQ(Req("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_FALSE(h.keep_alive);
}

TEST(Http1Request, ConnectionListsHopByHopFields) {
  RequestHead h;
  ASSERT_EQ(Req("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\n"
                "X-Secret: 1\r\nX-Other: 2\r\nKeep-Alive: 5\r\nTE: trailers\r\n\r\n",
                &h)
                .status,
            ParseStatus::kComplete);
  EXPECT_TRUE(h.IsHopByHop("x-secret"));
  EXPECT_TRUE(h.IsHopByHop("Keep-Alive"));
  EXPECT_TRUE(h.IsHopByHop("te"));
  EXPECT_TRUE(h.IsHopByHop("Transfer-Encoding"));
  EXPECT_FALSE(h.IsHopByHop("x-other"));
}

TEST(Http1Request, ChunkedMustBeTheFinalCoding) {
  // A final coding other than chunked leaves the body length undetermined: a 400, never an
  // empty body whose bytes would be parsed as the next request.
  for (const char* te : {"identity", "chunked, identity", "xchunked", "chunked;q=1, gzip",
                         "chunked, chunked", "gzip"}) {
    RequestHead h;
    const std::string text =
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te +
        "\r\n\r\n";
    const ParseResult r = Req(text, &h);
    EXPECT_EQ(r.status, ParseStatus::kError) << te;
    EXPECT_EQ(r.error_status, 400) << te;
  }
  RequestHead h;
  ASSERT_EQ(Req("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &h)
                .error_status,
            501);
  ASSERT_EQ(Req("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kChunked);
}

TEST(Http1Request, SplitTransferEncodingFieldsCount) {
  RequestHead h;
  const ParseResult r = Req(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n"
      "\r\n",
      &h);
  EXPECT_EQ(r.error_status, 400);
}

TEST(Http1Request, LengthAndTransferEncodingTogetherIsRefused) {
  RequestHead h;
  const ParseResult r = Req(
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", &h);
  EXPECT_EQ(r.status, ParseStatus::kError);
  EXPECT_EQ(r.error_status, 400);
}

TEST(Http1Request, BadOrDuplicateLengths) {
  for (const char* cl : {"Content-Length: 5\r\nContent-Length: 5", "Content-Length: 5, 5",
                         "Content-Length: +5", "Content-Length: -1", "Content-Length: 0x10",
                         "Content-Length:", "Content-Length: 99999999999999999999"}) {
    RequestHead h;
    const std::string text = std::string("POST / HTTP/1.1\r\nHost: x\r\n") + cl + "\r\n\r\n";
    EXPECT_EQ(Req(text, &h).error_status, 400) << cl;
  }
}

TEST(Http1Request, TransferEncodingInHttp10IsRefused) {
  RequestHead h;
  EXPECT_EQ(Req("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", &h).error_status, 400);
}

TEST(Http1Request, ObsFoldBareCrAndBadNamesAreRefused) {
  for (const char* text :
       {"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        "GET / HTTP/1.1\r\nHo st: x\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: \x01\r\n\r\n", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1 \r\nHost: x\r\n\r\n", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.x\r\nHost: x\r\n\r\n", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"}) {
    RequestHead h;
    const ParseResult r = Req(text, &h);
    EXPECT_EQ(r.status, ParseStatus::kError) << text;
    EXPECT_EQ(r.error_status, 400) << text;
  }
}

TEST(Http1Request, AControlByteIsRefusedAtEveryOffsetOfAValue) {
  // Values of every length up to 40 (each tail the eight-byte test leaves): all the bytes a
  // value may hold pass, and each control byte but HT, and DEL, fails wherever it stands.
  const std::string allowed = "a \t~\x80\xff!0";
  for (size_t n = 1; n <= 40; ++n) {
    std::string value;
    for (size_t i = 0; i < n; ++i) value += allowed[(i * 7 + n) % allowed.size()];
    value.front() = 'v';  // not whitespace at either end: the value is what the test checks
    value.back() = 'v';
    RequestHead h;
    const std::string ok = "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + value + "\r\n\r\n";
    ASSERT_EQ(Req(ok, &h).status, ParseStatus::kComplete) << n;
    ASSERT_EQ(h.Find("x-a"), value);
    for (size_t i = 0; i < n; ++i) {
      for (int c = 0; c < 0x80; ++c) {
        if (c >= 0x20 && c != 0x7f) continue;
        if (c == '\t' || c == '\r' || c == '\n') continue;  // HT allowed; CR, LF end lines
        std::string bad = value;
        bad[i] = static_cast<char>(c);
        const std::string text = "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + bad + "\r\n\r\n";
        const ParseResult r = Req(text, &h);
        ASSERT_EQ(r.status, ParseStatus::kError) << "n=" << n << " i=" << i << " c=" << c;
        ASSERT_EQ(r.error_status, 400);
      }
    }
  }
}

TEST(Http1Request, HostIsRequiredOnceIn11) {
  RequestHead h;
  EXPECT_EQ(Req("GET / HTTP/1.1\r\n\r\n", &h).error_status, 400);
  EXPECT_EQ(Req("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &h).error_status, 400);
  EXPECT_EQ(Req("GET / HTTP/1.0\r\n\r\n", &h).status, ParseStatus::kComplete);
}

TEST(Http1Request, OtherVersionsAre505) {
  RequestHead h;
  EXPECT_EQ(Req("GET / HTTP/2.0\r\nHost: x\r\n\r\n", &h).error_status, 505);
  EXPECT_EQ(Req("GET / HTTP/1.2\r\nHost: x\r\n\r\n", &h).error_status, 505);
}

TEST(Http1Request, HeadLimitIs431) {
  RequestHead h;
  const std::string big = "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100, 'a');
  EXPECT_EQ(Req(big, &h, ParseLimits{.max_head_bytes = 64}).error_status, 431);
  EXPECT_EQ(Req(big + "\r\n\r\n", &h, ParseLimits{.max_head_bytes = 64}).error_status, 431);
  std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 10; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(
      Req(many + "\r\n", &h, ParseLimits{.max_head_bytes = 4096, .max_headers = 5}).error_status,
      431);
}

TEST(Http1Request, TargetsAreNormalised) {
  struct Case {
    const char* target;
    const char* path;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"/v1/../admin/workers", "/admin/workers"},
           {"/v1/%2e%2e/admin/workers", "/admin/workers"},
           {"/v1/%2E./admin", "/admin"},
           {"/a/./b/", "/a/b/"},
           {"/a/b/c/./../../g", "/a/g"},
           {"/../../x", "/x"},
           {"/a/..", "/"},
           {"/v1/chat/completions", "/v1/chat/completions"},
           {"http://evil.example/v1/models?x", "/v1/models"},
           {"HTTP://evil.example", "/"},
           {"http://evil.example?q", "/"},
       }) {
    RequestHead h;
    const std::string text = std::string("GET ") + c.target + " HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(Req(text, &h).status, ParseStatus::kComplete) << c.target;
    EXPECT_EQ(h.path, c.path) << c.target;
  }
  for (const char* bad : {"v1/models", "/a#frag", "*", "http://", "ftp://x/y"}) {
    RequestHead h;
    const std::string text = std::string("GET ") + bad + " HTTP/1.1\r\nHost: x\r\n\r\n";
    EXPECT_EQ(Req(text, &h).error_status, 400) << bad;
  }
  RequestHead h;
  EXPECT_EQ(Req("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", &h).status, ParseStatus::kComplete);
}

TEST(Http1Request, ExpectContinue) {
  RequestHead h;
  ASSERT_EQ(
      Req("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n", &h)
          .status,
      ParseStatus::kComplete);
  EXPECT_TRUE(h.expect_continue);
}

ParseResult Resp(std::string_view text, ResponseHead* h, Method m = Method::kPost) {
  return ParseResponseHead(text, m, {}, h);
}

TEST(Http1Response, FramingByRfc9112Order) {
  ResponseHead h;
  ASSERT_EQ(Resp("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kLength);
  EXPECT_EQ(h.content_length, 12u);
  ASSERT_EQ(Resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kChunked);
  EXPECT_TRUE(h.keep_alive);
  // Transfer-Encoding wins over Content-Length, and such a connection is not reused.
  ASSERT_EQ(
      Resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", &h).status,
      ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kChunked);
  EXPECT_FALSE(h.keep_alive);
  ASSERT_EQ(Resp("HTTP/1.0 200 OK\r\n\r\n", &h).status, ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kUntilClose);
  EXPECT_FALSE(h.keep_alive);
  ASSERT_EQ(Resp("HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", &h).status,
            ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kNone);
  ASSERT_EQ(Resp("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", &h, Method::kHead).status,
            ParseStatus::kComplete);
  EXPECT_EQ(h.body, BodyKind::kNone);
  ASSERT_EQ(Resp("HTTP/1.1 100 Continue\r\n\r\n", &h).status, ParseStatus::kComplete);
  EXPECT_EQ(h.status, 100);
  EXPECT_EQ(h.body, BodyKind::kNone);
  ASSERT_EQ(Resp("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", &h).status,
            ParseStatus::kComplete);  // no reason phrase
  EXPECT_EQ(h.reason, "");
}

TEST(Http1Response, MalformedIs502) {
  for (const char* text : {"HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/2 200 OK\r\n\r\n", "junk\r\n\r\n",
                           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                           "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n"}) {
    ResponseHead h;
    const ParseResult r = Resp(text, &h);
    EXPECT_EQ(r.status, ParseStatus::kError) << text;
    EXPECT_EQ(r.error_status, 502) << text;
  }
}

TEST(Http1, RemoveDotSegmentsFollowsRfc3986Examples) {
  EXPECT_EQ(RemoveDotSegments("/a/b/c/./../../g"), "/a/g");
  EXPECT_EQ(RemoveDotSegments("/mid/content=5/../6"), "/mid/6");
  EXPECT_EQ(RemoveDotSegments("/"), "/");
  EXPECT_EQ(RemoveDotSegments("/a//b"), "/a//b");
}

}  // namespace
}  // namespace kvgate::router::http1

namespace kvgate::router::http1 {
namespace {

// Header names compare as ASCII case-insensitive, and only letters fold: `@` is not a capital
// `` ` ``, nor `[` of `{`. Every pair of bytes, and lengths that differ.
TEST(Http1EqualsIgnoreCase, OnlyLettersFoldEveryPairOfBytes) {
  const auto lower = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const char x[] = {'k', static_cast<char>(a), 'v'};
      const char y[] = {'K', static_cast<char>(b), 'v'};
      ASSERT_EQ(EqualsIgnoreCase(std::string_view(x, 3), std::string_view(y, 3)),
                lower(a) == lower(b))
          << a << " " << b;
    }
  }
  EXPECT_TRUE(EqualsIgnoreCase("Content-Length", "content-length"));
  EXPECT_FALSE(EqualsIgnoreCase("content-length", "content-lengths"));
  EXPECT_TRUE(EqualsIgnoreCase("", ""));
}

// AppendFieldLines by definition: every kept field as name, ": ", value, CRLF.
std::string FieldLinesByDefinition(const Headers& headers, const std::vector<bool>& keep) {
  std::string out;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (keep[i]) out.append(headers[i].name).append(": ").append(headers[i].value).append("\r\n");
  }
  return out;
}

TEST(Http1Fields, AppendedLinesAreNameColonSpaceValueWhateverTheirForm) {
  // Field lines in every form the parser accepts, some verbatim ("Name: value\r\n"), some not:
  // no space, more whitespace, an empty value, a bare LF; kept in random subsets and orders of
  // forms, so runs of verbatim lines start, grow and break at every place.
  const std::vector<std::string> forms = {
      "Accept: */*\r\n", "X-A:1\r\n",       "X-B:  two \r\n", "X-C: \r\n",
      "X-D:\r\n",        "X-E: five\n",     "X-F: six\r\n",   "User-Agent: t/1\r\n",
      "X-G:\tseven\r\n", "X-H: eight  \r\n"};
  std::mt19937 rng(31);
  for (int round = 0; round < 2000; ++round) {
    std::string text = "POST / HTTP/1.1\r\nHost: gw\r\n";
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += forms[rng() % forms.size()];
    text += "\r\n";
    RequestHead h;
    const ParseResult r = Req(text, &h);
    ASSERT_EQ(r.status, ParseStatus::kComplete) << r.error << "\n" << text;
    std::vector<bool> keep(h.headers.size());
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = rng() % 4 != 0;
    size_t i = 0;
    std::string out = "prefix ";
    AppendFieldLines(
        h.headers, [&](const Header&) { return keep[i++]; }, &out);
    ASSERT_EQ(out, "prefix " + FieldLinesByDefinition(h.headers, keep)) << text;
  }
}

}  // namespace
}  // namespace kvgate::router::http1
