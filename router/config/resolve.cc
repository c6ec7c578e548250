// File: router/config/resolve.cc
// ResolveConfig: the I/O a parsed config asks for, kept out of parsing so that parsing is a pure
// function of the text. Listen addresses that name a host are resolved. Secrets
// (router/config/secret.h) are read afresh each time, so a reload (SIGHUP: parse and resolve
// again) takes in a rotated Secret; tokenizers are loaded into the
// tokenizer registry, where the request path finds them by name.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/strings.h"
#include "common/url.h"
#include "router/config/loader.h"
#include "router/config/secret.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "tokenizer/tokenizer.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {
namespace {

// Collects resolve errors as the parser words its own: "source:line: key: what".
class Problems {
 public:
  explicit Problems(const KeyPlaces& places) : places_(places) {}

  void Add(const std::string& key, absl::string_view what) {
    auto it = places_.find(key);
    errors_.push_back(it == places_.end() ? common::StrCat(key, ": ", what)
                                          : common::StrCat(it->second, ": ", key, ": ", what));
  }
  std::vector<std::string>& errors() { return errors_; }

 private:
  const KeyPlaces& places_;
  std::vector<std::string> errors_;
};

// `listen` and `admin.listen` as the IP addresses start binds: a name resolves or is refused
// here, so that `--check` refuses what start would fail to bind.
void ResolveListenAddresses(Problems& p, Config* c) {
  if (auto ip = common::ListenAddress(c->listen_host); !ip.ok()) {
    p.Add("listen", ip.status().message());
  } else {
    c->listen_host = *std::move(ip);
  }
  auto hp = common::ParseHostPort(c->admin.listen);
  if (c->admin.listen.empty() || !hp.ok()) return;  // parsing reported a bad one
  if (auto ip = common::ListenAddress(hp->first); !ip.ok()) {
    p.Add("admin.listen", ip.status().message());
  } else if (*ip != hp->first) {
    c->admin.listen =
        common::StrCat(ip->find(':') != std::string::npos ? "[" + *ip + "]" : *ip, ":", hp->second);
  }
}

void ResolveUpstreamKey(Problems& p, UpstreamConfig* c) {
  auto key = ReadSecret(c->api_key_file, c->api_key_env, "the worker API key");
  if (!key.ok()) {
    p.Add("upstream", key.status().message());
  } else if (!key->empty()) {
    c->api_key = *std::move(key);
  }
}

// `auth.api_keys_file`: the same entries as `auth.api_keys`, as a YAML list in a secret file,
// appended after them with names unique across both. Errors in the file name the file and its
// lines. An empty file or list is an error, not an open door.
void ResolveApiKeysFile(Problems& p, AuthConfig* c) {
  if (c->api_keys_file.empty()) return;
  const std::string& file = c->api_keys_file;
  auto text = ReadSecretFile(file, "the API keys file");
  if (!text.ok()) {
    p.Add("auth.api_keys_file", text.status().message());
    return;
  }
  std::set<std::string> names;
  for (const ApiKeyConfig& k : c->api_keys) names.insert(k.name);
  YamlReader fr(file);
  try {
    const YAML::Node keys = YAML::Load(*text);
    if (!keys.IsDefined() || keys.IsNull() || (keys.IsSequence() && keys.size() == 0)) {
      fr.Error(keys, "auth.api_keys_file",
               "lists no keys (expected a YAML list of {name, sha256} entries)");
    } else {
      ReadApiKeys(fr, keys, "auth.api_keys_file", &names, &c->api_keys);
    }
  } catch (const YAML::Exception& e) {
    fr.errors().push_back(common::StrCat(file, ":", e.mark.line + 1, ": ", e.msg));
  }
  for (std::string& e : fr.errors()) p.errors().push_back(std::move(e));
}

void ResolveAdminToken(Problems& p, AdminConfig* c) {
  auto token = ReadSecret(c->token_file, c->token_env, "the admin token");
  if (!token.ok()) {
    p.Add(!c->token_file.empty() ? "admin.token_file" : "admin.token_env",
          token.status().message());
  } else if (!token->empty()) {
    c->token = *std::move(token);
  }
}

void ResolveClusterPassword(Problems& p, ClusterConfig* c) {
  auto password = ReadSecret(c->password_file, c->password_env, "the cluster password");
  if (!password.ok()) {
    p.Add(!c->password_file.empty() ? "cluster.password_file" : "cluster.password_env",
          password.status().message());
  } else if (!password->empty()) {
    c->password = *std::move(password);
  }
}

void ResolveTokenizers(Problems& p, const PreciseConfig& c) {
  auto load = [&](const std::string& key, const std::string& name) {
    if (auto t = tokenizer::MakeTokenizer(name); !t.ok()) p.Add(key, t.status().message());
  };
  load("routing.precise.tokenizer", c.tokenizer);
  for (const auto& [model, name] : c.model_tokenizers) {
    load(common::StrCat("routing.precise.model_tokenizers.", model), name);
  }
}

}  // namespace

absl::Status ResolveConfig(Config& config, const KeyPlaces& places) {
  Problems p(places);
  ResolveListenAddresses(p, &config);
  ResolveUpstreamKey(p, &config.upstream);
  ResolveApiKeysFile(p, &config.auth);
  ResolveAdminToken(p, &config.admin);
  ResolveClusterPassword(p, &config.cluster);
  ResolveTokenizers(p, config.routing.precise);
  if (p.errors().empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(common::StrJoin(p.errors(), "\n"));
}

}  // namespace kvgate::config
