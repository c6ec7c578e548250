// File: config/config.h
// The gateway's configuration: plain immutable values built by router/config/loader.h (parsing
// records the files, variables and tokenizers a key names; resolving reads them into the
// fields marked "resolved"). A Config is never modified after loading; a reload builds a new one
// and publishes it as std::shared_ptr<const Config>. Thread-compatible (and immutable once shared).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/url.h"

namespace kvgate::config {

enum class WorkerRole { kMixed, kPrefill, kDecode };

// Inline so that the schema stays header-only (no router library behind it).
inline const char* WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kMixed:
      break;
  }
  return "mixed";
}

// Where a worker publishes its KV-cache events (vLLM/SGLang --kv-events-config). With DP, rank r
// publishes on port + r (both endpoints), as vLLM offsets them.
struct KvEventsConfig {
  std::string endpoint;              // the engine's PUB address, e.g. tcp://10.0.0.5:5557
  std::string replay_endpoint;       // its ROUTER address; empty: gaps cannot be recovered
  std::string topic;                 // subscription prefix; "" receives every topic
  uint32_t block_size = 16;          // the engine's --block-size; request chains use it
  bool bind = false;                 // kvgate binds and the engine connects (endpoint without '*')
  std::string hash_mode = "tokens";  // kvgate re-hashes BlockStored token ids (the only mode)

  friend bool operator==(const KvEventsConfig&, const KvEventsConfig&) = default;
};

// One KV-cache group of a hybrid model beside full attention, for approximate mode (precise
// mode reads the groups from the engine's events): as vLLM logs them at start-up.
struct KvGroupConfig {
  std::string kind;             // sliding_window | mamba (kvindex::ParseGroupKind's names)
  uint32_t sliding_window = 0;  // tokens; sliding_window only
  uint64_t num_gpu_blocks = 0;  // the group's pool, in routing.block_tokens blocks
  // mamba only: the engine's --max-num-batched-tokens, where its prefill chunks end and leave a
  // state checkpoint (vLLM's mamba_cache_mode "align"); 0: only the prompt's end is assumed.
  uint32_t chunk_tokens = 0;

  friend bool operator==(const KvGroupConfig&, const KvGroupConfig&) = default;
};

struct WorkerConfig {
  common::HttpUrl url;
  std::vector<std::string> models;  // empty: learned from the worker's /v1/models
  WorkerRole role = WorkerRole::kMixed;
  uint32_t dp_size = 1;
  double weight = 1.0;
  uint64_t kv_capacity_tokens = 0;  // 0: from the worker's vllm:cache_config_info, else a default
  std::optional<KvEventsConfig> kv_events;  // set: precise mode for this worker
  // P/D (a prefill worker's rendezvous, reference/protocols.md §4): SGLang's
  // --disaggregation-bootstrap-port and vLLM MooncakeConnector's bootstrap port (both 8998 by
  // default), and the "ip:port" P2pNcclConnector peers reach it on (its kv_port).
  uint16_t bootstrap_port = 8998;
  std::string zmq_address;
  // vLLM NIXL (issue 27, router/pd/transfer_params.h): what a prefill worker's
  // kv_transfer_params may name. remote_host: one of kv_transfer_hosts (empty: the url's host;
  // VLLM_NIXL_SIDE_CHANNEL_HOST may differ, e.g. "localhost" or the pod IP behind a name);
  // remote_port: one of kv_transfer_ports (empty: 5600 + each DP rank, vLLM's default
  // VLLM_NIXL_SIDE_CHANNEL_PORT); remote_engine_id: kv_transfer_engine_id when set.
  std::vector<std::string> kv_transfer_hosts;
  std::vector<uint16_t> kv_transfer_ports;
  std::string kv_transfer_engine_id;
  // The shared KV pools (`stores`, by name) this worker can load from: their blocks count for it
  // in the store tier. Empty: every configured store (one pool the whole fleet reaches).
  std::vector<std::string> stores;
  // A hybrid model's groups beside full attention (sliding window, Mamba state): approximate
  // mode imitates each with its own LRU, so a prefix whose window or state blocks aged out is
  // not predicted as a hit. Empty: full attention only.
  std::vector<KvGroupConfig> kv_groups;

