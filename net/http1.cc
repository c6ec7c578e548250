#include "net/http1.h"

#include <array>
#include <cstring>
#include <vector>

#include "common/strings.h"

namespace kvgate::router::http1 {
namespace {

constexpr size_t kMaxLeadingEmptyLines = 4;

// token characters (RFC 9110 §5.6.2), as a table: header names are checked byte by byte.
constexpr std::array<bool, 256> kTchar = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 32] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

bool IsTchar(unsigned char c) { return kTchar[c]; }

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!IsTchar(c)) return false;
  }
  return true;
}

// Field values may hold VCHAR, obs-text, SP and HT; any other control byte is an error.
bool IsValidFieldByte(unsigned char c) { return (c >= 0x20 || c == '\t') && c != 0x7f; }

bool IsValidFieldValue(std::string_view v) {
  size_t i = 0;
  // Eight bytes a test while none is below 0x20 or DEL (the classic "has a byte less than n"
  // word test, exact about whether one is); a word with one is checked byte by byte, as HT is.
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  for (; i + 8 <= v.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, v.data() + i, 8);
    const uint64_t del = w ^ (kOnes * 0x7f);
    if ((((w - kOnes * 0x20) & ~w) | ((del - kOnes) & ~del)) & kHigh) {
      for (size_t j = i; j < i + 8; ++j) {
        if (!IsValidFieldByte(static_cast<unsigned char>(v[j]))) return false;
      }
    }
  }
  for (; i < v.size(); ++i) {
    if (!IsValidFieldByte(static_cast<unsigned char>(v[i]))) return false;
  }
  return true;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Calls `f(element)` for each non-empty element of a comma-separated field value list.
template <typename F>
void ForEachListElement(std::string_view value, F&& f) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view e = TrimOws(value.substr(0, comma));
    if (!e.empty()) f(e);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

// One line of the head: [begin, end) without its CRLF (or LF); `next` is where the following
// line starts. False when no complete line is in `data` yet.
struct Line {
  std::string_view text;
  size_t next = 0;
};

enum class LineStatus { kOk, kIncomplete, kBareCr };

LineStatus NextLine(std::string_view data, size_t pos, Line* line) {
  const void* nl = std::memchr(data.data() + pos, '\n', data.size() - pos);
  if (nl == nullptr) return LineStatus::kIncomplete;
  const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - data.data());
  size_t text_end = end;
  if (text_end > pos && data[text_end - 1] == '\r') --text_end;
  line->text = data.substr(pos, text_end - pos);
  line->next = end + 1;
  if (std::memchr(line->text.data(), '\r', line->text.size()) != nullptr) {
    return LineStatus::kBareCr;
  }
  return LineStatus::kOk;
}

ParseResult Error(int status, std::string message) {
  ParseResult r;
  r.status = ParseStatus::kError;
  r.error_status = status;
  r.error = std::move(message);
  return r;
}

bool ParseContentLength(std::string_view v, uint64_t* out) {
  if (v.empty() || v.size() > 18) return false;  // < 10^18: no overflow, and far past any limit
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = n;
  return true;
}

Method MethodOf(std::string_view m) {
  switch (m.size()) {
    case 3:
      if (m == "GET") return Method::kGet;
      if (m == "PUT") return Method::kPut;
      break;
    case 4:
      if (m == "POST") return Method::kPost;
      if (m == "HEAD") return Method::kHead;
      break;
    case 5:
      if (m == "PATCH") return Method::kPatch;
      break;
    case 6:
      if (m == "DELETE") return Method::kDelete;
      break;
    case 7:
      if (m == "OPTIONS") return Method::kOptions;
      break;
    default:
      break;
  }
  return Method::kOther;
}

// What the framing fields of one head say, collected while reading its field lines.
struct Framing {
  int content_lengths = 0;
  uint64_t content_length = 0;
  bool bad_content_length = false;
  bool transfer_encoding = false;
  int chunked_count = 0;
  bool chunked_last = false;
  std::string_view other_coding;  // first coding that is neither chunked nor identity-free
  int hosts = 0;
  bool connection_close = false;
  bool connection_keep_alive = false;
};

