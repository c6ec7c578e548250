// CanonicalPrompt's reads of a stream part of which an earlier turn's prefix-reuse entry holds.
// Apart from canonicalize.cc, which the tokenizers (and their fuzz target) do not link.
#include <string>
#include <string_view>
#include <utility>

#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::kvindex {

const std::string& CanonicalPrompt::Text() const {
  if (borrowed == nullptr) return bytes;
  if (joined.size() != size()) {
    joined.clear();
    joined.reserve(size());
    borrowed->AppendCanonical(0, borrowed_bytes, &joined);
    joined.append(bytes);
  }
  return joined;
}

std::string_view CanonicalPrompt::From(size_t offset) const {
  if (offset >= borrowed_bytes) return std::string_view(bytes).substr(offset - borrowed_bytes);
  if (joined.size() == size()) return std::string_view(joined).substr(offset);
  // Hashing resumes at the block boundary before the borrowed bytes end: join from there only.
  joined_from.clear();
  borrowed->AppendCanonical(offset, borrowed_bytes, &joined_from);
  joined_from.append(bytes);
  return joined_from;
}

void CanonicalPrompt::OwnAll() {
  if (borrowed == nullptr) return;
  std::string whole;
  whole.reserve(size());
  borrowed->AppendCanonical(0, borrowed_bytes, &whole);
  whole.append(bytes);
  bytes = std::move(whole);
  borrowed.reset();
  borrowed_bytes = 0;
  joined.clear();
}

}  // namespace kvgate::kvindex
