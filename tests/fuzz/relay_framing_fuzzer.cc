// libFuzzer target: the relay's framing tracker (net/body_framing.h) on worker
// responses. Any head and body: no crash, payload views inside the piece fed, and the same
// verdict, bytes consumed and payload whether the body arrives whole or a byte at a time — the
// relay forwards whatever pieces the network delivers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/body_framing.h"
#include "net/http1.h"

namespace h = kvgate::router::http1;

namespace {

struct Outcome {
  h::BodyFraming::Status status = h::BodyFraming::Status::kMore;
  size_t consumed = 0;
  std::string payload;
};

Outcome Run(h::BodyKind kind, uint64_t length, std::string_view body, size_t step) {
  h::BodyFraming f(kind, length);
  Outcome o;
  for (size_t off = 0; off < body.size() && o.status == h::BodyFraming::Status::kMore;) {
    const std::string_view piece = body.substr(off, step);
    size_t consumed = 0;
    o.status = f.Feed(piece, &consumed, [&](std::string_view d) {
      if (d.data() < piece.data() || d.data() + d.size() > piece.data() + piece.size()) {
        __builtin_trap();
      }
      o.payload.append(d);
    });
    if (consumed > piece.size()) __builtin_trap();
    if (o.status == h::BodyFraming::Status::kMore && consumed != piece.size()) __builtin_trap();
    o.consumed += consumed;
    off += piece.size();
  }
  if (o.status == h::BodyFraming::Status::kMore) o.status = f.OnEof();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  h::ResponseHead head;
  h::ParseLimits limits;
  const h::ParseResult r = h::ParseResponseHead(input, h::Method::kPost, limits, &head);
  if (r.status != h::ParseStatus::kComplete) return 0;
  const std::string_view body = std::string_view(input).substr(r.head_bytes);
  const Outcome whole = Run(head.body, head.content_length, body, body.size() + 1);
  const Outcome bytes = Run(head.body, head.content_length, body, 1);
  if (whole.status != bytes.status) __builtin_trap();
  if (whole.status != h::BodyFraming::Status::kError) {
    if (whole.consumed != bytes.consumed || whole.payload != bytes.payload) __builtin_trap();
  }
  return 0;
}
