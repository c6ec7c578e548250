// File: router/handlers/auth.h
// Who may use the gateway: the data plane's API keys (auth.api_keys, stored as SHA-256 hex,
// compared in constant time against every key so the time taken tells nothing) and the admin
// token (admin.token), each a pre-handler of the route table. A request that passes carries
// its key's name in the exchange, for the access log, the metrics and the per-key limits.
// Stateless apart from the config each request leases; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "router/http/route_table.h"

namespace kvgate::router {

class GatewayState;

/// The credentials of an `Authorization` value whose scheme is Bearer (any case, RFC 9110
/// §11.1), surrounding spaces removed; nullopt for another scheme or an empty credential.
std::optional<std::string_view> BearerToken(std::string_view authorization);

/// Equality that looks at every byte of the longer input whatever the first difference.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

/// Lower-case hex SHA-256 of `data` (what auth.api_keys[].sha256 holds).
std::string Sha256Hex(std::string_view data);

/// Paths that answer without an API key: probes and the Prometheus scrape.
bool IsOpenPath(std::string_view path);

/// On admin routes, when admin.token is set, requires "Authorization: Bearer <token>",
/// else 401. Without a token, admin routes on the data-plane listener answer 404 (they would
/// show worker addresses and index state to anyone): set admin.token or admin.listen.
PreHandlerPtr MakeAdminTokenCheck();

/// On data-plane routes but the open ones, when auth.api_keys is set, requires a key whose
/// SHA-256 is listed ("Authorization: Bearer <key>"), else 401 with an OpenAI-style body and
/// `WWW-Authenticate: Bearer`; sets Exchange::api_key to the key's name.
PreHandlerPtr MakeApiKeyCheck(GatewayState& state);

}  // namespace kvgate::router
