// CanonicalPrompt's reads of a stream part of which an earlier turn's prefix-reuse entry holds.
// Apart from canonicalize.cc, which the tokenizers (and their fuzz target) do not link.
#include <string>
#include <string_view>
#include <utility>

#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::kvindex {
namespace {

// The stream from `offset` (inside the borrowed bytes) to its end, into `out` (cleared first).
void Join(const CanonicalPrompt& p, size_t offset, std::string* out) {
  out->clear();
  out->reserve(p.size() - offset);
  p.borrowed->AppendCanonical(offset, p.borrowed_bytes, out);
  out->append(p.bytes);
}

}  // namespace

const std::string& CanonicalPrompt::Text() const {
  if (borrowed == nullptr) return bytes;
  if (joined.size() != size()) Join(*this, 0, &joined);
  return joined;
}

std::string_view CanonicalPrompt::From(size_t offset) const {
  if (offset >= borrowed_bytes) return std::string_view(bytes).substr(offset - borrowed_bytes);
  if (joined.size() == size()) return std::string_view(joined).substr(offset);
  // Hashing resumes at the block boundary before the borrowed bytes end: join from there only.
  Join(*this, offset, &joined_from);
  return joined_from;
}

void CanonicalPrompt::OwnAll() {
  if (borrowed == nullptr) return;
  if (joined.size() != size()) Join(*this, 0, &joined);
  bytes = std::move(joined);
  joined.clear();
  borrowed.reset();
  borrowed_bytes = 0;
}

}  // namespace kvgate::kvindex
