#include "tokenizer/tokenizer.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/mutex.h"
#include "common/strings.h"
#include "tokenizer/hf_tokenizer.h"

namespace kvgate::tokenizer {

absl::Status Tokenizer::TokenizeChat(std::string_view, const ChatLayout*,
                                     std::vector<uint32_t>*) const {
  return absl::UnimplementedError(common::StrCat(name(), " has no chat template"));
}

absl::Status Bytes4Tokenizer::Tokenize(const kvindex::CanonicalPrompt& prompt,
                                       std::vector<uint32_t>* out) const {
  out->clear();
  if (prompt.kind == kvindex::PromptKind::kTokens) {
    *out = prompt.tokens;
    return absl::OkStatus();
  }
  const std::string& bytes = prompt.Text();
  const size_t whole = bytes.size() / 4;
  out->resize(whole);
  size_t i = whole * 4;
  if constexpr (std::endian::native == std::endian::little) {
    // A token is its 4 bytes read little-endian: the prompt's own bytes (an agent's 1.2 MB
    // prompt in one copy, not 300K shifts and pushes).
    if (whole > 0) std::memcpy(out->data(), bytes.data(), whole * 4);
  } else {
    for (size_t t = 0; t < whole; ++t) {
      const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + t * 4);
      (*out)[t] =
          uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
    }
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

namespace {

// Loaded tokenizers by name. Entries are never dropped (request threads hold raw pointers);
// a reload with changed files adds the new one and keeps the old alive.
struct Registry {
  struct Loaded {
    std::shared_ptr<const Tokenizer> tokenizer;
    std::string stamp;  // sizes and mtimes of its files
  };
  common::SharedMutex mu;
  std::map<std::string, Loaded, std::less<>> by_name;
  std::vector<std::shared_ptr<const Tokenizer>> retired;
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: pointers outlive static teardown
  return *r;
}

std::string Stamp(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string s;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / f;
    const auto size = fs::file_size(p, ec);
    if (ec) continue;
    const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
    s += common::StrCat(f, ":", size, ":", mtime, ";");
  }
  return s;
}

}  // namespace

bool IsTokenizerPath(std::string_view name) {
  return !name.empty() &&
         (name.front() == '/' || name.front() == '.' || name.find('/') != std::string_view::npos);
}

const Tokenizer* TokenizerByName(std::string_view name) {
  static const Bytes4Tokenizer bytes4;
  if (name == bytes4.name()) return &bytes4;
  Registry& r = TheRegistry();
  common::ReaderMutexLock lock(&r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second.tokenizer.get();
}

absl::Status CheckTokenizerName(std::string_view name) {
  if (name == "bytes4" || IsTokenizerPath(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      common::StrCat("unknown tokenizer \"", name,
                     "\" (known: bytes4, or a directory with the model's tokenizer.json)"));
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> MakeTokenizer(std::string_view name) {
  if (name == "bytes4") return std::make_shared<const Bytes4Tokenizer>();
  if (absl::Status s = CheckTokenizerName(name); !s.ok()) return s;
  const std::string dir(name);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(common::StrCat("tokenizer directory ", dir, " does not exist"));
  }
  const std::string stamp = Stamp(dir);
  Registry& r = TheRegistry();
  {
    common::ReaderMutexLock lock(&r.mu);
    auto it = r.by_name.find(dir);
    if (it != r.by_name.end() && it->second.stamp == stamp) return it->second.tokenizer;
  }
  HfTokenizerFiles files;
  files.dir = dir;
  auto loaded = HfTokenizer::Load(files);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const Tokenizer> t = *std::move(loaded);
  common::WriterMutexLock lock(&r.mu);
  auto& slot = r.by_name[dir];
  if (slot.tokenizer) r.retired.push_back(slot.tokenizer);
  slot = {t, stamp};
  return t;
}

}  // namespace kvgate::tokenizer
