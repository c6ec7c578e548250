// File: router/server/cli.h
// Command-line options of the kvgate binary and how they combine with a config file:
// the file (if any) is loaded first, then flags override it. Stateless; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvgate::router {

struct CliOptions {
  std::optional<std::string> config_path;
  std::optional<std::string> listen;  // HOST:PORT
  std::vector<std::string> workers;   // --worker URL, repeatable
  // P/D quick start: --pd-protocol P --prefill URL [BOOTSTRAP_PORT] --decode URL.
  std::optional<std::string> pd_protocol;
  std::vector<std::pair<std::string, std::optional<uint16_t>>> prefill;
  std::vector<std::string> decode;
  std::optional<uint32_t> threads;
  std::optional<std::string> log_level;
  std::optional<std::string> policy;
  std::vector<std::string> api_keys;       // --api-key KEY, repeatable
  std::optional<std::string> tls_cert;     // --tls-cert FILE
  std::optional<std::string> tls_key;      // --tls-key FILE
  std::optional<std::string> upstream_ca;  // --upstream-ca FILE
  bool check = false;
  bool help = false;
  bool version = false;
};

/// Parses argv. @return kInvalidArgument naming the bad flag.
absl::StatusOr<CliOptions> ParseCli(int argc, const char* const* argv);

/// Loads the config file named by `options` (if any) and applies the flag overrides.
/// @return every validation problem, each naming its key (and line, for the file).
absl::StatusOr<config::Config> BuildConfig(const CliOptions& options);

/// The --help text.
std::string CliUsage();

}  // namespace kvgate::router
