// File: router/config/yaml_reader.h
// Reading one YAML document into config structs: typed getters with ranges that collect every
// problem, each naming the source, line and key path, instead of stopping at the first; and the
// places of the keys that name something outside the document, for the resolve step.
// Used by the loader only. Thread-compatible; one per document.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
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

  // Reports every key of the mapping `map` given twice. yaml-cpp keeps a repeated key and
  // answers lookups with its first value: a second `listen:` or `routing:` would be ignored
  // without a word.
  void NoDuplicateKeys(const YAML::Node& map, const std::string& path) {
    std::map<std::string, YAML::Node> seen;
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (const auto [it, fresh] = seen.emplace(key, kv.first); !fresh) {
        Error(kv.first, Join(path, key),
              common::StrCat("duplicate key (first at ", Place(it->second), ")"));
      }
    }
  }

  // Reports keys of `map` that are not in `allowed`, and keys given twice.
  bool ExpectMap(const YAML::Node& map, const std::string& path,
                 absl::Span<const std::string_view> allowed) {
    if (!map.IsMap()) {
      Error(map, path, "must be a mapping");
      return false;
    }
    if (coverage_ != nullptr) Cover(map, path, allowed);
    NoDuplicateKeys(map, path);
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

  // A list of non-empty strings, each given once. @return false when absent or wrong.
  bool StringList(const YAML::Node& map, const std::string& path, std::string_view key,
                  std::vector<std::string>* out) {
    const YAML::Node n = map[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) return false;
    if (!n.IsSequence()) {
      Error(n, Join(path, key), "expected a list of strings");
      return false;
    }
    std::vector<std::string> list;
    for (const auto& e : n) {
      if (!e.IsScalar() || e.Scalar().empty()) {
        Error(e, Join(path, key), "each entry must be a non-empty string");
        return false;
      }
      if (std::find(list.begin(), list.end(), e.Scalar()) != list.end()) {
        Error(e, Join(path, key), common::StrCat("'", e.Scalar(), "' is listed twice"));
        return false;
      }
      list.push_back(e.Scalar());
    }
    *out = std::move(list);
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

  /// Key paths ("workers[].kv_events.topic") the schema allows at every mapping read, and
  /// those the document has: what a document showing every key must cover.
  struct Coverage {
    std::map<std::string, std::set<std::string>> allowed, present;
  };
  void RecordCoverage(Coverage* coverage) { coverage_ = coverage; }

 private:
  // `path` with list indices dropped ("workers[3]" -> "workers[]").
  static std::string SchemaPath(const std::string& path) {
    std::string out;
    for (size_t i = 0; i < path.size(); ++i) {
      out += path[i];
      if (path[i] == '[') {
        while (i + 1 < path.size() && path[i + 1] != ']') ++i;
      }
    }
    return out;
  }
  void Cover(const YAML::Node& map, const std::string& path,
             absl::Span<const std::string_view> allowed) {
    const std::string p = SchemaPath(path);
    for (std::string_view a : allowed) coverage_->allowed[p].insert(std::string(a));
    for (const auto& kv : map) coverage_->present[p].insert(kv.first.Scalar());
  }

  Coverage* coverage_ = nullptr;
  std::string source_;
  std::vector<std::string> errors_;
  std::map<std::string, std::string> places_;  // key path -> "source:line"
};

}  // namespace kvgate::config
