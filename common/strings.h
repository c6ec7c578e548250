// File: common/strings.h
// String building for both std::string_view and absl::string_view. Debian 12's abseil is built
// with ABSL_OPTION_USE_STD_STRING_VIEW=0, so absl::StrCat/StrJoin/SimpleAtoi reject
// std::string_view; these helpers accept both. Stateless; thread-safe.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace kvgate::common {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, char c) { out.push_back(c); }
inline void Append(std::string& out, bool b) { out.append(b ? "true" : "false"); }
void AppendDouble(std::string& out, double d);
inline void Append(std::string& out, double d) { AppendDouble(out, d); }
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         !std::is_same_v<T, char>) void Append(std::string& out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (strings_internal::Append(*out, args), ...);
}

template <typename Range>
std::string StrJoin(const Range& range, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const auto& piece : range) {
    if (!first) out.append(sep);
    first = false;
    strings_internal::Append(out, piece);
  }
  return out;
}

/// An absl::string_view (e.g. absl::Status::message()) as a std::string_view.
inline std::string_view Sv(absl::string_view s) { return {s.data(), s.size()}; }
/// A std::string_view as the absl::string_view absl's containers and functions take.
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

/// Whole-string decimal parses; false on any stray character or overflow.
bool ParseUint64(std::string_view s, uint64_t* out);
bool ParseDouble(std::string_view s, double* out);

}  // namespace kvgate::common

/// Lets spdlog/fmt print absl::string_view (e.g. absl::Status::message()).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
