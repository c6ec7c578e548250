#include "common/strings.h"

#include <cstdio>
#include <cstdlib>

namespace kvgate::common {
namespace strings_internal {

void AppendDouble(std::string& out, double d) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.6g", d);
  out.append(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace strings_internal

bool ParseUint64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool ParseDouble(std::string_view s, double* out) {
  if (s.empty() || s.size() > 64) return false;
  std::string tmp(s);
  char* end = nullptr;
  *out = std::strtod(tmp.c_str(), &end);
  return end == tmp.c_str() + tmp.size();
}

}  // namespace kvgate::common
