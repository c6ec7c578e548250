#include "router/upstream/relay.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "common/strings.h"
#include "net/body_framing.h"
#include "router/fleet/worker.h"
#include "router/http/response_writer.h"
#include "router/http/thread_context.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;
using Buffers = absl::InlinedVector<net::const_buffer, 8>;

constexpr std::string_view kCrlf = "\r\n";
constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The bytes to send for one piece of worker body, in the relay's mode.
class Outgoing {
 public:
  explicit Outgoing(RelayMode mode) : mode_(mode) {}

  void Clear() {
    buffers_.clear();
    lines_used_ = 0;
  }
  // `framed`: the bytes as received (kPass); `payload`: one run of body data in them.
  void Framed(std::string_view framed) {
    if (mode_ == RelayMode::kPass && !framed.empty()) buffers_.push_back(net::buffer(framed));
  }
  void Payload(std::string_view payload) {
    if (payload.empty()) return;
    if (mode_ == RelayMode::kDechunk) {
      buffers_.push_back(net::buffer(payload));
    } else if (mode_ == RelayMode::kChunkify && lines_used_ < kLines) {
      char* line = lines_[lines_used_++];
      const int n = std::snprintf(line, kLineBytes, "%zx\r\n", payload.size());
      buffers_.push_back(net::buffer(line, static_cast<size_t>(n)));
      buffers_.push_back(net::buffer(payload));
      buffers_.push_back(net::buffer(kCrlf));
    }
  }
  void Append(net::const_buffer b) { buffers_.push_back(b); }
  absl::Span<const net::const_buffer> buffers() const { return buffers_; }

 private:
  static constexpr int kLines = 4;
  static constexpr int kLineBytes = 24;
  const RelayMode mode_;
  Buffers buffers_;
  char lines_[kLines][kLineBytes];
  int lines_used_ = 0;
};

// Whether the client can tell where the body ends without the connection closing.
bool Delimited(RelayMode mode, const http1::ResponseHead& head) {
  switch (mode) {
    case RelayMode::kNoBody:
    case RelayMode::kChunkify:
      return true;
    case RelayMode::kDechunk:
      return false;
    case RelayMode::kPass:
      return head.body != http1::BodyKind::kUntilClose;
  }
  return false;
}

// The scratch past `body_start` when that lies in it (the head was read there), else all of it.
net::mutable_buffer SpareScratch(ThreadContext& tc, std::string_view body_start) {
  char* const begin = tc.scratch();
  const auto at = reinterpret_cast<uintptr_t>(body_start.data());
  const auto first = reinterpret_cast<uintptr_t>(begin);
  if (at < first || at > first + ThreadContext::kScratchBytes) {
    return net::buffer(begin, ThreadContext::kScratchBytes);
  }
  const size_t used = at - first + body_start.size();
  return net::buffer(begin + used, ThreadContext::kScratchBytes - used);
}

void AppendClientHead(ThreadContext& tc, Exchange& ex, const http1::ResponseHead& head,
                      RelayMode mode, std::string* out) {
  BeginRelayedHead(tc, ex, head.status, head.reason, Delimited(mode, head), out);
  const bool keep_length = head.body == http1::BodyKind::kLength || mode == RelayMode::kNoBody;
  const auto relayed = [&](const http1::Header& h) {
    if (head.IsHopByHop(h.name) || http1::EqualsIgnoreCase(h.name, "x-request-id") ||
        http1::EqualsIgnoreCase(h.name, "x-kvgate-worker")) {
      return false;
    }
    // kvgate's CORS answer replaces the worker's own (vLLM --allowed-origins): one of each.
    constexpr std::string_view kCors = "access-control-";
    if (!ex.cors_origin.empty() && h.name.size() > kCors.size() &&
        http1::EqualsIgnoreCase(h.name.substr(0, kCors.size()), kCors)) {
      return false;
    }
    return keep_length || !http1::EqualsIgnoreCase(h.name, "content-length");
  };
  http1::AppendFieldLines(head.headers, relayed, out);
  const bool chunked_out = (mode == RelayMode::kPass && head.body == http1::BodyKind::kChunked) ||
                           mode == RelayMode::kChunkify;
  if (chunked_out) out->append("transfer-encoding: chunked\r\n");
  out->append("\r\n");
}

}  // namespace

RelayMode RelayModeFor(const http1::ResponseHead& head, int client_version_minor) {
  switch (head.body) {
    case http1::BodyKind::kNone:
      return RelayMode::kNoBody;
    case http1::BodyKind::kLength:
      return RelayMode::kPass;
    case http1::BodyKind::kChunked:
      return client_version_minor >= 1 ? RelayMode::kPass : RelayMode::kDechunk;
    case http1::BodyKind::kUntilClose:
      return client_version_minor >= 1 ? RelayMode::kChunkify : RelayMode::kPass;
  }
  return RelayMode::kPass;
}