  // A reload keeps a live worker (its health, load and index) only when every field is equal.
  friend bool operator==(const WorkerConfig&, const WorkerConfig&) = default;
};

// A kvgate-store whose KV events kvgate follows (its `--kv-events`): the blocks any worker
// could pull from the store instead of recomputing, indexed in the store tier.
struct StoreConfig {
  std::string name;          // For admin and logs.
  std::string model;         // Namespace of its blocks (the model whose KV it holds).
  KvEventsConfig kv_events;  // endpoint, replay_endpoint, block_size of its objects.
  // The store's HTTP listener (kvgate-store --http-listen), health-checked at /health: while
  // it fails, routing counts nothing in the store tier. Unset: the store is assumed up.
  std::optional<common::HttpUrl> address;

  friend bool operator==(const StoreConfig&, const StoreConfig&) = default;
};

// Token buckets per API key (or per client address without keys): each holds a minute's
// worth and refills continuously. 0 = no limit.
struct RateLimitConfig {
  uint64_t requests_per_minute = 0;
  uint64_t prompt_tokens_per_minute = 0;  // estimated at admission as body bytes / 4

  friend bool operator==(const RateLimitConfig&, const RateLimitConfig&) = default;
};

struct LimitsConfig {
  uint32_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 32ull * 1024 * 1024;  // agentic prompts are large
  uint32_t idle_timeout_ms = 60'000;              // keep-alive connection with no request
  uint32_t read_timeout_ms = 30'000;              // whole request once its first byte arrived
  uint32_t write_timeout_ms = 60'000;             // a client that stops reading for this long
  // From accept to the end of a client's TLS handshake: a half-open handshake holds a place.
  uint32_t tls_handshake_timeout_ms = 10'000;
  uint32_t max_connections = 10'000;  // per gateway; see health_reserve
  // One client address may hold at most this many (0 = no limit), so that no one client can
  // take every connection.
  uint32_t max_connections_per_client = 1'000;
  // Connections accepted beyond max_connections that may ask only for /health, /ready and
  // /metrics (anything else gets a 503): probes still reach a full gateway.
  uint32_t health_reserve = 64;
  RateLimitConfig rate;                  // per API key (auth.api_keys[].rate overrides)
  uint32_t max_concurrent_requests = 0;  // inference requests running at once; 0 = no cap
  uint32_t queue_size = 100;             // waiting for a place beyond that; then 503
  uint32_t queue_timeout_ms = 30'000;    // longest wait in the queue; then 503
  // The most of the queue's places one client (API key, else address) may wait in, as a
  // fraction of queue_size (at least one place); beyond it a 429 while others still get in.
  // 1 = no share.
  double queue_share_per_client = 0.5;
};

// TLS to https:// workers.
struct UpstreamTlsConfig {
  std::string ca_file;    // PEM bundle the workers' certificates must chain to; "" = system's
  std::string cert_file;  // a client certificate for workers that ask for one (mutual TLS)
  std::string key_file;

  friend bool operator==(const UpstreamTlsConfig&, const UpstreamTlsConfig&) = default;
};

struct UpstreamConfig {
  uint32_t connect_timeout_ms = 2'000;
  uint32_t response_timeout_ms = 600'000;  // request sent -> response header (prefill can be long)
  uint32_t stream_idle_timeout_ms = 300'000;  // between two body chunks of a response
  uint32_t max_idle_per_worker = 64;  // idle keep-alive connections kept per thread and worker
  UpstreamTlsConfig tls;
  // The key kvgate sends workers ("Authorization: Bearer", e.g. vLLM's --api-key), read from
  // `api_key_file` or the environment variable `api_key_env` at load. Set, or with
  // auth.api_keys, a client's own Authorization / x-api-key never reaches a worker.
  std::string api_key_file;
  std::string api_key_env;
  std::string api_key;  // resolved (ResolveConfig); never logged
};

struct RetryConfig {
  uint32_t max_attempts = 3;  // total tries of one request, first included
  uint32_t backoff_base_ms = 10;
  uint32_t backoff_max_ms = 200;
  double jitter = 0.2;  // +-fraction applied to each backoff
};

