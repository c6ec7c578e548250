// File: net/http1.h
// HTTP/1.1 message heads (RFC 9112) parsed from the bytes of one connection: the request heads
// clients send and the response heads workers answer with. Framing is decided here, strictly,
// because a proxy that reads a body length differently from the next hop is open to request
// smuggling: a Transfer-Encoding whose final coding is not chunked, Content-Length beside
// Transfer-Encoding, duplicate or malformed lengths, obs-fold and bare CRs are errors. Targets
// are normalised (dot-segments removed, absolute-form reduced to its path) before anything
// routes on them. Pure functions over views: no I/O, no allocation except a normalised path;
// thread-safe. Views in the parsed heads point into the parsed bytes: keep those alive.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"

namespace kvgate::router::http1 {

enum class Method : uint8_t { kGet, kHead, kPost, kPut, kDelete, kOptions, kPatch, kOther };

struct Header {
  std::string_view name;
  std::string_view value;
};
using Headers = absl::InlinedVector<Header, 20>;

/// How the body of a message is delimited.
enum class BodyKind : uint8_t {
  kNone,        // no body (requests without length, HEAD/1xx/204/304 responses)
  kLength,      // Content-Length bytes
  kChunked,     // chunked transfer coding
  kUntilClose,  // responses only: everything until the worker closes the connection
};

struct ParseLimits {
  size_t max_head_bytes = 16 * 1024;  // start line and fields, up to the empty line
  size_t max_headers = 128;
};

enum class ParseStatus : uint8_t { kIncomplete, kComplete, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kIncomplete;
  size_t head_bytes = 0;  // kComplete: bytes of the head, up to and including its empty line
  int error_status = 0;   // kError: 400, 431, 501 or 505 for a request; 502 for a response
  std::string error;      // kError: what was wrong, for the client and the log
};

/// A request head. Views point into the parsed bytes (path may own a normalised copy).
struct RequestHead {
  Method method = Method::kOther;
  std::string_view method_text;
  std::string_view target;  // as received
  std::string_view path;    // normalised: origin path without dot-segments, query or fragment
  std::string_view query;   // after '?', empty when none
  int version_minor = 1;    // HTTP/1.<minor>
  Headers headers;          // every field line, in order
  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;  // the client's wish (version default, Connection: close/keep-alive)
  bool expect_continue = false;
  absl::InlinedVector<std::string_view, 4> connection_options;  // names listed in Connection

  /// The first field named `name` (case-insensitive), empty when absent.
  std::string_view Find(std::string_view name) const;
  bool Has(std::string_view name) const;
  /// True for hop-by-hop fields (RFC 9110 §7.6.1) and those the Connection field names: they
  /// describe this connection and are never forwarded.
  bool IsHopByHop(std::string_view name) const;

  /// Owns `path` when normalisation changed it.
  std::string path_storage;
};

/// A response head from a worker.
struct ResponseHead {
  int version_minor = 1;
  int status = 0;
  std::string_view reason;
  Headers headers;
  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;  // the worker keeps the connection open after this response
  absl::InlinedVector<std::string_view, 4> connection_options;

  std::string_view Find(std::string_view name) const;
  bool IsHopByHop(std::string_view name) const;
};

/// Parses the request head at the start of `data`. Empty lines before the request line are
/// skipped (RFC 9112 §2.2). kIncomplete asks for more bytes (431 once `data` outgrew the
/// limit without a complete head).
ParseResult ParseRequestHead(std::string_view data, const ParseLimits& limits, RequestHead* out);

/// Parses a response head at the start of `data`; `request_method` decides whether the
/// response can have a body (HEAD never does). 1xx heads parse like any other; the caller
/// skips them.
ParseResult ParseResponseHead(std::string_view data, Method request_method,
                              const ParseLimits& limits, ResponseHead* out);

/// RFC 3986 §5.2.4 remove_dot_segments on an absolute path, also for percent-encoded dots
/// ("%2e"). Exposed for tests.
std::string RemoveDotSegments(std::string_view path);

/// True when `name` is a field that only one connection's framing uses (Connection,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade); also Expect, which
/// kvgate answers itself. Case-insensitive.
bool IsStandardHopByHop(std::string_view name);

/// Case-insensitive ASCII comparison. Inline: a request's heads compare ~30 names, most of
/// them of another length.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    const char y = b[i];
    // Equal bytes, or one letter in two cases: ORing 0x20 lowers an ASCII capital, and the
    // lowered byte must then be a letter (`@` | 0x20 is `` ` ``, not a letter).
    const char lower = static_cast<char>(x | 0x20);
    if (x != y && (lower != static_cast<char>(y | 0x20) || lower < 'a' || lower > 'z')) {
      return false;
    }
  }
  return true;
}

/// Appends each field of `headers` that `keep(header)` accepts, as "name: value\r\n". A run of
/// consecutive fields the parsed bytes held in exactly that form is copied from those bytes in
/// one piece: forwarded heads are mostly unchanged, and four appends a field were 2.2 K of the
/// 3 K instructions the upstream head cost a 4 KiB request (issue 31). The output is the same.
/// `headers`: a head's fields as ParseRequestHead or ParseResponseHead left them, their bytes
/// still alive (it reads the bytes around each field's views).
template <typename Keep>
void AppendFieldLines(const Headers& headers, Keep&& keep, std::string* out) {
  const char* run = nullptr;  // verbatim bytes not appended yet
  size_t run_size = 0;
  for (const Header& h : headers) {
    if (!keep(h)) continue;
    const char* line = h.name.data();
    const char* end = h.value.data() + h.value.size();
    // The parser's views point into one buffer, where a field line ends in at least "\n": the
    // byte at `end` is readable, and the one after it when that one is '\r'.
    const bool verbatim = h.value.data() == line + h.name.size() + 2 &&
                          line[h.name.size()] == ':' && line[h.name.size() + 1] == ' ' &&
                          end[0] == '\r' && end[1] == '\n';
    if (verbatim && run != nullptr && run + run_size == line) {
      run_size += static_cast<size_t>(end + 2 - line);
      continue;
    }
    if (run != nullptr) out->append(run, run_size);
    run = nullptr;
    if (verbatim) {
      run = line;
      run_size = static_cast<size_t>(end + 2 - line);
    } else {
      out->append(h.name).append(": ").append(h.value).append("\r\n");
    }
  }
  if (run != nullptr) out->append(run, run_size);
}

}  // namespace kvgate::router::http1
