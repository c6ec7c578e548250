// File: router/config/loader.cc
// ParseConfig as the list of the config's sections (each read in its *_section.cc), the load
// functions that add reading the file and ResolveConfig (resolve.cc), and the cross-field
// validation of an assembled Config.
#include "router/config/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/logging.h"
#include "common/strings.h"
#include "kvindex/prefix_index.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "router/policies/policy_registry.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {
namespace {

// Reads the top-level key `key` with `read` when it is present and not null.
template <typename T>
void Section(YamlReader& r, const YAML::Node& root, const char* key,
             void (*read)(YamlReader&, const YAML::Node&, T*), T* out) {
  if (const YAML::Node n = root[key]; n.IsDefined() && !n.IsNull()) read(r, n, out);
}

absl::StatusOr<ParsedConfig> Parse(std::string_view yaml, std::string_view source,
                                   YamlReader::Coverage* coverage);

}  // namespace

absl::StatusOr<ParsedConfig> ParseConfig(std::string_view yaml, std::string_view source) {
  return Parse(yaml, source, nullptr);
}

std::vector<std::string> KeysMissingFrom(std::string_view yaml) {
  YamlReader::Coverage coverage;
  (void)Parse(yaml, "example", &coverage);
  std::vector<std::string> missing;
  for (const auto& [path, keys] : coverage.allowed) {
    for (const std::string& key : keys) {
      if (!coverage.present[path].contains(key)) missing.push_back(YamlReader::Join(path, key));
    }
  }
  return missing;
}

namespace {

absl::StatusOr<ParsedConfig> Parse(std::string_view yaml, std::string_view source,
                                   YamlReader::Coverage* coverage) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        common::StrCat(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  ParsedConfig parsed;
  if (root.IsNull()) return parsed;  // an empty file means all defaults
  Config& c = parsed.config;
  YamlReader r(source);
  r.RecordCoverage(coverage);
  try {
    if (!r.ExpectMap(root, "",
                     {"listen",
                      "tls",
                      "threads",
                      "log_level",
                      "log_format",
                      "drain_timeout_ms",
                      "drain_delay_ms",
                      "models_refresh_interval_ms",
                      "limits",
                      "upstream",
                      "retry",
                      "health_check",
                      "circuit_breaker",
                      "routing",
                      "pd",
                      "auth",
                      "admin",
                      "access_log",
                      "cors",
                      "engine_routes",
                      "workers",
                      "discovery",
                      "stores",
                      "cluster"})) {
      return absl::InvalidArgumentError(common::StrJoin(r.errors(), "\n"));
    }
    ReadTopLevel(r, root, &c);
    Section(r, root, "tls", ReadTls, &c.tls);
    Section(r, root, "limits", ReadLimits, &c.limits);
    Section(r, root, "upstream", ReadUpstream, &c.upstream);
    Section(r, root, "retry", ReadRetry, &c.retry);
    Section(r, root, "health_check", ReadHealthCheck, &c.health_check);
    Section(r, root, "circuit_breaker", ReadCircuitBreaker, &c.circuit_breaker);
    Section(r, root, "routing", ReadRouting, &c.routing);
    Section(r, root, "pd", ReadPd, &c.pd);
    Section(r, root, "discovery", ReadDiscovery, &c.discovery);
    Section(r, root, "auth", ReadAuth, &c.auth);
    Section(r, root, "admin", ReadAdmin, &c.admin);
    Section(r, root, "access_log", ReadAccessLog, &c.access_log);
    Section(r, root, "cors", ReadCors, &c.cors);
    Section(r, root, "workers", ReadWorkers, &c.workers);
    Section(r, root, "stores", ReadStores, &c.stores);
    Section(r, root, "cluster", ReadCluster, &c.cluster);
  } catch (const YAML::Exception& e) {
    r.errors().push_back(common::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (!r.errors().empty()) {
    return absl::InvalidArgumentError(common::StrJoin(r.errors(), "\n"));
  }
  parsed.places = std::move(r.places());
  return parsed;
}

}  // namespace

absl::StatusOr<Config> LoadConfigFromString(std::string_view yaml, std::string_view source) {
  auto parsed = ParseConfig(yaml, source);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status s = ResolveConfig(parsed->config, parsed->places); !s.ok()) return s;
  return std::move(parsed->config);
}

absl::StatusOr<Config> LoadConfigFromFile(const std::string& path) {
  // With open(2)'s errno: "cannot read" alone leaves the operator guessing between a wrong
  // path, a permission and a directory (which a stream would read as an empty file, that is
  // a config with no workers).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::NotFoundError(
        common::StrCat(path, ": cannot read config file: ", std::strerror(err)));
  }
  std::string text;
  struct stat st {};
  int err = ::fstat(fd, &st) != 0 ? errno : (S_ISDIR(st.st_mode) ? EISDIR : 0);
  for (char buf[16384]; err == 0;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (err != 0) {
    return absl::InvalidArgumentError(
        common::StrCat(path, ": cannot read config file: ", std::strerror(err)));
  }
  return LoadConfigFromString(text, path);
}

