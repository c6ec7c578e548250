#include "router/config/loader.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::config {
namespace {

using ::testing::HasSubstr;

std::string Error(std::string_view yaml) {
  auto c = LoadConfigFromString(yaml, "test.yaml");
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << yaml;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigLoader, EmptyDocumentGivesDefaults) {
  auto c = LoadConfigFromString("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_port, 8000);
  EXPECT_EQ(c->limits.max_body_bytes, 32ull << 20);
  EXPECT_EQ(c->routing.policy, "kvaware");
  EXPECT_TRUE(c->workers.empty());
}

TEST(ConfigLoader, SessionKeysAndResponsePins) {
  auto c = LoadConfigFromString(R"(
routing:
  session_keys: [X-Claude-Code-Session-Id, prompt_cache_key, user]
  responses: {max_pins: 1000, pin_ttl_s: 60}
)",
                                "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->routing.session_keys,
              ::testing::ElementsAre("x-claude-code-session-id", "prompt_cache_key", "user"));
  EXPECT_EQ(c->routing.responses.max_pins, 1000u);
  EXPECT_EQ(c->routing.responses.pin_ttl_s, 60u);
  auto d = LoadConfigFromString("", "empty.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->routing.session_keys.front(), "x-session-id");
  EXPECT_THAT(Error("routing:\n  session_keys: [user, User]\n"),
              HasSubstr("test.yaml:2: routing.session_keys: 'user' is listed twice"));
  EXPECT_THAT(Error("routing:\n  session_keys: user\n"),
              HasSubstr("routing.session_keys: must be a list"));
  EXPECT_THAT(Error("routing:\n  responses: {max_pins: 0}\n"), HasSubstr("max_pins"));
}

TEST(ConfigLoader, KvAwareLoadDelayWeight) {
  auto c = LoadConfigFromString("routing:\n  kvaware: {load_delay_weight: 2.5}\n", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->routing.kvaware.load_delay_weight, 2.5);
  EXPECT_DOUBLE_EQ(LoadConfigFromString("", "e.yaml")->routing.kvaware.load_delay_weight, 1.0);
  EXPECT_THAT(Error("routing:\n  kvaware: {load_delay_weight: -1}\n"),
              HasSubstr("load_delay_weight"));
}

TEST(ConfigLoader, FullWorkerEntry) {
  auto c = LoadConfigFromString(R"(
listen: "127.0.0.1:9000"
routing: {policy: least_request}
workers:
  - url: http://10.1.2.3:8000/
    models: [a, b]
    role: prefill
    dp_size: 4
    weight: 2.5
)",
                                "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_host, "127.0.0.1");
  EXPECT_EQ(c->listen_port, 9000);
  EXPECT_EQ(c->routing.policy, "least_request");
  ASSERT_EQ(c->workers.size(), 1u);
  const WorkerConfig& w = c->workers[0];
  EXPECT_EQ(w.url.ToString(), "http://10.1.2.3:8000");
  EXPECT_EQ(w.models, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(w.role, WorkerRole::kPrefill);
  EXPECT_EQ(w.dp_size, 4u);
  EXPECT_DOUBLE_EQ(w.weight, 2.5);
}

TEST(ConfigLoader, UnknownTopLevelKeyNamesKeyAndLine) {
  const std::string e = Error("threads: 2\nlisten_port: 80\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:2"));
  EXPECT_THAT(e, HasSubstr("listen_port"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
}

TEST(ConfigLoader, UnknownNestedKeyNamesPath) {
  const std::string e = Error("limits:\n  max_body_byte: 10\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:2"));
  EXPECT_THAT(e, HasSubstr("limits.max_body_byte"));
}

TEST(ConfigLoader, WrongTypeNamesKeyAndLine) {
  const std::string e = Error("threads: 1\nlimits:\n  max_body_bytes: lots\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("limits.max_body_bytes"));
  EXPECT_THAT(e, HasSubstr("lots"));
}

TEST(ConfigLoader, NegativeNumberRejected) {
  EXPECT_THAT(Error("threads: -1\n"), HasSubstr("threads"));
}

TEST(ConfigLoader, OutOfRangeRejected) {
  EXPECT_THAT(Error("retry:\n  max_attempts: 100\n"), HasSubstr("retry.max_attempts"));
}

TEST(ConfigLoader, BadUrlNamesWorkerIndexAndLine) {
  const std::string e = Error(R"(workers:
  - url: http://ok:1
  - url: ftp://nope:21
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("workers[1].url"));
  EXPECT_THAT(e, HasSubstr("scheme must be http"));
}

TEST(ConfigLoader, UrlWithoutSchemeRejected) {
  EXPECT_THAT(Error("workers:\n  - url: 10.0.0.1:8000\n"), HasSubstr("workers[0].url"));
}

TEST(ConfigLoader, DuplicateWorkerNamesBoth) {
  const std::string e = Error(R"(workers:
  - url: http://a:8000
  - url: http://a:8000/
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("workers[1].url"));
  EXPECT_THAT(e, HasSubstr("duplicate worker 'http://a:8000'"));
}

TEST(ConfigLoader, MissingUrl) {
  EXPECT_THAT(Error("workers:\n  - models: [x]\n"), HasSubstr("workers[0].url: is required"));
}

TEST(ConfigLoader, BadRoleAndPolicy) {
  const std::string e = Error(R"(routing:
  policy: magic
workers:
  - url: http://a:1
    role: both
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:2: routing.policy: unknown policy 'magic'"));
  EXPECT_THAT(e, HasSubstr("test.yaml:5: workers[0].role"));
}

TEST(ConfigLoader, ReportsEveryErrorAtOnce) {
  const std::string e = Error("threads: x\nlog_level: loud\nbogus: 1\n");
  EXPECT_THAT(e, HasSubstr("threads"));
  EXPECT_THAT(e, HasSubstr("log_level"));
  EXPECT_THAT(e, HasSubstr("bogus"));
}

TEST(ConfigLoader, InvalidYamlSyntax) {
  EXPECT_THAT(Error("workers: [\n"), HasSubstr("invalid YAML"));
}

TEST(ConfigLoader, MissingFile) {
  auto c = LoadConfigFromFile("/nonexistent/kvgate.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/nonexistent/kvgate.yaml"));
}

// Issue 33: "cannot read config file" said nothing of why, and a directory read as an empty
// file: a config with no workers that --check passed.
TEST(ConfigLoader, UnreadableFileSaysWhy) {
  auto missing = LoadConfigFromFile("/nonexistent/kvgate.yaml");
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent/kvgate.yaml: cannot read config file: No such file"));
  auto dir = LoadConfigFromFile("/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()),
              HasSubstr("/tmp: cannot read config file: Is a directory"));
}

// Issue 33: yaml-cpp keeps both of two equal keys and answers with the first; the second
// `listen:` was ignored without a word. Both places are named.
TEST(ConfigLoader, DuplicateKeysAreErrorsNamingBothLines) {
  auto c = LoadConfigFromString(
      "listen: 127.0.0.1:8000\nrouting: {model_policies: {m: cost, m: random}}\n"
      "listen: 127.0.0.1:9000\nrouting:\n  policy: round_robin\n\n"
      "workers:\n  - url: http://a:1\n    weight: 1\n    weight: 2\n",
      "dup.yaml");
  ASSERT_FALSE(c.ok());
  const std::string m(c.status().message());
  EXPECT_THAT(m, HasSubstr("dup.yaml:3: listen: duplicate key (first at dup.yaml:1)"));
  EXPECT_THAT(m, HasSubstr("dup.yaml:4: routing: duplicate key (first at dup.yaml:2)"));
  EXPECT_THAT(m, HasSubstr("dup.yaml:10: workers[0].weight: duplicate key (first at dup.yaml:9)"));
  EXPECT_THAT(m, HasSubstr("routing.model_policies.m: duplicate key"));
}

// Issue 33: `listen: localhost:8000` passed --check and then failed to bind ("not an IP
// address"). A name is resolved where the config is read; one that does not resolve is refused.
TEST(ConfigLoader, ListenNamesResolveOrAreRefused) {
  auto c =
      LoadConfigFromString("listen: localhost:8000\nadmin: {listen: 'localhost:8001'}\n", "l.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->listen_host, ::testing::AnyOf("127.0.0.1", "::1"));
  EXPECT_EQ(c->listen_port, 8000);
  EXPECT_THAT(c->admin.listen, ::testing::AnyOf("127.0.0.1:8001", "[::1]:8001"));
  auto bad = LoadConfigFromString("listen: no-such-host.invalid:8000\n", "l.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("l.yaml:1: listen: cannot resolve 'no-such-host.invalid'"));
}

// The example config is documented as showing every key: every key the schema allows, in every
// mapping the example has, must be there, live or commented out ("# key: ..." lines are read as
// if uncommented, so that alternatives such as token / token_file can be shown side by side).
std::string Uncommented(const std::string& text) {
  static const std::regex commented_key(R"(^(\s*)# ((\s*)(- )?\{?[a-z_]+:.*)$)");
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    out += std::regex_replace(line, commented_key, "$1$2") + "\n";
  }
  return out;
}

TEST(ConfigLoader, ExampleConfigShowsEveryKey) {
  std::ifstream in(std::string(KVGATE_TEST_SOURCE_DIR) + "/config/kvgate.example.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string example = Uncommented(ss.str());
  const std::vector<std::string> missing = KeysMissingFrom(example);
  EXPECT_TRUE(missing.empty()) << "config/kvgate.example.yaml lacks: "
                               << common::StrJoin(missing, ", ");
  // The check can fail: a key taken out of the example is named.
  const std::string without =
      std::regex_replace(example, std::regex("\n  queue_timeout_ms:[^\n]*"), "");
  EXPECT_THAT(KeysMissingFrom(without), ::testing::Contains("limits.queue_timeout_ms"));
  EXPECT_THAT(KeysMissingFrom("listen: 127.0.0.1:1\n"), ::testing::Contains("tls"));
}

TEST(ConfigLoader, ExampleConfigLoads) {
  auto c = LoadConfigFromFile(std::string(KVGATE_TEST_SOURCE_DIR) + "/config/kvgate.example.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->workers.size(), 2u);
  EXPECT_TRUE(ValidateConfig(*c).ok());
}

TEST(ConfigLoader, KvEventsAndPreciseSettings) {
  auto c = LoadConfigFromString(R"(
routing:
  precise: {tokenizer: bytes4, model_tokenizers: {m: bytes4}, probe: false, probe_timeout_ms: 250,
            speculative_ttl_ms: 0, silence_timeout_ms: 1000, media: {disk: store, NVMe: host}}
workers:
  - url: http://a:1
    dp_size: 2
    kv_events: {endpoint: "tcp://a:5557", replay_endpoint: "tcp://a:5558", topic: kv,
                block_size: 32, bind: true}
  - url: http://b:1
)",
                                "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const auto& k = c->workers[0].kv_events;
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->endpoint, "tcp://a:5557");
  EXPECT_EQ(k->replay_endpoint, "tcp://a:5558");
  EXPECT_EQ(k->topic, "kv");
  EXPECT_EQ(k->block_size, 32u);
  EXPECT_TRUE(k->bind);
  EXPECT_FALSE(c->workers[1].kv_events.has_value());
  const PreciseConfig& p = c->routing.precise;
  EXPECT_FALSE(p.probe);
  EXPECT_EQ(p.probe_timeout_ms, 250u);
  EXPECT_EQ(p.speculative_ttl_ms, 0u);
  EXPECT_EQ(p.silence_timeout_ms, 1000u);
  EXPECT_EQ(p.model_tokenizers.size(), 1u);
  ASSERT_EQ(p.media.size(), 2u);
  EXPECT_EQ(p.media[1].first, "NVMe");
  EXPECT_EQ(p.media[1].second, "host");
}

TEST(ConfigLoader, KvEventsErrorsNameKeyAndLine) {
  EXPECT_THAT(Error("workers:\n  - url: http://a:1\n    kv_events: {topic: x}\n"),
              HasSubstr("test.yaml:3: workers[0].kv_events.endpoint: is required"));
  EXPECT_THAT(Error("workers:\n  - url: http://a:1\n    kv_events: {endpoint: \"a:5557\"}\n"),
              HasSubstr("expected tcp://HOST:PORT, ipc://PATH or inproc://NAME, got 'a:5557'"));
  EXPECT_THAT(Error("workers:\n  - url: http://a:1\n    kv_events: {endpoint: \"tcp://a:1\", "
                    "hash_mode: sha256_cbor}\n"),
              HasSubstr("hash_mode: must be 'tokens'"));
  EXPECT_THAT(Error("workers:\n  - url: http://a:1\n    kv_events: {endpoint: \"tcp://a:1\", "
                    "block_size: 0}\n"),
              HasSubstr("block_size: must be between 1 and 4096"));
  EXPECT_THAT(Error("routing:\n  precise: {tokenizer: llama3}\n"),
              HasSubstr("routing.precise.tokenizer: unknown tokenizer \"llama3\" (known: bytes4, "
                        "or a directory with the model's tokenizer.json)"));
  EXPECT_THAT(Error("routing:\n  precise: {tokenizer: /nonexistent/model}\n"),
              HasSubstr("test.yaml:2: routing.precise.tokenizer: "));
  EXPECT_THAT(Error("routing:\n  precise: {media: {disk: ssd}}\n"),
              HasSubstr("routing.precise.media.disk: must be gpu, host or store, got 'ssd'"));
  EXPECT_THAT(Error("routing:\n  precise: {probes: true}\n"), HasSubstr("unknown key"));
}

TEST(ConfigValidate, DuplicateFromCommandLine) {
  Config c;
  WorkerConfig w;
  w.url = *common::ParseHttpUrl("http://x:1");
  c.workers = {w, w};
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("duplicate worker"));
}

TEST(ConfigLoader, PdSectionAndWorkerBootstrap) {
  auto c = LoadConfigFromString(R"(
pd:
  protocol: vllm-nixl
  models: {small: none, chat: sglang-bootstrap}
  skip_prefill_below_tokens: 512
  fallback_to_mixed: false
  release_timeout_ms: 2000
workers:
  - {url: "http://p:8000", role: prefill, bootstrap_port: 9100, zmq_address: "10.0.0.1:21001"}
  - {url: "http://d:8000", role: decode}
)",
                                "pd.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pd.protocol, "vllm-nixl");
  ASSERT_EQ(c->pd.model_protocols.size(), 2u);
  EXPECT_EQ(c->pd.model_protocols[0], (std::pair<std::string, std::string>{"small", "none"}));
  EXPECT_EQ(c->pd.skip_prefill_below_tokens, 512u);
  EXPECT_FALSE(c->pd.fallback_to_mixed);
  EXPECT_EQ(c->pd.release_timeout_ms, 2000u);
  EXPECT_EQ(c->workers[0].bootstrap_port, 9100);
  EXPECT_EQ(c->workers[0].zmq_address, "10.0.0.1:21001");
  EXPECT_EQ(c->workers[1].bootstrap_port, 8998);  // SGLang's and Mooncake's default
}

TEST(ConfigLoader, PdErrorsNameTheKey) {
  EXPECT_THAT(Error("pd: {protocol: nixl}"), HasSubstr("pd.protocol: unknown P/D protocol 'nixl'"));
  EXPECT_THAT(Error("pd: {models: {m: bogus}}"), HasSubstr("pd.models.m: unknown P/D protocol"));
  EXPECT_THAT(Error("pd: {protocol: none}"), HasSubstr("pd.protocol"));
  EXPECT_THAT(Error("pd: {typo: 1}"), HasSubstr("typo"));
  EXPECT_THAT(Error("workers: [{url: 'http://a:1', bootstrap_port: 70000}]"),
              HasSubstr("bootstrap_port"));
  EXPECT_THAT(Error("workers: [{url: 'http://a:1', zmq_address: 'nope'}]"),
              HasSubstr("zmq_address"));
}

TEST(ConfigLoader, DiscoveryDns) {
  auto c = LoadConfigFromString(R"(
discovery:
  dns:
    - {name: _http._tcp.vllm.ns.svc.cluster.local, srv: true, server: "10.96.0.10",
       interval_ms: 2000, timeout_ms: 500, role: decode, models: [m]}
    - {name: vllm.ns.svc.cluster.local, port: 9000}
)",
                                "d.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->discovery.dns.size(), 2u);
  const auto& d = c->discovery.dns[0];
  EXPECT_TRUE(d.srv);
  EXPECT_EQ(d.server, "10.96.0.10");
  EXPECT_EQ(d.interval_ms, 2000u);
  EXPECT_EQ(d.worker.role, WorkerRole::kDecode);
  EXPECT_EQ(d.worker.models, std::vector<std::string>{"m"});
  EXPECT_EQ(c->discovery.dns[1].port, 9000);
  EXPECT_THAT(Error("discovery: {dns: [{port: 1}]}"), HasSubstr("discovery.dns[0].name"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, url: 'http://x:1'}]}"), HasSubstr("url"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, kv_events: {endpoint: 'tcp://x:1'}}]}"),
              HasSubstr("kv_events"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, server: 'x:y:z'}]}"), HasSubstr("server"));
  EXPECT_THAT(Error("discovery: {dns: {name: a}}"), HasSubstr("must be a list"));
}

TEST(ConfigLoader, DiscoveryKubernetes) {
  auto c = LoadConfigFromString(R"(
drain_delay_ms: 5000
discovery:
  kubernetes:
    - {service: vllm-decode, port_name: http, role: decode, kv_events_port: 5557,
       kv_events_replay_port: 5558, kv_events_topic: kv, watch_timeout_s: 60}
    - {label_selector: "app=vllm,tier=gpu", namespace: llm, api_server: "https://10.96.0.1",
       pod_metadata: false, port: 30000}
)",
                                "k.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->drain_delay_ms, 5000u);
  ASSERT_EQ(c->discovery.kubernetes.size(), 2u);
  const auto& k = c->discovery.kubernetes[0];
  EXPECT_EQ(k.service, "vllm-decode");
  EXPECT_EQ(k.port_name, "http");
  EXPECT_EQ(k.worker.role, WorkerRole::kDecode);
  EXPECT_EQ(k.kv_events_port, 5557);
  EXPECT_EQ(k.kv_events_replay_port, 5558);
  EXPECT_EQ(k.kv_events_topic, "kv");
  EXPECT_EQ(k.watch_timeout_s, 60u);
  EXPECT_TRUE(k.pod_metadata);
  EXPECT_EQ(k.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  const auto& l = c->discovery.kubernetes[1];
  EXPECT_EQ(l.label_selector, "app=vllm,tier=gpu");
  EXPECT_EQ(l.namespace_, "llm");
  EXPECT_EQ(l.api_server, "https://10.96.0.1");
  EXPECT_FALSE(l.pod_metadata);
  EXPECT_EQ(l.port, 30000);
  EXPECT_THAT(Error("discovery: {kubernetes: [{port_name: http}]}"),
              HasSubstr("discovery.kubernetes[0]: needs service or label_selector"));
  EXPECT_THAT(Error("discovery: {kubernetes: [{service: a, api_server: 'ftp://x'}]}"),
              HasSubstr("discovery.kubernetes[0].api_server"));
  EXPECT_THAT(Error("discovery: {kubernetes: [{service: a, watch_timeout_s: 0}]}"),
              HasSubstr("watch_timeout_s"));
  EXPECT_THAT(Error("discovery: {kubernetes: [{service: a, url: 'http://x:1'}]}"),
              HasSubstr("url"));
  EXPECT_THAT(Error("discovery: {kubernetes: {service: a}}"), HasSubstr("must be a list"));
  EXPECT_THAT(Error("drain_delay_ms: 9999999"), HasSubstr("drain_delay_ms"));
}

// Issue 27: what a discovery source may name, and what a prefill's kv_transfer_params may.
TEST(ConfigLoader, DiscoveryBoundsAndTransferPeers) {
  auto c = LoadConfigFromString(R"(
discovery:
  dns:
    - {name: _w._tcp.v.test, srv: true, allowed_networks: [10.0.0.0/8, "fd00::/8"],
       allowed_ports: [8000, 8001]}
    - {name: v.test, port: 9000, allowed_networks: 127.0.0.0/8, allowed_ports: 9000}
  kubernetes:
    - {service: v, allowed_networks: [10.244.0.0/16], allowed_ports: [8000],
       kv_transfer_ports: [5600]}
workers:
  - {url: "http://p:1", role: prefill, kv_transfer_hosts: [10.0.0.5, localhost],
     kv_transfer_ports: [5600, 5601], kv_transfer_engine_id: eng-1}
)",
                                "b.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const auto& d = c->discovery.dns[0];
  EXPECT_EQ(d.allowed_networks, (std::vector<std::string>{"10.0.0.0/8", "fd00::/8"}));
  EXPECT_EQ(d.allowed_ports, (std::vector<uint16_t>{8000, 8001}));
  EXPECT_EQ(c->discovery.dns[1].allowed_networks, std::vector<std::string>{"127.0.0.0/8"});
  EXPECT_EQ(c->discovery.dns[1].allowed_ports, std::vector<uint16_t>{9000});
  const auto& k = c->discovery.kubernetes[0];
  EXPECT_EQ(k.allowed_networks, std::vector<std::string>{"10.244.0.0/16"});
  EXPECT_EQ(k.allowed_ports, std::vector<uint16_t>{8000});
  EXPECT_EQ(k.worker.kv_transfer_ports, std::vector<uint16_t>{5600});
  const auto& w = c->workers[0];
  EXPECT_EQ(w.kv_transfer_hosts, (std::vector<std::string>{"10.0.0.5", "localhost"}));
  EXPECT_EQ(w.kv_transfer_ports, (std::vector<uint16_t>{5600, 5601}));
  EXPECT_EQ(w.kv_transfer_engine_id, "eng-1");

  // Errors name the file, the line and the key.
  EXPECT_THAT(Error("discovery:\n  dns:\n    - {name: a, allowed_networks: [10.0.0.1/8]}"),
              HasSubstr("test.yaml:3: discovery.dns[0].allowed_networks: '10.0.0.1/8' has host"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, allowed_networks: [vllm.local]}]}"),
              HasSubstr("discovery.dns[0].allowed_networks: 'vllm.local' is not a network"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, allowed_networks: [10.0.0.0/40]}]}"),
              HasSubstr("prefix length"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, allowed_networks: {x: 1}}]}"),
              HasSubstr("allowed_networks"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, srv: true, allowed_ports: [0]}]}"),
              HasSubstr("discovery.dns[0].allowed_ports: expected ports 1 to 65535"));
  EXPECT_THAT(Error("discovery: {dns: [{name: a, port: 8000, allowed_ports: [8001]}]}"),
              HasSubstr("does not include port 8000"));
  EXPECT_THAT(Error("discovery: {kubernetes: [{service: a, allowed_ports: [x]}]}"),
              HasSubstr("discovery.kubernetes[0].allowed_ports"));
  EXPECT_THAT(Error("discovery: {kubernetes: [{service: a, kv_transfer_hosts: [h]}]}"),
              HasSubstr("kv_transfer_hosts"));  // one worker's own: not in a template
  EXPECT_THAT(Error("workers: [{url: 'http://a:1', kv_transfer_ports: [70000]}]"),
              HasSubstr("workers[0].kv_transfer_ports"));
  EXPECT_THAT(Error("workers: [{url: 'http://a:1', kv_transfer_hosts: [[a]]}]"),
              HasSubstr("workers[0].kv_transfer_hosts"));
}