struct HealthCheckConfig {
  bool enabled = true;
  std::string path = "/health";
  uint32_t interval_ms = 5'000;
  uint32_t timeout_ms = 2'000;
  uint32_t unhealthy_threshold = 3;  // consecutive failed checks before ejection
  uint32_t healthy_threshold = 2;    // consecutive good checks before readmission
};

struct CircuitBreakerConfig {
  uint32_t consecutive_failures = 5;  // passive connection errors before the breaker opens
  uint32_t open_ms = 10'000;          // how long an open breaker keeps the worker out
};

// Knobs of each routing policy; docs/routing.md explains them and where the defaults come from.
struct CacheAwarePolicyConfig {  // SGLang router CLI defaults
  double cache_threshold = 0.3;
  uint32_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
};

struct CostPolicyConfig {  // Dynamo KV router defaults
  double overlap_score_credit = 1.0;
  double prefill_load_scale = 1.0;
  double host_cache_hit_weight = 0.75;
  double store_cache_hit_weight = 0.25;
};

struct WeightedPolicyConfig {  // llm-d EPP default scorer weights
  double prefix_weight = 3;
  double queue_weight = 2;
  double kv_utilization_weight = 2;
  // llm-d's precise prefix scorer weighs a block by the medium that holds it.
  double host_tier_weight = 0.8;
  double store_tier_weight = 0.5;
};

struct ConsistentHashPolicyConfig {
  uint32_t virtual_nodes = 160;
  double bounded_load_factor = 1.25;  // 0 = plain consistent hashing
};

struct KvAwarePolicyConfig {
  uint32_t min_match_tokens = 256;            // shorter hits do not count as affinity
  double prefill_tokens_per_second = 10'000;  // until learned from observed TTFTs
  // A prompt token's extra prefill cost per token of context before it, as a fraction of a
  // context-free token's (attention against the context): 1.4e-5 for an 8B Llama on an H100
  // (docs/routing.md); 0 counts every token alike.
  double prefill_context_factor = 1.4e-5;
  double host_tokens_per_second = 200'000;     // loading host-tier KV instead of computing
  double store_tokens_per_second = 100'000;    // fetching store-tier KV
  double decode_interference_seconds = 0.002;  // added TTFT per running decode sequence
  uint32_t spill_bound = 2;                    // requests above the fair share a worker may take
  double affinity_margin_seconds = 0.1;        // predicted TTFT a session owner may lose by
  // Charged per request already in flight on a candidate, × that candidate's host/store load
  // time: a load holds the engine's step, so they wait for it too. 0 ignores it.
  double load_delay_weight = 1.0;
  double balance_weight = 0.1;  // weight of recent routed work (session spread)
  uint32_t balance_half_life_ms = 60'000;
  double kv_full_wait_seconds = 10.0;  // wait predicted when a prompt does not fit the free KV
  // Open lanes: in a burst, keep the open_lanes share of the fleet with the shortest queues
  // short. A request is charged lane_weight × the queue it adds below the first busier worker's,
  // on a worker among those; 0 turns it off. Off by default: 2 helps bursts of long first turns
  // (64 agentic conversations) and costs steady hot-prefix traffic (docs/benchmarks.md).
  double open_lanes = 0.5;
  double lane_weight = 0.0;
  // Answers carry x-kvgate-prediction: the predicted TTFT and its parts (calibration, replay).
  bool prediction_header = false;
};

// Precise mode: routing on the engines' own KV events (workers with `kv_events`).
struct PreciseConfig {
  std::string tokenizer = "bytes4";  // text -> token ids as the engines tokenise (see docs)
  std::vector<std::pair<std::string, std::string>> model_tokenizers;  // model -> tokenizer
  bool probe = true;                    // prove each worker in sync before trusting its events
  uint32_t probe_timeout_ms = 5'000;    // probe answered + its blocks published within this
  uint32_t speculative_ttl_ms = 2'000;  // route-time inserts not confirmed by an event expire
  // Serving but no events this long: a doubt, settled by probing again (with probe off: fall
  // back, warn). A cache-hit workload publishes nothing, so silence alone proves nothing.
  uint32_t silence_timeout_ms = 30'000;
  uint32_t reverify_interval_ms = 600'000;  // a verified worker is probed again this often; 0 off
  uint32_t replay_timeout_ms = 2'000;
  std::vector<std::pair<std::string, std::string>> media;  // extra medium name -> tier
};