absl::Status ValidateConfig(const Config& c) {
  std::vector<std::string> errors;
  std::set<std::string> seen;
  for (size_t i = 0; i < c.workers.size(); ++i) {
    if (!seen.insert(c.workers[i].url.ToString()).second) {
      errors.push_back(common::StrCat("workers[", i, "].url: duplicate worker '",
                                      c.workers[i].url.ToString(), "'"));
    }
    for (const std::string& name : c.workers[i].stores) {
      if (std::none_of(c.stores.begin(), c.stores.end(),
                       [&](const StoreConfig& s) { return s.name == name; })) {
        errors.push_back(
            common::StrCat("workers[", i, "].stores: no store named '", name, "' in `stores`"));
      }
    }
  }
  if (router::FindPolicy(c.routing.policy) == nullptr) {
    errors.push_back(common::StrCat("routing.policy: unknown policy '", c.routing.policy,
                                    "' (expected one of: ", router::PolicyNames(), ")"));
  }
  // The prefix indexes have a fixed number of holders: a worker beyond them would be routed
  // without cache data, so it is refused here rather than discovered in production.
  const size_t max_holders = kvindex::PrefixIndex::kMaxHolders;
  size_t ranks = 0;
  for (const auto& w : c.workers) {
    if (w.kv_events) ranks += w.dp_size;
  }
  if (c.workers.size() > max_holders) {
    errors.push_back(common::StrCat("workers: ", c.workers.size(),
                                    " workers configured; the "
                                    "prefix index holds at most ",
                                    max_holders));
  }
  if (ranks + c.stores.size() > max_holders) {
    errors.push_back(common::StrCat("workers: the workers with kv_events have ", ranks,
                                    " DP ranks in all and there are ", c.stores.size(),
                                    " stores; the precise index holds at most ", max_holders));
  }
  if (!common::IsValidLogLevel(c.log_level)) {
    errors.push_back(common::StrCat("log_level: unknown level '", c.log_level, "'"));
  }
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    errors.push_back("tls: cert_file and key_file go together");
  }
  if (!c.tls.client_ca_file.empty() && c.tls.cert_file.empty()) {
    errors.push_back("tls.client_ca_file: needs tls.cert_file and tls.key_file");
  }
  if (c.upstream.tls.cert_file.empty() != c.upstream.tls.key_file.empty()) {
    errors.push_back("upstream.tls: cert_file and key_file go together");
  }
  if (c.retry.backoff_max_ms < c.retry.backoff_base_ms) {
    errors.push_back("retry.backoff_max_ms: must be >= retry.backoff_base_ms");
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(common::StrJoin(errors, "\n"));
}

}  // namespace kvgate::config