TEST(ConfigLoader, AuthAndAdmissionLimits) {
  auto c = LoadConfigFromString(R"(
auth:
  api_keys:
    - {name: team-a, sha256: "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"}
    - name: batch
      sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
      rate: {requests_per_minute: 10, prompt_tokens_per_minute: 100000}
limits:
  rate: {requests_per_minute: 600}
  max_concurrent_requests: 256
  queue_size: 50
  queue_timeout_ms: 5000
  max_connections_per_client: 100
  health_reserve: 8
)",
                                "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->auth.api_keys.size(), 2u);
  EXPECT_EQ(c->auth.api_keys[0].name, "team-a");
  // Stored lower-case: the comparison is of hex text.
  EXPECT_EQ(c->auth.api_keys[0].sha256,
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
  EXPECT_FALSE(c->auth.api_keys[0].rate.has_value());
  ASSERT_TRUE(c->auth.api_keys[1].rate.has_value());
  EXPECT_EQ(c->auth.api_keys[1].rate->prompt_tokens_per_minute, 100000u);
  EXPECT_EQ(c->limits.rate.requests_per_minute, 600u);
  EXPECT_EQ(c->limits.max_concurrent_requests, 256u);
  EXPECT_EQ(c->limits.queue_size, 50u);
  EXPECT_EQ(c->limits.queue_timeout_ms, 5000u);
  EXPECT_EQ(c->limits.max_connections_per_client, 100u);
  EXPECT_EQ(c->limits.health_reserve, 8u);
  EXPECT_THAT(Error("auth: {api_keys: [{name: a, sha256: abc}]}"),
              HasSubstr("auth.api_keys[0].sha256: must be 64 hex digits"));
  EXPECT_THAT(Error("auth: {api_keys: [{name: a}]}"), HasSubstr("auth.api_keys[0].sha256"));
  EXPECT_THAT(Error("auth: {api_keys: [{sha256: "
                    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}"),
              HasSubstr("auth.api_keys[0].name: is required"));
  const std::string twice =
      "auth: {api_keys: [{name: a, sha256: "
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}, {name: a, sha256: "
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}";
  EXPECT_THAT(Error(twice), HasSubstr("duplicate name 'a'"));
  EXPECT_THAT(Error("auth: {api_keys: [{name: a, key: plain}]}"), HasSubstr("key"));
  EXPECT_THAT(Error("limits: {rate: {rpm: 1}}"), HasSubstr("limits.rate.rpm"));
  EXPECT_THAT(Error("limits: {queue_timeout_ms: 0}"), HasSubstr("queue_timeout_ms"));
}

