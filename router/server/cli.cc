#include "router/server/cli.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "router/config/loader.h"
#include "router/handlers/auth.h"
#include "router/pd/pd_bodies.h"

namespace kvgate::router {

std::string CliUsage() {
  return R"(kvgate: KV-cache-aware gateway for vLLM / SGLang fleets

Usage: kvgate [--config FILE] [--listen HOST:PORT] [--worker URL]... [options]

  --config FILE       YAML configuration (see docs/configuration.md)
  --listen HOST:PORT  address to serve on (default 0.0.0.0:8000)
  --worker URL        an inference worker, e.g. http://10.0.0.5:8000 (repeatable; added to
                      the workers of the config file)
  --pd-protocol P     prefill/decode disaggregation: vllm-nixl, vllm-mooncake,
                      vllm-p2p-nccl or sglang-bootstrap (see docs/pd.md)
  --prefill URL [PORT]
                      a prefill worker, with its bootstrap port (default 8998; repeatable)
  --decode URL        a decode worker (repeatable)
  --threads N         gateway threads (default 0: one per CPU this process may use)
  --policy NAME       routing policy (kvaware, round_robin, least_request, random,
                      power_of_two, consistent_hash, cache_aware, cost, weighted)
  --api-key KEY       clients must send "Authorization: Bearer KEY" (repeatable; named
                      cli-1, cli-2, ... in logs). Other users of the machine can read a
                      command line: prefer auth.api_keys in the config, which holds hashes
  --tls-cert FILE     serve HTTPS with this PEM certificate chain (with --tls-key)
  --tls-key FILE      the certificate's PEM private key
  --upstream-ca FILE  PEM bundle that https:// workers' certificates must chain to
                      (default: the system's trust store)
  --log-level LEVEL   trace, debug, info, warn, error or off
  --check             validate the configuration and exit (non-zero when invalid)
  --help              this text
  --version           print the version

Signals: SIGHUP reloads the config file (workers, routing, limits, TLS certificates); SIGUSR1 reopens
the access log (logrotate); SIGTERM drains in-flight requests up to drain_timeout_ms, then exits 0.
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
    } else if (arg == "--pd-protocol") {
      KVGATE_ASSIGN_OR_RETURN(o.pd_protocol, need_value(arg));
    } else if (arg == "--prefill") {
      KVGATE_ASSIGN_OR_RETURN(std::string w, need_value(arg));
      std::optional<uint16_t> port;
      // SGLang's form: an optional bootstrap port follows the URL.
      uint64_t n = 0;
      if (!has_inline && i + 1 < argc && common::ParseUint64(argv[i + 1], &n)) {
        if (n == 0 || n > 65535) {
          return absl::InvalidArgumentError(
              common::StrCat("--prefill: bootstrap port must be 1-65535, got ", n));
        }
        port = static_cast<uint16_t>(n);
        ++i;
      }
      o.prefill.emplace_back(std::move(w), port);
    } else if (arg == "--decode") {
      KVGATE_ASSIGN_OR_RETURN(std::string w, need_value(arg));
      o.decode.push_back(std::move(w));
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
    } else if (arg == "--api-key") {
      KVGATE_ASSIGN_OR_RETURN(std::string k, need_value(arg));
      if (k.empty()) return absl::InvalidArgumentError("--api-key: the key is empty");
      o.api_keys.push_back(std::move(k));
    } else if (arg == "--tls-cert") {
      KVGATE_ASSIGN_OR_RETURN(o.tls_cert, need_value(arg));
    } else if (arg == "--tls-key") {
      KVGATE_ASSIGN_OR_RETURN(o.tls_key, need_value(arg));
    } else if (arg == "--upstream-ca") {
      KVGATE_ASSIGN_OR_RETURN(o.upstream_ca, need_value(arg));
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
    auto ip = hp.ok() ? common::ListenAddress(hp->first) : hp.status();
    if (!ip.ok())
      return absl::InvalidArgumentError(common::StrCat("--listen: ", ip.status().message()));
    c.listen_host = *std::move(ip);
    c.listen_port = hp->second;
  }
  for (const auto& w : o.workers) {
    auto url = common::ParseHttpUrl(w, /*allow_https=*/true);
    if (!url.ok())
      return absl::InvalidArgumentError(common::StrCat("--worker: ", url.status().message()));
    config::WorkerConfig wc;
    wc.url = *url;
    c.workers.push_back(std::move(wc));
  }
  auto add_pd_worker = [&](std::string_view flag, const std::string& w, config::WorkerRole role,
                           std::optional<uint16_t> port) -> absl::Status {
    auto url = common::ParseHttpUrl(w, /*allow_https=*/true);
    if (!url.ok())
      return absl::InvalidArgumentError(common::StrCat(flag, ": ", url.status().message()));
    config::WorkerConfig wc;
    wc.url = *url;
    wc.role = role;
    if (port) wc.bootstrap_port = *port;
    c.workers.push_back(std::move(wc));
    return absl::OkStatus();
  };
  for (const auto& [w, port] : o.prefill) {
    KVGATE_RETURN_IF_ERROR(add_pd_worker("--prefill", w, config::WorkerRole::kPrefill, port));
  }
  for (const auto& w : o.decode) {
    KVGATE_RETURN_IF_ERROR(add_pd_worker("--decode", w, config::WorkerRole::kDecode, std::nullopt));
  }
  if (o.pd_protocol) {
    if (!pd::PdProtocolFromName(*o.pd_protocol)) {
      return absl::InvalidArgumentError(common::StrCat(
          "--pd-protocol: unknown protocol '", *o.pd_protocol,
          "' (expected vllm-nixl, vllm-mooncake, vllm-p2p-nccl or sglang-bootstrap)"));
    }
    c.pd.protocol = *o.pd_protocol;
  } else if (c.pd.protocol.empty() && (!o.prefill.empty() || !o.decode.empty())) {
    return absl::InvalidArgumentError("--prefill/--decode need --pd-protocol");
  }
  if (o.threads) c.threads = *o.threads;
  if (o.log_level) c.log_level = *o.log_level;
  if (o.policy) c.routing.policy = *o.policy;
  for (size_t i = 0; i < o.api_keys.size(); ++i) {
    c.auth.api_keys.push_back(
        {common::StrCat("cli-", i + 1), Sha256Hex(o.api_keys[i]), std::nullopt});
  }
  if (o.tls_cert) c.tls.cert_file = *o.tls_cert;
  if (o.tls_key) c.tls.key_file = *o.tls_key;
  if (o.upstream_ca) c.upstream.tls.ca_file = *o.upstream_ca;
  KVGATE_RETURN_IF_ERROR(config::ValidateConfig(c));
  return c;
}

}  // namespace kvgate::router
