#include "router/cli.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "config/loader.h"

namespace kvgate::router {

std::string CliUsage() {
  return R"(kvgate: KV-cache-aware gateway for vLLM / SGLang fleets

Usage: kvgate [--config FILE] [--listen HOST:PORT] [--worker URL]... [options]

  --config FILE       YAML configuration (see docs/configuration.md)
  --listen HOST:PORT  address to serve on (default 0.0.0.0:8000)
  --worker URL        an inference worker, e.g. http://10.0.0.5:8000 (repeatable; added to
                      the workers of the config file)
  --threads N         gateway threads (default: number of cores)
  --policy NAME       routing policy (kvaware, round_robin, least_request, random,
                      power_of_two, consistent_hash, cache_aware, cost, weighted)
  --log-level LEVEL   trace, debug, info, warn, error or off
  --check             validate the configuration and exit (non-zero when invalid)
  --help              this text
  --version           print the version

Signals: SIGHUP reloads the config file (workers, routing, limits); SIGTERM drains in-flight
requests up to drain_timeout_ms, then exits 0.
)";
}

absl::StatusOr<CliOptions> ParseCli(int argc, const char* const* argv) {
  CliOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_inline = false;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos && arg.substr(0, 2) == "--") {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    auto need_value = [&](std::string_view flag) -> absl::StatusOr<std::string> {
      if (has_inline) return std::string(value);
      if (i + 1 >= argc) return absl::InvalidArgumentError(common::StrCat(flag, " needs a value"));
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--version") {
      o.version = true;
    } else if (arg == "--check") {
      o.check = true;
    } else if (arg == "--config") {
      KVGATE_ASSIGN_OR_RETURN(o.config_path, need_value(arg));
    } else if (arg == "--listen") {
      KVGATE_ASSIGN_OR_RETURN(o.listen, need_value(arg));
    } else if (arg == "--worker") {
      KVGATE_ASSIGN_OR_RETURN(std::string w, need_value(arg));
      o.workers.push_back(std::move(w));
    } else if (arg == "--threads") {
      KVGATE_ASSIGN_OR_RETURN(std::string t, need_value(arg));
      uint64_t n = 0;
      if (!common::ParseUint64(t, &n) || n > 1024) {
        return absl::InvalidArgumentError(
            common::StrCat("--threads: expected a number of threads (0-1024), got '", t, "'"));
      }
      o.threads = static_cast<uint32_t>(n);
    } else if (arg == "--log-level") {
      KVGATE_ASSIGN_OR_RETURN(o.log_level, need_value(arg));
    } else if (arg == "--policy") {
      KVGATE_ASSIGN_OR_RETURN(o.policy, need_value(arg));
    } else {
      return absl::InvalidArgumentError(
          common::StrCat("unknown argument '", arg, "' (see --help)"));
    }
  }
  return o;
}

absl::StatusOr<config::Config> BuildConfig(const CliOptions& o) {
  config::Config c;
  if (o.config_path) {
    KVGATE_ASSIGN_OR_RETURN(c, config::LoadConfigFromFile(*o.config_path));
  }
  if (o.listen) {
    auto hp = common::ParseHostPort(*o.listen);
    if (!hp.ok())
      return absl::InvalidArgumentError(common::StrCat("--listen: ", hp.status().message()));
    c.listen_host = hp->first;
    c.listen_port = hp->second;
  }
  for (const auto& w : o.workers) {
    auto url = common::ParseHttpUrl(w);
    if (!url.ok())
      return absl::InvalidArgumentError(common::StrCat("--worker: ", url.status().message()));
    config::WorkerConfig wc;
    wc.url = *url;
    c.workers.push_back(std::move(wc));
  }
  if (o.threads) c.threads = *o.threads;
  if (o.log_level) c.log_level = *o.log_level;
  if (o.policy) c.routing.policy = *o.policy;
  KVGATE_RETURN_IF_ERROR(config::ValidateConfig(c));
  return c;
}

}  // namespace kvgate::router