// Secret files in a temp dir of their own, removed at the end of the test.
class SecretDir {
 public:
  SecretDir() {
    char tmpl[] = "/tmp/kvgate-secrets-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~SecretDir() { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::trunc) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

constexpr char kSha[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

TEST(ConfigLoader, AdminTokenFromAFileOrTheEnvironment) {
  SecretDir d;
  const std::string file = d.Write("token", "tok-from-file\n");
  auto c = LoadConfigFromString("admin: {token_file: " + file + "}", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, "tok-from-file");
  EXPECT_EQ(c->admin.token_file, file);
  // Group-readable is how a Secret volume with an fsGroup reaches a non-root user.
  c = LoadConfigFromString("admin: {token_file: " + d.Write("g", "tok-g", 0640) + "}", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, "tok-g");
  ::setenv("KVGATE_TEST_ADMIN_TOKEN", " tok-from-env ", 1);
  c = LoadConfigFromString("admin: {token_env: KVGATE_TEST_ADMIN_TOKEN}", "t.yaml");
  ::unsetenv("KVGATE_TEST_ADMIN_TOKEN");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, "tok-from-env");

  // Each bad source is an error that names the key (and the file), never an open admin API.
  EXPECT_THAT(Error("admin:\n  token_file: /nonexistent/token\n"),
              HasSubstr("test.yaml:2: admin.token_file: the admin token: cannot read "
                        "/nonexistent/token"));
  EXPECT_THAT(Error("admin: {token_file: " + d.Write("open", "tok\n", 0644) + "}"),
              HasSubstr("admin.token_file: the admin token: " + d.dir() +
                        "/open is open to other users (mode 0644)"));
  EXPECT_THAT(Error("admin: {token_file: " + d.Write("w", "tok\n", 0602) + "}"),
              HasSubstr("(mode 0602)"));
  EXPECT_THAT(Error("admin: {token_file: " + d.dir() + "}"), HasSubstr("is not a regular file"));
  EXPECT_THAT(Error("admin: {token_file: " + d.Write("empty", "\n") + "}"),
              HasSubstr("admin.token_file: the admin token is empty"));
  EXPECT_THAT(Error("admin: {token_file: " + d.Write("two", "a\nb\n") + "}"),
              HasSubstr("one line expected"));
  EXPECT_THAT(Error("admin: {token_env: KVGATE_TEST_UNSET_VARIABLE}"),
              HasSubstr("admin.token_env: the admin token: environment variable "
                        "KVGATE_TEST_UNSET_VARIABLE is not set"));
  EXPECT_THAT(Error("admin: {token: x, token_file: " + file + "}"),
              HasSubstr("admin: set one of token, token_file and token_env"));
  EXPECT_THAT(Error("admin: {token_file: " + file + ", token_env: HOME}"),
              HasSubstr("set one of token, token_file and token_env"));
}

// SIGHUP loads the config file again (router/server/main.cc), and with it the secret files: a
// rotated Secret is the new token after the reload.
TEST(ConfigLoader, SecretFilesAreReadAgainOnEachLoad) {
  SecretDir d;
  const std::string token = d.Write("token", "first\n");
  const std::string keys = d.Write("keys.yaml", std::string("- {name: a, sha256: ") + kSha + "}\n");
  const std::string cfg = d.Write(
      "kvgate.yaml", "admin: {token_file: " + token + "}\nauth: {api_keys_file: " + keys + "}\n");
  auto c = LoadConfigFromFile(cfg);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, "first");
  ASSERT_EQ(c->auth.api_keys.size(), 1u);
  d.Write("token", "second\n");
  d.Write("keys.yaml", std::string("- {name: b, sha256: ") + kSha + "}\n");
  c = LoadConfigFromFile(cfg);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, "second");
  ASSERT_EQ(c->auth.api_keys.size(), 1u);
  EXPECT_EQ(c->auth.api_keys[0].name, "b");
}