// The body fields a session key may come from (routing.session_keys); any other name there is
// a request header.
inline constexpr std::string_view kSessionKeyBodyFields[] = {
    "metadata.user_id", "prompt_cache_key", "previous_response_id", "conversation", "user"};

// Stored OpenAI Responses: which worker holds which response id (docs/agent-apis.md).
struct ResponsesConfig {
  uint32_t max_pins = 262'144;  // about 150 bytes each: ~40 MB at most
  uint32_t pin_ttl_s = 86'400;  // a pin not used for this long is dropped
};

struct RoutingConfig {
  std::string policy = "kvaware";
  std::vector<std::pair<std::string, std::string>> model_policies;  // model -> policy override
  uint32_t block_tokens = 16;  // tokens per prefix block (text mode: 4 bytes a token)
  uint64_t index_memory_bytes = 1ull << 30;
  uint32_t engine_metrics_interval_ms = 1'000;  // scrape workers' /metrics; 0 = off
  CacheAwarePolicyConfig cache_aware;
  CostPolicyConfig cost;
  WeightedPolicyConfig weighted;
  ConsistentHashPolicyConfig consistent_hash;
  KvAwarePolicyConfig kvaware;
  PreciseConfig precise;
  // Where a request's session key comes from, the first present wins: request headers by name
  // (any case) and the body fields in kSessionKeyBodyFields. metadata.user_id gives Claude
  // Code's session_id when the value is a JSON object string.
  std::vector<std::string> session_keys = {"x-session-id",
                                           "x-claude-code-session-id",
                                           "metadata.user_id",
                                           "prompt_cache_key",
                                           "previous_response_id",
                                           "conversation",
                                           "user"};
  ResponsesConfig responses;
};

// Workers found by resolving a DNS name (a Kubernetes headless Service) at an interval, beside
// the static `workers` list (docs/configuration.md, "discovery").
struct DnsDiscoveryConfig {
  std::string name;      // fully qualified, e.g. vllm.default.svc.cluster.local
  bool srv = false;      // `name` has SRV records (_http._tcp.vllm...): hosts and ports from them
  uint16_t port = 8000;  // A/AAAA: every address's HTTP port
  std::string server;    // "IP[:PORT]" of the DNS server; "" = /etc/resolv.conf's first
  uint32_t interval_ms = 5'000;
  uint32_t timeout_ms = 1'000;
  WorkerConfig worker;  // the settings every worker found gets (its url is ignored)
  // What the answers may name (issue 27, router/discovery/address_policy.h): CIDRs (empty: any
  // address but unspecified, loopback, link-local and metadata ones, which need an entry of
  // their own) and ports (empty: any; A/AAAA answers always use `port`).
  std::vector<std::string> allowed_networks;
  std::vector<uint16_t> allowed_ports;

  friend bool operator==(const DnsDiscoveryConfig&, const DnsDiscoveryConfig&) = default;
};

