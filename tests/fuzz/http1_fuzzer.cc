// libFuzzer target: HTTP/1.1 heads and body framing as the session and the relay see them.
// Any input: no crash, no sanitizer report, and the parsed views stay inside the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/body_framing.h"
#include "net/http1.h"

namespace h = kvgate::router::http1;

namespace {

void CheckInside(std::string_view part, std::string_view whole) {
  if (part.empty()) return;
  if (part.data() < whole.data() || part.data() + part.size() > whole.data() + whole.size()) {
    __builtin_trap();
  }
}

// Runs the body that follows a head through the framing tracker, in two pieces.
void Frame(h::BodyKind kind, uint64_t length, std::string_view body) {
  h::BodyFraming f(kind, length);
  size_t total = 0;
  const size_t cut = body.size() / 3;
  for (std::string_view piece : {body.substr(0, cut), body.substr(cut)}) {
    size_t consumed = 0;
    const auto status =
        f.Feed(piece, &consumed, [&](std::string_view d) { CheckInside(d, piece); });
    if (consumed > piece.size()) __builtin_trap();
    total += consumed;
    if (status != h::BodyFraming::Status::kMore) return;
  }
  f.OnEof();
  if (total > body.size()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string_view in(input);
  h::ParseLimits limits;
  limits.max_head_bytes = 4096;
  h::RequestHead req;
  const h::ParseResult r = h::ParseRequestHead(in, limits, &req);
  if (r.status == h::ParseStatus::kComplete) {
    if (r.head_bytes > in.size()) __builtin_trap();
    CheckInside(req.target, in);
    for (const auto& f : req.headers) {
      CheckInside(f.name, in);
      CheckInside(f.value, in);
    }
    if (req.path.empty() || (req.path[0] != '/' && req.path != "*")) __builtin_trap();
    if (req.path.find("/../") != std::string_view::npos) __builtin_trap();  // normalised
    Frame(req.body, req.content_length, in.substr(r.head_bytes));
  }
  h::ResponseHead resp;
  const h::ParseResult p = h::ParseResponseHead(in, h::Method::kPost, limits, &resp);
  if (p.status == h::ParseStatus::kComplete) {
    if (p.head_bytes > in.size()) __builtin_trap();
    Frame(resp.body, resp.content_length, in.substr(p.head_bytes));
  }
  return 0;
}