TEST(ConfigLoader, ApiKeysFromAFile) {
  SecretDir d;
  // Upper-case hex, stored lower-case as inline keys are.
  const std::string keys = d.Write("keys.yaml", R"(# a mounted Secret
- name: team-b
  sha256: 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08
- name: batch
  sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
  rate: {requests_per_minute: 10}
)");
  auto c = LoadConfigFromString(std::string("auth:\n  api_keys: [{name: team-a, sha256: ") + kSha +
                                    "}]\n  api_keys_file: " + keys + "\n",
                                "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->auth.api_keys.size(), 3u);
  EXPECT_EQ(c->auth.api_keys[0].name, "team-a");
  EXPECT_EQ(c->auth.api_keys[1].name, "team-b");
  EXPECT_EQ(c->auth.api_keys[1].sha256, kSha);
  EXPECT_EQ(c->auth.api_keys[2].name, "batch");
  ASSERT_TRUE(c->auth.api_keys[2].rate.has_value());
  EXPECT_EQ(c->auth.api_keys[2].rate->requests_per_minute, 10u);
  EXPECT_EQ(c->auth.api_keys_file, keys);

  // Errors in the file name the file and its line.
  EXPECT_THAT(Error(std::string("auth:\n  api_keys: [{name: team-b, sha256: ") + kSha +
                    "}]\n  api_keys_file: " + keys + "\n"),
              HasSubstr(keys + ":2: auth.api_keys_file[0].name: duplicate name 'team-b'"));
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("bad", "- {name: x, sha256: abc}\n") + "}"),
              HasSubstr(d.dir() + "/bad:1: auth.api_keys_file[0].sha256: must be 64 hex digits"));
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("map", "name: x\n") + "}"),
              HasSubstr("auth.api_keys_file: must be a list"));
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("yaml", "- [\n") + "}"),
              HasSubstr(d.dir() + "/yaml:"));
  // No keys where keys were meant: refused, or the data plane would be open.
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("empty", "") + "}"),
              HasSubstr("auth.api_keys_file: lists no keys"));
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("none", "[]\n") + "}"),
              HasSubstr("auth.api_keys_file: lists no keys"));
  EXPECT_THAT(Error("auth: {api_keys_file: \"\"}"), HasSubstr("auth.api_keys_file: is empty"));
  EXPECT_THAT(Error("auth:\n  api_keys_file: /nonexistent/keys\n"),
              HasSubstr("test.yaml:2: auth.api_keys_file: the API keys file: cannot read"));
  EXPECT_THAT(Error("auth: {api_keys_file: " + d.Write("open", "[]\n", 0604) + "}"),
              HasSubstr("is open to other users (mode 0604)"));
}