template <typename Head>
void NoteField(const Header& h, Framing* f, Head* head) {
  const std::string_view n = h.name;
  switch (Lower(n[0])) {
    case 'c':
      if (EqualsIgnoreCase(n, "content-length")) {
        ++f->content_lengths;
        if (!ParseContentLength(h.value, &f->content_length)) f->bad_content_length = true;
      } else if (EqualsIgnoreCase(n, "connection")) {
        ForEachListElement(h.value, [&](std::string_view e) {
          if (EqualsIgnoreCase(e, "close")) {
            f->connection_close = true;
          } else if (EqualsIgnoreCase(e, "keep-alive")) {
            f->connection_keep_alive = true;
          } else {
            head->connection_options.push_back(e);
          }
        });
      }
      break;
    case 't':
      if (EqualsIgnoreCase(n, "transfer-encoding")) {
        f->transfer_encoding = true;
        ForEachListElement(h.value, [&](std::string_view e) {
          const std::string_view coding = TrimOws(e.substr(0, e.find(';')));
          f->chunked_last = EqualsIgnoreCase(coding, "chunked");
          if (f->chunked_last) {
            ++f->chunked_count;
          } else if (f->other_coding.empty()) {
            f->other_coding = coding;
          }
        });
      }
      break;
    case 'h':
      if (EqualsIgnoreCase(n, "host")) ++f->hosts;
      break;
    default:
      break;
  }
}

// Reads field lines from `pos` up to and including the empty line that ends the head.
template <typename Head>
ParseResult ParseFields(std::string_view data, size_t pos, const ParseLimits& limits, Head* head,
                        Framing* framing, int bad_status) {
  for (;;) {
    Line line;
    const LineStatus ls = NextLine(data, pos, &line);
    if (ls == LineStatus::kIncomplete) {
      if (data.size() >= limits.max_head_bytes) {
        return Error(431,
                     common::StrCat("header section exceeds ", limits.max_head_bytes, " bytes"));
      }
      return ParseResult{};
    }
    if (line.next > limits.max_head_bytes) {
      return Error(431, common::StrCat("header section exceeds ", limits.max_head_bytes, " bytes"));
    }
    if (ls == LineStatus::kBareCr) return Error(bad_status, "bare CR in the header section");
    pos = line.next;
    if (line.text.empty()) {
      ParseResult r;
      r.status = ParseStatus::kComplete;
      r.head_bytes = pos;
      return r;
    }
    const char first = line.text[0];
    if (first == ' ' || first == '\t') {
      return Error(bad_status, "obsolete line folding in a header field");
    }
    const size_t colon = line.text.find(':');
    if (colon == std::string_view::npos) return Error(bad_status, "header field without ':'");
    const std::string_view name = line.text.substr(0, colon);
    if (!IsToken(name)) {
      return Error(bad_status, common::StrCat("invalid header field name '", name, "'"));
    }
    const std::string_view value = TrimOws(line.text.substr(colon + 1));
    if (!IsValidFieldValue(value)) {
      return Error(bad_status, common::StrCat("invalid byte in header field '", name, "'"));
    }
    if (head->headers.size() >= limits.max_headers) {
      return Error(431, common::StrCat("more than ", limits.max_headers, " header fields"));
    }
    head->headers.push_back(Header{name, value});
    NoteField(head->headers.back(), framing, head);
  }
}

std::string_view FindIn(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return {};
}

bool ListsOption(const absl::InlinedVector<std::string_view, 4>& options, std::string_view name) {
  for (std::string_view o : options) {
    if (EqualsIgnoreCase(o, name)) return true;
  }
  return false;
}

// A segment that reads "." or ".." once "%2e" is decoded.
int DotSegment(std::string_view seg) {
  if (seg.empty() || seg.size() > 6) return 0;
  std::string decoded;
  for (size_t i = 0; i < seg.size(); ++i) {
    if (seg[i] == '%' && i + 2 < seg.size() && seg[i + 1] == '2' && Lower(seg[i + 2]) == 'e') {
      decoded.push_back('.');
      i += 2;
    } else {
      decoded.push_back(seg[i]);
    }
  }
  if (decoded == ".") return 1;
  if (decoded == "..") return 2;
  return 0;
}