// Workers found by watching a Service's EndpointSlices through the Kubernetes API (list, then
// watch from the list's resourceVersion; re-list on 410 Gone). Roles, DP size and KV-event
// ports come from the template, the slice's labels, or each pod's annotations/labels
// (docs/configuration.md, "discovery").
struct KubernetesDiscoveryConfig {
  std::string service;         // EndpointSlices labelled kubernetes.io/service-name=<service>
  std::string label_selector;  // or any label selector ("app=vllm,tier=gpu"); with service: both
  std::string namespace_;      // "" = the pod's own (the service account's namespace file)
  std::string port_name;       // the slice port to use; "" = the first port
  uint16_t port = 0;           // a fixed port instead of the slice's ports (0 = from the slice)
  // "" = in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. http:// URLs
  // (kubectl proxy) send no token.
  std::string api_server;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  bool pod_metadata = true;        // GET each endpoint's pod for kvgate.io/* annotations
  uint32_t timeout_ms = 5'000;     // connect + answer of a list or a pod read
  uint32_t watch_timeout_s = 300;  // the server ends each watch after this; kvgate resumes it
  uint32_t retry_max_ms = 30'000;  // backoff cap after failed list/watch calls
  uint16_t kv_events_port = 0;     // set: precise mode, tcp://<pod IP>:<port> on every worker
  uint16_t kv_events_replay_port = 0;
  std::string kv_events_topic;
  uint32_t kv_events_block_size = 16;
  WorkerConfig worker;  // the settings every worker found gets (its url is ignored)
  // What the slices may name, as for DnsDiscoveryConfig (issue 27).
  std::vector<std::string> allowed_networks;
  std::vector<uint16_t> allowed_ports;

  friend bool operator==(const KubernetesDiscoveryConfig&,
                         const KubernetesDiscoveryConfig&) = default;
};

struct DiscoveryConfig {
  std::vector<DnsDiscoveryConfig> dns;
  std::vector<KubernetesDiscoveryConfig> kubernetes;

  friend bool operator==(const DiscoveryConfig&, const DiscoveryConfig&) = default;
};

// Prefill/decode disaggregation (docs/pd.md): which engine protocol moves a request's KV from
// a prefill worker to a decode worker, per model.
struct PdConfig {
  std::string protocol;  // vllm-nixl, vllm-mooncake, vllm-p2p-nccl, sglang-bootstrap; "" = off
  std::vector<std::pair<std::string, std::string>> model_protocols;  // model -> protocol|none
  // The decode worker's cached prefix leaves fewer uncached prompt tokens than this: it
  // prefills them itself, no prefill stage (Dynamo's conditional-disaggregation bound; vLLM
  // Router's pd_uncached_token_threshold). Pulling a long prompt's whole KV costs more than
  // computing a turn's few new tokens (docs/benchmarks.md). 0 = always disaggregate. vLLM
  // protocols only: an SGLang decode server needs a prefill peer.
  uint32_t skip_prefill_below_tokens = 2048;
  bool fallback_to_mixed = true;         // a failed prefill is served by a mixed worker when any
  uint32_t release_timeout_ms = 60'000;  // the request that frees blocks of a failed decode
};

// A data-plane API key: clients send "Authorization: Bearer <key>"; only its SHA-256 is kept.
struct ApiKeyConfig {
  std::string name;                     // in logs, metrics and the access log
  std::string sha256;                   // lower-case hex SHA-256 of the key
  std::optional<RateLimitConfig> rate;  // this key's limits instead of limits.rate

  friend bool operator==(const ApiKeyConfig&, const ApiKeyConfig&) = default;
};

struct AuthConfig {
  // Inline, then api_keys_file's (added when resolved); none: an open data plane.
  std::vector<ApiKeyConfig> api_keys;
  // More keys from a file (a mounted Secret): a YAML list of api_keys entries. Read at load and
  // at each reload (SIGHUP).
  std::string api_keys_file;
  // kvgate_api_key_requests_total{key} names the key; off, every key's label is "redacted"
  // (/metrics is open to anyone who reaches it, and a key's name can say whose it is).
  bool key_names_in_metrics = false;
  // A client address with this many failed keys (missing or wrong) within failure_window_ms
  // of its first is answered 429 without a key check until that window ends. 0 = never.
  uint32_t max_failures_per_address = 20;
  uint32_t failure_window_ms = 60'000;
};

struct AdminConfig {
  std::string listen;  // "HOST:PORT" for a separate admin listener; empty = main listener
  // When set, admin endpoints need "Authorization: Bearer <token>". Inline, or resolved from
  // `token_file` (a mounted Secret) or the environment variable `token_env` at load and at
  // each reload; at most one of the three. Resolved (ResolveConfig) into `token`.
  std::string token;
  std::string token_file;
  std::string token_env;
};

// TLS on the client listener (cert_file empty: plain HTTP). SIGHUP reads the files again.
struct TlsConfig {
  std::string cert_file;       // PEM certificate chain, leaf first
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // set: clients must present a certificate it signed (mTLS)

