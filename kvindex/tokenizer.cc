#include "kvindex/tokenizer.h"

#include "absl/strings/str_cat.h"

namespace kvgate::kvindex {

absl::Status Bytes4Tokenizer::Tokenize(const CanonicalPrompt& prompt,
                                       std::vector<uint32_t>* out) const {
  out->clear();
  if (prompt.kind == PromptKind::kTokens) {
    *out = prompt.tokens;
    return absl::OkStatus();
  }
  const std::string& bytes = prompt.bytes;
  out->reserve((bytes.size() + 3) / 4);
  size_t i = 0;
  for (; i + 4 <= bytes.size(); i += 4) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + i);
    out->push_back(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                   uint32_t{p[3]} << 24);
  }
  if (i < bytes.size()) {
    uint32_t last = 0;
    for (size_t k = 0; i + k < bytes.size(); ++k) {
      last |= uint32_t{static_cast<unsigned char>(bytes[i + k])} << (8 * k);
    }
    out->push_back(last);
  }
  return absl::OkStatus();
}

const Tokenizer* TokenizerByName(std::string_view name) {
  static const Bytes4Tokenizer bytes4;
  return name == bytes4.name() ? &bytes4 : nullptr;
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> MakeTokenizer(std::string_view name) {
  if (name == "bytes4") return std::make_shared<const Bytes4Tokenizer>();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown tokenizer \"", absl::string_view(name.data(), name.size()), "\" (known: bytes4)"));
}

}  // namespace kvgate::kvindex
