// File: kvindex/str_cat.h
// StrCat for kvindex, which does not link common/: Debian 12's abseil is built with
// ABSL_OPTION_USE_STD_STRING_VIEW=0, so absl::StrCat and absl's string-keyed hash maps reject
// std::string_view. Accepts std::string_view, absl::string_view, strings, chars and integers.
// Stateless; thread-safe.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace kvgate::kvindex {
namespace str_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, char c) { out.push_back(c); }
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         !std::is_same_v<T, char>) void Append(std::string& out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

}  // namespace str_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (str_internal::Append(out, args), ...);
  return out;
}

/// A std::string_view as the absl::string_view absl's containers take.
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace kvgate::kvindex
