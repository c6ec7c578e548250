// File: router/config/listener_section.cc
// The gateway's own side: the top-level scalars (listen address, threads, log level, drain),
// `tls` on the client listener, `limits` (sizes, timeouts, admission), `access_log` and `cors`.
#include <algorithm>
#include <string>

#include "common/logging.h"
#include "common/strings.h"
#include "common/url.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {

void ReadTopLevel(YamlReader& r, const YAML::Node& root, Config* c) {
  std::string listen;
  if (r.String(root, "", "listen", &listen)) {
    auto hp = common::ParseHostPort(listen);
    if (!hp.ok()) {
      r.Error(root["listen"], "listen", hp.status().message());
    } else {
      c->listen_host = hp->first;  // a name is resolved by ResolveConfig
      c->listen_port = hp->second;
      r.RecordPlace(root["listen"], "listen");
    }
  }
  r.Uint(root, "", "threads", &c->threads, 0, 1024);
  if (r.String(root, "", "log_level", &c->log_level) && !common::IsValidLogLevel(c->log_level)) {
    r.Error(root["log_level"], "log_level",
            common::StrCat("unknown level '", c->log_level,
                           "' (expected trace, debug, info, warn, error or off)"));
  }
  if (r.String(root, "", "log_format", &c->log_format) && c->log_format != "text" &&
      c->log_format != "json") {
    r.Error(root["log_format"], "log_format",
            common::StrCat("unknown format '", c->log_format, "' (expected text or json)"));
  }
  if (r.StringList(root, "", "engine_routes", &c->engine_routes)) {
    for (const std::string& route : c->engine_routes) {
      // Exact root paths only: a prefix or /v1/ would shadow kvgate's own routes.
      if (route.size() < 2 || route[0] != '/' || route.find('/', 1) != std::string::npos ||
          route.find_first_of("?#%* ") != std::string::npos) {
        r.Error(root["engine_routes"], "engine_routes",
                common::StrCat("'", route, "' is not a root path such as /tokenize"));
      } else if (route == "/health" || route == "/ready" || route == "/metrics" ||
                 route == "/version" || route == "/generate") {
        r.Error(root["engine_routes"], "engine_routes",
                common::StrCat("'", route, "' is kvgate's own route"));
      }
    }
  }
  r.Uint(root, "", "drain_timeout_ms", &c->drain_timeout_ms);
  r.Uint(root, "", "drain_delay_ms", &c->drain_delay_ms, 0, 600'000);
  r.Uint(root, "", "models_refresh_interval_ms", &c->models_refresh_interval_ms, 100);
}

void ReadTls(YamlReader& r, const YAML::Node& n, TlsConfig* c) {
  if (!r.ExpectMap(n, "tls", {"cert_file", "key_file", "client_ca_file"})) return;
  r.String(n, "tls", "cert_file", &c->cert_file);
  r.String(n, "tls", "key_file", &c->key_file);
  r.String(n, "tls", "client_ca_file", &c->client_ca_file);
}

void ReadLimits(YamlReader& r, const YAML::Node& n, LimitsConfig* c) {
  if (!r.ExpectMap(
          n, "limits",
          {"max_header_bytes", "max_body_bytes", "idle_timeout_ms", "read_timeout_ms",
           "write_timeout_ms", "tls_handshake_timeout_ms", "max_connections",
           "max_connections_per_client", "health_reserve", "rate", "max_concurrent_requests",
           "queue_size", "queue_timeout_ms", "queue_share_per_client"})) {
    return;
  }
  r.Uint(n, "limits", "max_header_bytes", &c->max_header_bytes, 1024);
  r.Uint(n, "limits", "max_body_bytes", &c->max_body_bytes, 1);
  r.Uint(n, "limits", "idle_timeout_ms", &c->idle_timeout_ms, 1);
  r.Uint(n, "limits", "read_timeout_ms", &c->read_timeout_ms, 1);
  r.Uint(n, "limits", "write_timeout_ms", &c->write_timeout_ms, 1);
  r.Uint(n, "limits", "tls_handshake_timeout_ms", &c->tls_handshake_timeout_ms, 1);
  r.Uint(n, "limits", "max_connections", &c->max_connections, 1);
  r.Uint(n, "limits", "max_connections_per_client", &c->max_connections_per_client);
  r.Uint(n, "limits", "health_reserve", &c->health_reserve, 0, 10'000);
  if (const YAML::Node rate = n["rate"]; rate.IsDefined() && !rate.IsNull()) {
    ReadRate(r, rate, "limits.rate", &c->rate);
  }
  r.Uint(n, "limits", "max_concurrent_requests", &c->max_concurrent_requests);
  r.Uint(n, "limits", "queue_size", &c->queue_size);
  r.Uint(n, "limits", "queue_timeout_ms", &c->queue_timeout_ms, 1);
  r.Double(n, "limits", "queue_share_per_client", &c->queue_share_per_client, 0.001, 1.0);
}

void ReadCors(YamlReader& r, const YAML::Node& n, CorsConfig* c) {
  if (!r.ExpectMap(n, "cors", {"allowed_origins", "allowed_headers", "max_age_s"})) return;
  if (r.StringList(n, "cors", "allowed_origins", &c->allowed_origins)) {
    for (const std::string& o : c->allowed_origins) {
      // An origin is scheme://host[:port], no path: anything else never equals a browser's.
      const size_t sep = o.find("://");
      if (o != "*" && (sep == std::string::npos || o.find('/', sep + 3) != std::string::npos ||
                       o.find_first_of(" \t,") != std::string::npos)) {
        r.Error(n["allowed_origins"], "cors.allowed_origins",
                common::StrCat("'", o, "' is not an origin (scheme://host[:port]) or \"*\""));
      }
    }
  }
  if (r.StringList(n, "cors", "allowed_headers", &c->allowed_headers)) {
    for (std::string& h : c->allowed_headers) {
      std::transform(h.begin(), h.end(), h.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    }
  }
  r.Uint(n, "cors", "max_age_s", &c->max_age_s, 0, 86'400);
}

void ReadAccessLog(YamlReader& r, const YAML::Node& n, AccessLogConfig* c) {
  if (!r.ExpectMap(n, "access_log", {"enabled", "path"})) return;
  r.Bool(n, "access_log", "enabled", &c->enabled);
  r.String(n, "access_log", "path", &c->path);
}

}  // namespace kvgate::config
