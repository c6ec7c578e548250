#include "config/secret.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "common/strings.h"

namespace kvgate::config {

absl::StatusOr<std::string> ReadSecret(std::string_view file, std::string_view env_var,
                                       std::string_view what) {
  std::string value;
  if (!file.empty()) {
    std::ifstream in{std::string(file), std::ios::binary};
    if (!in) return absl::NotFoundError(common::StrCat(what, ": cannot read ", file));
    std::stringstream ss;
    ss << in.rdbuf();
    value = ss.str();
  } else if (!env_var.empty()) {
    const char* v = std::getenv(std::string(env_var).c_str());
    if (v == nullptr) {
      return absl::NotFoundError(
          common::StrCat(what, ": environment variable ", env_var, " is not set"));
    }
    value = v;
  } else {
    return std::string();
  }
  absl::StripAsciiWhitespace(&value);
  if (value.empty()) return absl::InvalidArgumentError(common::StrCat(what, " is empty"));
  for (char ch : value) {
    if (static_cast<unsigned char>(ch) < 0x21 || ch == 0x7f) {
      return absl::InvalidArgumentError(
          common::StrCat(what, " holds whitespace or control characters (one line expected)"));
    }
  }
  return value;
}

}  // namespace kvgate::config