// Splits the request target into a normalised path and a query; false when malformed.
bool ParseTarget(Method method, std::string_view target, RequestHead* out) {
  for (unsigned char c : target) {
    if (c <= 0x20 || c >= 0x7f || c == '#') return false;
  }
  std::string_view path = target;
  if (target.empty()) return false;
  if (target[0] != '/') {
    if (target == "*" && method == Method::kOptions) {
      out->path = target;
      return true;
    }
    // absolute-form: the path is routed, the authority ignored (kvgate connects only to
    // configured workers, whatever the client names).
    size_t scheme_end = std::string_view::npos;
    if (target.size() > 7 && EqualsIgnoreCase(target.substr(0, 7), "http://")) scheme_end = 7;
    if (target.size() > 8 && EqualsIgnoreCase(target.substr(0, 8), "https://")) scheme_end = 8;
    if (scheme_end == std::string_view::npos) return false;
    const size_t slash = target.find_first_of("/?", scheme_end);
    if (slash == scheme_end) return false;  // no authority
    path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    if (!path.empty() && path[0] == '?') {
      out->query = path.substr(1);
      out->path = "/";
      return true;
    }
  }
  const size_t q = path.find('?');
  if (q != std::string_view::npos) {
    out->query = path.substr(q + 1);
    path = path.substr(0, q);
  }
  if (path.find("/.") != std::string_view::npos || path.find("/%2") != std::string_view::npos) {
    std::string normal = RemoveDotSegments(path);
    if (normal != path) {
      out->path_storage = std::move(normal);
      out->path = out->path_storage;
      return true;
    }
  }
  out->path = path;
  return true;
}

}  // namespace

bool IsStandardHopByHop(std::string_view name) {
  switch (name.size()) {
    case 2:
      return EqualsIgnoreCase(name, "te");
    case 6:
      return EqualsIgnoreCase(name, "expect");
    case 7:
      return EqualsIgnoreCase(name, "trailer") || EqualsIgnoreCase(name, "upgrade");
    case 10:
      return EqualsIgnoreCase(name, "connection") || EqualsIgnoreCase(name, "keep-alive");
    case 16:
      return EqualsIgnoreCase(name, "proxy-connection");
    case 17:
      return EqualsIgnoreCase(name, "transfer-encoding");
    default:
      return false;
  }
}

std::string RemoveDotSegments(std::string_view path) {
  std::vector<std::string_view> out;
  bool trailing_slash = false;
  std::string_view rest = path.substr(path.empty() || path[0] != '/' ? 0 : 1);
  for (;;) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    const int dots = DotSegment(seg);
    if (dots == 0) {
      out.push_back(seg);
      trailing_slash = false;
    } else {
      if (dots == 2 && !out.empty()) out.pop_back();
      trailing_slash = last;
    }
    if (last) break;
    rest.remove_prefix(slash + 1);
  }
  std::string result = "/";
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) result.push_back('/');
    result.append(out[i]);
  }
  if (trailing_slash && !out.empty()) result.push_back('/');
  return result;
}

std::string_view RequestHead::Find(std::string_view name) const { return FindIn(headers, name); }

bool RequestHead::Has(std::string_view name) const {
  for (const Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return true;
  }
  return false;
}

bool RequestHead::IsHopByHop(std::string_view name) const {
  return IsStandardHopByHop(name) || ListsOption(connection_options, name);
}

std::string_view ResponseHead::Find(std::string_view name) const { return FindIn(headers, name); }

bool ResponseHead::IsHopByHop(std::string_view name) const {
  return IsStandardHopByHop(name) || ListsOption(connection_options, name);
}