TEST(ConfigLoader, KeyNamesInMetricsOnlyWhenAsked) {
  auto c = LoadConfigFromString("", "t.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->auth.key_names_in_metrics);
  c = LoadConfigFromString("auth: {key_names_in_metrics: true}", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->auth.key_names_in_metrics);
  EXPECT_THAT(Error("auth: {key_names_in_metrics: maybe}"),
              HasSubstr("auth.key_names_in_metrics: expected true or false"));
}

// Issue 27's exhaustion limits: the failed-key throttle and the queue's per-client share.
TEST(LoaderTest, FailedKeyThrottleAndQueueShare) {
  auto c = LoadConfigFromString(
      "auth: {max_failures_per_address: 7, failure_window_ms: 30000}\n"
      "limits: {queue_share_per_client: 0.25}\n",
      "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auth.max_failures_per_address, 7u);
  EXPECT_EQ(c->auth.failure_window_ms, 30000u);
  EXPECT_DOUBLE_EQ(c->limits.queue_share_per_client, 0.25);
  auto d = LoadConfigFromString("listen: \"127.0.0.1:1\"\n", "d.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->auth.max_failures_per_address, 20u);
  EXPECT_DOUBLE_EQ(d->limits.queue_share_per_client, 0.5);
  EXPECT_THAT(Error("auth: {failure_window_ms: 0}"), HasSubstr("auth.failure_window_ms"));
  EXPECT_THAT(Error("auth: {max_failures_per_address: -1}"),
              HasSubstr("auth.max_failures_per_address"));
  EXPECT_THAT(Error("limits: {queue_share_per_client: 0}"),
              HasSubstr("limits.queue_share_per_client"));
  EXPECT_THAT(Error("limits: {queue_share_per_client: 1.5}"),
              HasSubstr("limits.queue_share_per_client"));
}

// Issue 27: a half-open TLS handshake may hold a place only so long.
TEST(LoaderTest, TlsHandshakeTimeout) {
  auto c = LoadConfigFromString("limits: {tls_handshake_timeout_ms: 2500}\n", "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.tls_handshake_timeout_ms, 2500u);
  auto d = LoadConfigFromString("listen: \"127.0.0.1:1\"\n", "d.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->limits.tls_handshake_timeout_ms, 10000u);
  EXPECT_THAT(Error("limits: {tls_handshake_timeout_ms: 0}"),
              HasSubstr("limits.tls_handshake_timeout_ms"));
}

// Parsing is a pure function of the text (issue 28): keys naming files, variables and
// tokenizer directories are recorded, never opened, so a config whose files do not exist yet
// parses; ResolveConfig then reads them, its errors naming the key at its line.
TEST(ConfigParse, NamesFilesWithoutReadingThem) {
  const std::string yaml =
      "upstream: {api_key_file: /nonexistent/worker.key}\n"
      "auth:\n"
      "  api_keys_file: /nonexistent/keys.yaml\n"
      "admin:\n"
      "  token_file: /nonexistent/token\n"
      "routing:\n"
      "  precise: {tokenizer: /nonexistent/model, model_tokenizers: {m: /nonexistent/m}}\n";
  auto parsed = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Config& c = parsed->config;
  EXPECT_EQ(c.upstream.api_key_file, "/nonexistent/worker.key");
  EXPECT_EQ(c.upstream.api_key, "");
  EXPECT_EQ(c.auth.api_keys_file, "/nonexistent/keys.yaml");
  EXPECT_EQ(c.admin.token_file, "/nonexistent/token");
  EXPECT_EQ(c.admin.token, "");
  EXPECT_EQ(c.routing.precise.tokenizer, "/nonexistent/model");
  EXPECT_EQ(parsed->places.at("auth.api_keys_file"), "t.yaml:3");
  EXPECT_EQ(parsed->places.at("admin.token_file"), "t.yaml:5");
  EXPECT_TRUE(ValidateConfig(c).ok());

  Config resolved = parsed->config;
  const absl::Status s = ResolveConfig(resolved, parsed->places);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.message());
  // Every problem, each at its key's line.
  EXPECT_THAT(m, HasSubstr("t.yaml:1: upstream: the worker API key: cannot read "
                           "/nonexistent/worker.key"));
  EXPECT_THAT(m, HasSubstr("t.yaml:3: auth.api_keys_file: the API keys file: cannot read "
                           "/nonexistent/keys.yaml"));
  EXPECT_THAT(m, HasSubstr("t.yaml:5: admin.token_file: the admin token: cannot read "
                           "/nonexistent/token"));
  EXPECT_THAT(m, HasSubstr("t.yaml:7: routing.precise.tokenizer: tokenizer directory "
                           "/nonexistent/model does not exist"));
  EXPECT_THAT(m, HasSubstr("t.yaml:7: routing.precise.model_tokenizers.m: tokenizer directory "
                           "/nonexistent/m does not exist"));
  // Without the places (a config built in code) the errors still name the key.
  Config bare = parsed->config;
  EXPECT_THAT(std::string(ResolveConfig(bare).message()),
              HasSubstr("\nadmin.token_file: the admin token: cannot read /nonexistent/token"));

  // An unset variable is not looked at while parsing either.
  ::unsetenv("KVGATE_TEST_UNSET_VARIABLE");
  auto env = ParseConfig("admin:\n  token_env: KVGATE_TEST_UNSET_VARIABLE\n", "e.yaml");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(std::string(ResolveConfig(env->config, env->places).message()),
              HasSubstr("e.yaml:2: admin.token_env: the admin token: environment variable "
                        "KVGATE_TEST_UNSET_VARIABLE is not set"));

  // What parsing can tell from the text alone it still refuses, at the key's line.
  auto bad = ParseConfig("routing:\n  precise: {tokenizer: llama3}\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("b.yaml:2: routing.precise.tokenizer: unknown tokenizer \"llama3\""));
}

// The files are read when resolving, not when parsing: what resolve sees is the file's content
// at that moment, and parsing alone adds none of the file's keys.
TEST(ConfigParse, ResolveReadsTheFilesAtResolveTime) {
  SecretDir d;
  const std::string keys = d.Write("keys.yaml", std::string("- {name: a, sha256: ") + kSha + "}\n");
  const std::string token = d.Write("token", "first\n");
  auto parsed =
      ParseConfig(std::string("auth:\n  api_keys: [{name: inline, sha256: ") + kSha +
                      "}]\n  api_keys_file: " + keys + "\nadmin: {token_file: " + token + "}\n",
                  "t.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->config.auth.api_keys.size(), 1u);  // the inline key only
  EXPECT_EQ(parsed->config.admin.token, "");
  d.Write("keys.yaml", std::string("- {name: b, sha256: ") + kSha + "}\n");
  d.Write("token", "second\n");
  Config c = parsed->config;
  ASSERT_TRUE(ResolveConfig(c, parsed->places).ok());
  ASSERT_EQ(c.auth.api_keys.size(), 2u);
  EXPECT_EQ(c.auth.api_keys[0].name, "inline");
  EXPECT_EQ(c.auth.api_keys[1].name, "b");
  EXPECT_EQ(c.admin.token, "second");
  // Names stay unique across the inline keys and the file's, checked when the file is read.
  d.Write("keys.yaml", std::string("- {name: inline, sha256: ") + kSha + "}\n");
  Config dup = parsed->config;
  EXPECT_THAT(std::string(ResolveConfig(dup, parsed->places).message()),
              HasSubstr(keys + ":1: auth.api_keys_file[0].name: duplicate name 'inline'"));
}

}  // namespace
}  // namespace kvgate::config