  bool enabled() const { return !cert_file.empty(); }
  friend bool operator==(const TlsConfig&, const TlsConfig&) = default;
};

struct AccessLogConfig {
  bool enabled = false;
  std::string path = "-";  // "-" = stdout
};

// Replica sync (docs/scale-out.md): kvgate replicas that name the same Redis and the same
// cluster name share their in-flight load, approximate-mode learning, OpenAI Responses pins and
// admin drains. Nothing on the request path waits for Redis; without it (or with `redis`
// empty) each replica routes alone. Changes need a restart.
struct ClusterConfig {
  std::string redis;            // "redis://HOST:PORT"; empty = no sync
  std::string name = "kvgate";  // channel and key prefix: one per fleet of replicas
  std::string replica;          // this replica's name in /admin/cluster; empty = hostname:pid
  // Redis AUTH password: inline, from password_file (a mounted Secret) or from the environment
  // variable password_env; at most one. Resolved (ResolveConfig) into `password`.
  std::string password;
  std::string password_file;
  std::string password_env;
  uint32_t heartbeat_ms = 500;             // full load table and liveness, this often
  uint32_t peer_timeout_ms = 3'000;        // a replica silent this long: its load is forgotten
  uint32_t snapshot_interval_ms = 60'000;  // the state kept in Redis for joiners, rewritten
  uint32_t connect_timeout_ms = 1'000;
  uint64_t max_queue_bytes = 64ull << 20;  // updates waiting to be published (then dropped)
  uint32_t max_chain_blocks = 32'768;      // block hashes a learned prompt may carry

  bool enabled() const { return !redis.empty(); }
  friend bool operator==(const ClusterConfig&, const ClusterConfig&) = default;
};

// Browsers calling kvgate from another origin (vLLM's --allowed-origins): kvgate answers the
// preflight itself and names an allowed origin on every answer. Empty allowed_origins: no CORS
// headers, a preflight is a 405 as any OPTIONS.
struct CorsConfig {
  std::vector<std::string> allowed_origins;  // exact origins ("https://app.example"), or "*"
  std::vector<std::string> allowed_headers = {
      "authorization",  "content-type",        "x-api-key",      "anthropic-version",
      "anthropic-beta", "openai-organization", "openai-project", "x-session-id"};
  uint32_t max_age_s = 600;  // how long a browser may reuse a preflight's answer
  bool enabled() const { return !allowed_origins.empty(); }
  friend bool operator==(const CorsConfig&, const CorsConfig&) = default;
};

struct Config {
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 8000;
  TlsConfig tls;
  uint32_t threads = 0;  // 0 = one per CPU this process may use (affinity, cgroup quota)
  std::string log_level = "info";
  std::string log_format = "text";  // "json": one JSON object a line, for log pipelines
  uint32_t drain_timeout_ms = 30'000;
  // SIGTERM: /ready answers 503 this long, everything else still served, before the listeners
  // close (Kubernetes removes a pod from its Services asynchronously). 0 = drain at once.
  uint32_t drain_delay_ms = 0;
  uint32_t models_refresh_interval_ms = 10'000;
  LimitsConfig limits;
  UpstreamConfig upstream;
  RetryConfig retry;
  HealthCheckConfig health_check;
  CircuitBreakerConfig circuit_breaker;
  RoutingConfig routing;
  PdConfig pd;
  AuthConfig auth;
  AdminConfig admin;
  AccessLogConfig access_log;
  CorsConfig cors;
  // The engines' own routes at the root (vLLM, SGLang) passed to a worker of the request's model
  // as /v1/ routes are; POST unless GET is the engine's method. Changes need a restart.
  std::vector<std::string> engine_routes = {"/tokenize", "/detokenize", "/pooling",
                                            "/score",    "/classify",   "/rerank"};
  std::vector<WorkerConfig> workers;
  DiscoveryConfig discovery;
  std::vector<StoreConfig> stores;
  ClusterConfig cluster;
};

using ConfigConstSharedPtr = std::shared_ptr<const Config>;

}  // namespace kvgate::config
