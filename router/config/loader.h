// File: router/config/loader.h
// YAML -> Config with validation, in two steps. Parsing is pure (text in, Config or errors out):
// it records the files, environment variables and tokenizer directories keys name, and opens
// none of them. Resolving reads those (secrets, the API keys file) and loads the tokenizers. Every
// error names the key and its line ("kvgate.yaml:12: workers[1].url: ..."), resolving's too;
// unknown keys are errors, so that typos never silently fall back to defaults. Stateless;
// thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvgate::config {

/// Where each key that names something outside its document stands, key path -> "source:line"
/// ("auth.api_keys_file" -> "kvgate.yaml:12"), so that resolving reports as parsing does.
using KeyPlaces = std::map<std::string, std::string>;

/// A parsed, not yet resolved config: secrets unread (upstream.api_key, admin.token from a file
/// or variable), auth.api_keys without the file's, tokenizers named but not loaded.
struct ParsedConfig {
  Config config;
  KeyPlaces places;
};

/// Parses and checks YAML text without I/O: no file, environment variable or tokenizer is read.
/// `source` names it in messages (usually the file path).
/// @return kInvalidArgument with every problem found, one per line.
absl::StatusOr<ParsedConfig> ParseConfig(std::string_view yaml, std::string_view source);

/// The keys the schema allows that `yaml` never gives, as paths ("tls.cert_file",
/// "workers[].kv_events.topic"), each mapping's keys checked wherever the document has that
/// mapping: what keeps config/kvgate.example.yaml showing every key. Errors are ignored (an
/// example may show alternatives side by side).
std::vector<std::string> KeysMissingFrom(std::string_view yaml);

/// Resolves a host name in `listen` / `admin.listen` to the IP address start binds; reads what
/// `config`'s keys name: upstream.api_key_file / api_key_env into upstream.api_key,
/// auth.api_keys_file's keys appended to auth.api_keys (names unique across both),
/// admin.token_file / token_env into admin.token; loads and registers routing.precise's
/// tokenizers (tokenizer::MakeTokenizer: the request path finds them by name). Errors name the
/// key, at its place in `places` when it is there. Once per parsed config (the keys file's keys
/// are appended); each load and reload parses afresh, so a rotated Secret takes effect.
/// @return kInvalidArgument with every problem found, one per line.
absl::Status ResolveConfig(Config& config, const KeyPlaces& places = {});

/// ParseConfig, then ResolveConfig.
absl::StatusOr<Config> LoadConfigFromString(std::string_view yaml, std::string_view source);

/// Reads, parses and resolves a file. @return kNotFound when it cannot be read.
absl::StatusOr<Config> LoadConfigFromFile(const std::string& path);

/// Checks cross-field rules (duplicates, policy names, thresholds, the prefix index's holder
/// limit) of an assembled Config, for configs built from the command line too.
absl::Status ValidateConfig(const Config& config);

}  // namespace kvgate::config
