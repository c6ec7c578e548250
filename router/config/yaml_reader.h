// File: router/config/yaml_reader.h
// Reading one YAML document into config structs: typed getters with ranges that collect every
// problem, each naming the source, line and key path, instead of stopping at the first; and the
// places of the keys that name something outside the document, for the resolve step.
// Used by the loader only. Thread-compatible; one per document.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/strings.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

// Collects every problem of one document; each message names the source, line and key path.
class YamlReader {
 public:
  explicit YamlReader(std::string_view source) : source_(source) {}

  void Error(const YAML::Node& node, const std::string& path, absl::string_view what) {
    errors_.push_back(common::StrCat(Place(node), ": ", path, ": ", what));
  }

  /// "source:line" of `node`, or "source" when it has no line.
  std::string Place(const YAML::Node& node) const {
    const int line = node.IsDefined() ? node.Mark().line + 1 : 0;
    return line > 0 ? common::StrCat(source_, ":", line) : source_;
  }

  /// Records where the key `path` (one naming a file, a variable or a tokenizer) stands, so
  /// that resolving it later (ResolveConfig) reports its errors at the same place.
  void RecordPlace(const YAML::Node& node, const std::string& path) { places_[path] = Place(node); }
  std::map<std::string, std::string>& places() { return places_; }

  // Reports keys of `map` that are not in `allowed`.
  bool ExpectMap(const YAML::Node& map, const std::string& path,
                 absl::Span<const std::string_view> allowed) {
    if (!map.IsMap()) {
      Error(map, path, "must be a mapping");
      return false;
    }
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      bool known = false;
      for (std::string_view a : allowed) known |= (a == key);
      if (!known) {
        Error(
            kv.first, Join(path, key),
            common::StrCat("unknown key (expected one of: ", common::StrJoin(allowed, ", "), ")"));
      }
    }
    return true;
  }

  template <typename T>
  void Uint(const YAML::Node& map, const std::string& path, std::string_view key, T* out,
            uint64_t min = 0, uint64_t max = std::numeric_limits<T>::max()) {
    const YAML::Node n = map[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) return;
    uint64_t v = 0;
    if (!n.IsScalar() || !common::ParseUint64(n.Scalar(), &v)) {
      Error(n, Join(path, key),
            common::StrCat("expected a non-negative integer, got '", Describe(n), "'"));
      return;
    }
    if (v < min || v > max) {
      Error(n, Join(path, key), common::StrCat("must be between ", min, " and ", max, ", got ", v));
      return;
    }
    *out = static_cast<T>(v);
  }

  void Double(const YAML::Node& map, const std::string& path, std::string_view key, double* out,
              double min, double max) {
    const YAML::Node n = map[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) return;
    double v = 0;
    if (!n.IsScalar() || !common::ParseDouble(n.Scalar(), &v)) {
      Error(n, Join(path, key), common::StrCat("expected a number, got '", Describe(n), "'"));
      return;
    }
    if (!(v >= min && v <= max)) {
      Error(n, Join(path, key), common::StrCat("must be between ", min, " and ", max));
      return;
    }
    *out = v;
  }

  void Bool(const YAML::Node& map, const std::string& path, std::string_view key, bool* out) {
    const YAML::Node n = map[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) return;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "true" || s == "yes" || s == "on") {
      *out = true;
    } else if (s == "false" || s == "no" || s == "off") {
      *out = false;
    } else {
      Error(n, Join(path, key), common::StrCat("expected true or false, got '", Describe(n), "'"));
    }
  }

  bool String(const YAML::Node& map, const std::string& path, std::string_view key,
              std::string* out) {
    const YAML::Node n = map[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) return false;
    if (!n.IsScalar()) {
      Error(n, Join(path, key), "expected a string");
      return false;
    }
    *out = n.Scalar();
    return true;
  }

  static std::string Join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : common::StrCat(path, ".", key);
  }

  static std::string Describe(const YAML::Node& n) {
    if (n.IsScalar()) return n.Scalar();
    if (n.IsSequence()) return "<list>";
    if (n.IsMap()) return "<mapping>";
    return "<null>";
  }

  std::vector<std::string>& errors() { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
  std::map<std::string, std::string> places_;  // key path -> "source:line"
};

}  // namespace kvgate::config