ParseResult ParseRequestHead(std::string_view data, const ParseLimits& limits, RequestHead* out) {
  *out = RequestHead{};
  size_t pos = 0;
  Line line;
  for (size_t empty = 0;; ++empty) {
    const LineStatus ls = NextLine(data, pos, &line);
    if (ls == LineStatus::kIncomplete) {
      if (data.size() >= limits.max_head_bytes) {
        return Error(431, common::StrCat("request line exceeds ", limits.max_head_bytes, " bytes"));
      }
      return ParseResult{};
    }
    if (ls == LineStatus::kBareCr) return Error(400, "bare CR in the request line");
    if (!line.text.empty()) break;
    if (empty >= kMaxLeadingEmptyLines) return Error(400, "empty lines instead of a request");
    pos = line.next;
  }
  // request-line = method SP request-target SP HTTP-version
  const std::string_view rl = line.text;
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    return Error(400, "malformed request line");
  }
  out->method_text = rl.substr(0, sp1);
  out->target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = rl.substr(sp2 + 1);
  if (!IsToken(out->method_text)) return Error(400, "malformed request method");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return Error(400, "malformed HTTP version");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return Error(505, common::StrCat(version, " is not supported; use HTTP/1.1"));
  }
  out->version_minor = version[7] - '0';
  out->method = MethodOf(out->method_text);
  if (!ParseTarget(out->method, out->target, out)) {
    return Error(400, "malformed request target");
  }

  Framing f;
  ParseResult r = ParseFields(data, line.next, limits, out, &f, 400);
  if (r.status != ParseStatus::kComplete) return r;

  if (out->version_minor == 1 && f.hosts != 1) {
    return Error(400, f.hosts == 0 ? "HTTP/1.1 request without Host" : "more than one Host");
  }
  if (f.hosts > 1) return Error(400, "more than one Host");
  if (f.transfer_encoding) {
    // RFC 9112 §6.1-6.3: only a final chunked coding delimits a request body; anything else,
    // or a Content-Length beside it, would let two hops disagree on where the body ends.
    if (out->version_minor == 0) return Error(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (f.content_lengths > 0) return Error(400, "both Content-Length and Transfer-Encoding");
    if (!f.chunked_last) return Error(400, "Transfer-Encoding must end with chunked");
    if (f.chunked_count > 1) return Error(400, "chunked applied more than once");
    if (!f.other_coding.empty()) {
      return Error(501, common::StrCat("transfer coding '", f.other_coding, "' is not supported"));
    }
    out->body = BodyKind::kChunked;
  } else if (f.content_lengths > 0) {
    if (f.content_lengths > 1 || f.bad_content_length) {
      return Error(400, "invalid or repeated Content-Length");
    }
    out->content_length = f.content_length;
    out->body = f.content_length > 0 ? BodyKind::kLength : BodyKind::kNone;
  }
  out->keep_alive = out->version_minor == 1 ? !f.connection_close
                                            : (f.connection_keep_alive && !f.connection_close);
  const std::string_view expect = out->Find("expect");
  out->expect_continue = !expect.empty() && EqualsIgnoreCase(expect, "100-continue");
  return r;
}

ParseResult ParseResponseHead(std::string_view data, Method request_method,
                              const ParseLimits& limits, ResponseHead* out) {
  *out = ResponseHead{};
  Line line;
  const LineStatus ls = NextLine(data, 0, &line);
  if (ls == LineStatus::kIncomplete) {
    if (data.size() >= limits.max_head_bytes) {
      return Error(502, common::StrCat("response head exceeds ", limits.max_head_bytes, " bytes"));
    }
    return ParseResult{};
  }
  if (ls == LineStatus::kBareCr) return Error(502, "bare CR in the status line");
  // status-line = HTTP-version SP status-code SP [ reason-phrase ]
  const std::string_view sl = line.text;
  if (sl.size() < 12 || sl.substr(0, 7) != "HTTP/1." || sl[7] < '0' || sl[7] > '9' ||
      sl[8] != ' ' || (sl.size() > 12 && sl[12] != ' ')) {
    return Error(502, "malformed status line");
  }
  int status = 0;
  for (int i = 9; i < 12; ++i) {
    if (sl[i] < '0' || sl[i] > '9') return Error(502, "malformed status code");
    status = status * 10 + (sl[i] - '0');
  }
  if (status < 100) return Error(502, "malformed status code");
  out->version_minor = sl[7] - '0';
  out->status = status;
  out->reason = sl.size() > 13 ? sl.substr(13) : std::string_view();

  Framing f;
  ParseResult r = ParseFields(data, line.next, limits, out, &f, 502);
  if (r.status != ParseStatus::kComplete) return r;

  out->keep_alive = out->version_minor >= 1 ? !f.connection_close
                                            : (f.connection_keep_alive && !f.connection_close);
  // RFC 9112 §6.3, in order.
  if (request_method == Method::kHead || status < 200 || status == 204 || status == 304) {
    out->body = BodyKind::kNone;
  } else if (f.transfer_encoding) {
    if (f.chunked_last && f.chunked_count == 1 && f.other_coding.empty()) {
      out->body = BodyKind::kChunked;
    } else if (!f.chunked_last) {
      out->body = BodyKind::kUntilClose;
      out->keep_alive = false;
    } else {
      return Error(502, "unsupported transfer coding in the response");
    }
    if (f.content_lengths > 0) out->keep_alive = false;  // a confused sender: do not reuse
  } else if (f.content_lengths > 0) {
    if (f.content_lengths > 1 || f.bad_content_length) {
      return Error(502, "invalid or repeated Content-Length in the response");
    }
    out->content_length = f.content_length;
    out->body = f.content_length > 0 ? BodyKind::kLength : BodyKind::kNone;
  } else {
    out->body = BodyKind::kUntilClose;
    out->keep_alive = false;
  }
  return r;
}

}  // namespace kvgate::router::http1