net::awaitable<RelayResult> RelayResponse(ThreadContext& tc, Exchange& ex,
                                          UpstreamConnection& upstream,
                                          const http1::ResponseHead& head,
                                          std::string_view body_start, ResponseWait& wait,
                                          UsageScanner& usage, PrefillRelease release) {
  RelayResult result;
  const config::Config& cfg = *ex.snapshot->config;
  const milliseconds write_timeout(cfg.limits.write_timeout_ms);
  const milliseconds idle_timeout(cfg.upstream.stream_idle_timeout_ms);
  const RelayMode mode = RelayModeFor(head, ex.head.version_minor);
  http1::BodyFraming framing(head.body, head.content_length);
  Outgoing out(mode);
  bool extra_bytes = false;  // the worker sent more than its message: do not reuse

  // Runs one piece of the body through the framing tracker into `out`. False on bad framing.
  auto feed = [&](std::string_view bytes) {
    size_t consumed = 0;
    const auto status = framing.Feed(bytes, &consumed, [&](std::string_view payload) {
      if (!result.first_payload && !payload.empty()) {
        result.first_payload = SteadyClock::now();
        if (release.worker != nullptr && release.reservation != nullptr) {
          release.worker->ReleasePrefill(*release.reservation);
        }
      }
      usage.Feed(payload);
      out.Payload(payload);
    });
    out.Framed(bytes.substr(0, consumed));
    if (consumed < bytes.size() && status != http1::BodyFraming::Status::kError) {
      extra_bytes = true;
    }
    return status != http1::BodyFraming::Status::kError;
  };

  // Head and the first body bytes in one write, once those bytes proved well framed: a
  // malformed start is still a clean 502.
  if (!feed(body_start)) {
    result.error = common::StrCat("malformed response body: ", framing.error());
    co_return result;
  }
  // The rest of an answer that filled the read before it (a 4.5 KB JSON into the wait's 4 KiB
  // page) is usually there already: read it now and the client gets one write, not two. The
  // loop below would make this read anyway; an error it hears is the loop's to judge.
  std::optional<error_code> carried;
  if (!framing.done() && !wait.drained) {
    const net::mutable_buffer spare = SpareScratch(tc, body_start);
    error_code ec;
    const size_t n = spare.size() > 0 ? upstream.ReadSome(spare, ec) : 0;
    if (ec == net::error::would_block || ec == net::error::try_again) {
      wait.drained = true;  // nothing more yet: the loop waits at once
    } else if (ec) {
      carried = ec;
    } else if (n > 0 && !feed(std::string_view(static_cast<const char*>(spare.data()), n))) {
      result.error = common::StrCat("malformed response body: ", framing.error());
      co_return result;
    }
  }
  static thread_local std::string head_text;
  head_text.clear();
  AppendClientHead(tc, ex, head, mode, &head_text);
  Buffers first;
  first.push_back(net::buffer(head_text));
  for (const auto& b : out.buffers()) first.push_back(b);
  if (mode == RelayMode::kChunkify && framing.done()) first.push_back(net::buffer(kLastChunk));
  result.sent_head = true;
  uint64_t sent = 0;
  for (size_t i = 1; i < first.size(); ++i) sent += first[i].size();
  if (co_await WriteAll(ex.conn, first, write_timeout)) {
    result.client_gone = true;
    co_return result;
  }
  CountBodyBytes(ex, sent);

  const net::mutable_buffer scratch(tc.scratch(), ThreadContext::kScratchBytes);
  while (!framing.done()) {
    error_code ec;
    size_t n = 0;
    const char* buf = tc.scratch();
    const bool heard = carried.has_value();
    if (heard) {
      ec = *std::exchange(carried, std::nullopt);
    } else if (!wait.drained) {
      n = upstream.ReadSome(scratch, ec);
    }
    if (!heard && (wait.drained || ec == net::error::would_block || ec == net::error::try_again)) {
      // Between two pieces: the read waits for the worker.
      ex.conn.SetDeadline(DeadlineKind::kUpstream, idle_timeout);
      const net::mutable_buffer into = wait.buffer();
      std::tie(ec, n) = co_await upstream.WaitAndRead(into);
      wait.drained = upstream.Drained(ec, n, into.size());
      buf = static_cast<const char*>(into.data());
      const bool expired = ex.conn.deadline_expired;
      ex.conn.ClearDeadline();
      if (ex.conn.client_gone) {
        result.client_gone = true;
        co_return result;
      }
      if (expired) {
        result.error = common::StrCat("no bytes from the worker for ", idle_timeout.count(), " ms");
        co_return result;
      }
    }
    out.Clear();
    if (ec == net::error::eof) {
      if (framing.OnEof() != http1::BodyFraming::Status::kDone) {
        result.error = framing.error();
        co_return result;
      }
      if (mode == RelayMode::kChunkify) out.Append(net::buffer(kLastChunk));
    } else if (ec) {
      result.error = common::StrCat("reading from the worker: ", ec.message());
      co_return result;
    } else if (!feed(std::string_view(buf, n))) {
      result.error = common::StrCat("malformed response body: ", framing.error());
      co_return result;
    } else if (mode == RelayMode::kChunkify && framing.done()) {
      out.Append(net::buffer(kLastChunk));
    }
    uint64_t bytes = 0;
    for (const auto& b : out.buffers()) bytes += b.size();
    if (bytes > 0) {
      if (co_await WriteAll(ex.conn, out.buffers(), write_timeout)) {
        result.client_gone = true;
        co_return result;
      }
      CountBodyBytes(ex, bytes);
    }
  }
  result.complete = true;
  result.reusable = head.keep_alive && head.body != http1::BodyKind::kUntilClose && !extra_bytes;
  co_return result;
}

}  // namespace kvgate::router
