// File: config/auth_section.cc
// The `auth` section: API keys by SHA-256, each with its own rate, and the failed-key throttle.
#include <set>
#include <string>

#include "common/strings.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

void ReadRate(YamlReader& r, const YAML::Node& n, const std::string& path, RateLimitConfig* rate) {
  if (!r.ExpectMap(n, path, {"requests_per_minute", "prompt_tokens_per_minute"})) return;
  r.Uint(n, path, "requests_per_minute", &rate->requests_per_minute);
  r.Uint(n, path, "prompt_tokens_per_minute", &rate->prompt_tokens_per_minute);
}

// `auth.api_keys`: names unique, each key's SHA-256 as 64 hex digits (lower-cased).
void ReadAuth(YamlReader& r, const YAML::Node& n, AuthConfig* c) {
  if (!r.ExpectMap(n, "auth", {"api_keys", "max_failures_per_address", "failure_window_ms"})) {
    return;
  }
  r.Uint(n, "auth", "max_failures_per_address", &c->max_failures_per_address);
  r.Uint(n, "auth", "failure_window_ms", &c->failure_window_ms, 1, 86'400'000);
  const YAML::Node keys = n["api_keys"];
  if (!keys.IsDefined() || keys.IsNull()) return;
  if (!keys.IsSequence()) {
    r.Error(keys, "auth.api_keys", "must be a list");
    return;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string path = common::StrCat("auth.api_keys[", i, "]");
    const YAML::Node k = keys[i];
    if (!r.ExpectMap(k, path, {"name", "sha256", "rate"})) continue;
    ApiKeyConfig key;
    if (!r.String(k, path, "name", &key.name) || key.name.empty()) {
      r.Error(k, YamlReader::Join(path, "name"), "is required");
    } else if (!names.insert(key.name).second) {
      r.Error(k["name"], YamlReader::Join(path, "name"),
              common::StrCat("duplicate name '", key.name, "'"));
    }
    if (!r.String(k, path, "sha256", &key.sha256)) {
      r.Error(k, YamlReader::Join(path, "sha256"),
              "is required (the key's SHA-256 in hex: printf %s KEY | sha256sum)");
    } else {
      for (char& ch : key.sha256)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (key.sha256.size() != 64 ||
          key.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
        r.Error(k["sha256"], YamlReader::Join(path, "sha256"), "must be 64 hex digits (a SHA-256)");
      }
    }
    if (const YAML::Node rate = k["rate"]; rate.IsDefined() && !rate.IsNull()) {
      ReadRate(r, rate, YamlReader::Join(path, "rate"), &key.rate.emplace());
    }
    c->api_keys.push_back(std::move(key));
  }
}

}  // namespace kvgate::config
