// File: router/config/auth_section.cc
// Who may use the gateway: the `auth` section (API keys by SHA-256, each with its own rate,
// inline or from a file, and the failed-key throttle) and the `admin` section (its listener and
// token). The files are secrets (router/config/secret.h): only named here, read by ResolveConfig
// (resolve.cc) at load and at each reload.
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "common/strings.h"
#include "common/url.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

void ReadApiKeys(YamlReader& r, const YAML::Node& keys, const std::string& path,
                 std::set<std::string>* names, std::vector<ApiKeyConfig>* out) {
  if (!keys.IsSequence()) {
    r.Error(keys, path, "must be a list");
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string at = common::StrCat(path, "[", i, "]");
    const YAML::Node k = keys[i];
    if (!r.ExpectMap(k, at, {"name", "sha256", "rate"})) continue;
    ApiKeyConfig key;
    if (!r.String(k, at, "name", &key.name) || key.name.empty()) {
      r.Error(k, YamlReader::Join(at, "name"), "is required");
    } else if (!names->insert(key.name).second) {
      r.Error(k["name"], YamlReader::Join(at, "name"),
              common::StrCat("duplicate name '", key.name, "'"));
    }
    if (!r.String(k, at, "sha256", &key.sha256)) {
      r.Error(k, YamlReader::Join(at, "sha256"),
              "is required (the key's SHA-256 in hex: printf %s KEY | sha256sum)");
    } else {
      for (char& ch : key.sha256)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (key.sha256.size() != 64 ||
          key.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
        r.Error(k["sha256"], YamlReader::Join(at, "sha256"), "must be 64 hex digits (a SHA-256)");
      }
    }
    if (const YAML::Node rate = k["rate"]; rate.IsDefined() && !rate.IsNull()) {
      ReadRate(r, rate, YamlReader::Join(at, "rate"), &key.rate.emplace());
    }
    out->push_back(std::move(key));
  }
}

void ReadRate(YamlReader& r, const YAML::Node& n, const std::string& path, RateLimitConfig* rate) {
  if (!r.ExpectMap(n, path, {"requests_per_minute", "prompt_tokens_per_minute"})) return;
  r.Uint(n, path, "requests_per_minute", &rate->requests_per_minute);
  r.Uint(n, path, "prompt_tokens_per_minute", &rate->prompt_tokens_per_minute);
}

void ReadAuth(YamlReader& r, const YAML::Node& n, AuthConfig* c) {
  if (!r.ExpectMap(n, "auth",
                   {"api_keys", "api_keys_file", "key_names_in_metrics", "max_failures_per_address",
                    "failure_window_ms"})) {
    return;
  }
  r.Bool(n, "auth", "key_names_in_metrics", &c->key_names_in_metrics);
  r.Uint(n, "auth", "max_failures_per_address", &c->max_failures_per_address);
  r.Uint(n, "auth", "failure_window_ms", &c->failure_window_ms, 1, 86'400'000);
  std::set<std::string> names;
  if (const YAML::Node keys = n["api_keys"]; keys.IsDefined() && !keys.IsNull()) {
    ReadApiKeys(r, keys, "auth.api_keys", &names, &c->api_keys);
  }
  if (r.String(n, "auth", "api_keys_file", &c->api_keys_file)) {
    if (c->api_keys_file.empty()) {
      r.Error(n["api_keys_file"], "auth.api_keys_file", "is empty (omit it for no file)");
    } else {
      r.RecordPlace(n["api_keys_file"], "auth.api_keys_file");  // read by ResolveConfig
    }
  }
}

void ReadAdmin(YamlReader& r, const YAML::Node& n, AdminConfig* c) {
  if (!r.ExpectMap(n, "admin", {"listen", "token", "token_file", "token_env"})) return;
  if (r.String(n, "admin", "listen", &c->listen) && !c->listen.empty()) {
    if (auto hp = common::ParseHostPort(c->listen); !hp.ok()) {
      r.Error(n["listen"], "admin.listen", hp.status().message());
    } else {
      r.RecordPlace(n["listen"], "admin.listen");  // a name is resolved by ResolveConfig
    }
  }
  r.String(n, "admin", "token", &c->token);
  r.String(n, "admin", "token_file", &c->token_file);
  r.String(n, "admin", "token_env", &c->token_env);
  const int sources =
      (c->token.empty() ? 0 : 1) + (c->token_file.empty() ? 0 : 1) + (c->token_env.empty() ? 0 : 1);
  if (sources > 1) {
    r.Error(n, "admin", "set one of token, token_file and token_env");
    return;
  }
  // Read by ResolveConfig, whose errors point at the key that names the source.
  if (!c->token_file.empty()) r.RecordPlace(n["token_file"], "admin.token_file");
  if (!c->token_env.empty()) r.RecordPlace(n["token_env"], "admin.token_env");
}

}  // namespace kvgate::config
