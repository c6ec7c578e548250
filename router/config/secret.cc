#include "router/config/secret.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "common/strings.h"

namespace kvgate::config {

absl::StatusOr<std::string> ReadSecretFile(std::string_view path, std::string_view what) {
  const std::string p(path);
  // stat follows the symlinks a Secret volume is made of (KEY -> ..data/KEY).
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    return absl::NotFoundError(
        common::StrCat(what, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(common::StrCat(what, ": ", path, " is not a regular file"));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::PermissionDeniedError(common::StrCat(
        what, ": ", path, " is open to other users (mode ", mode,
        "); chmod o-rwx it (Kubernetes: the Secret volume's defaultMode 0440 with an fsGroup)"));
  }
  std::ifstream in{p, std::ios::binary};
  if (!in) {
    return absl::NotFoundError(
        common::StrCat(what, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> ReadSecret(std::string_view file, std::string_view env_var,
                                       std::string_view what) {
  std::string value;
  if (!file.empty()) {
    auto content = ReadSecretFile(file, what);
    if (!content.ok()) return content.status();
    value = *std::move(content);
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
