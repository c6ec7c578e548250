#include "config/loader.h"

#include <cstdlib>
#include <fstream>

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

}  // namespace
}  // namespace kvgate::config
