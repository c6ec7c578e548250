// EndpointSlice JSON as the Kubernetes API serves it (the shapes of the API reference's
// discovery.k8s.io/v1 EndpointSlice, EndpointSliceList, WatchEvent and Status), and the
// workers kvgate makes of it: ports by name, conditions and their defaults, terminating pods,
// kvgate.io/* settings from Service labels and pod annotations, and what is left out.
#include "router/discovery/endpoint_slices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router::k8s {
namespace {

using ::testing::HasSubstr;

// A list as `kubectl get --raw /apis/discovery.k8s.io/v1/namespaces/llm/endpointslices` prints
// it (trimmed of managedFields): a Service's slice with a ready pod, a terminating one that
// still serves, one with no conditions at all, and one whose readiness probe fails.
constexpr char kList[] = R"({
  "kind": "EndpointSliceList",
  "apiVersion": "discovery.k8s.io/v1",
  "metadata": {"resourceVersion": "48291"},
  "items": [{
    "metadata": {
      "name": "vllm-7xk2p", "generateName": "vllm-", "namespace": "llm",
      "uid": "9a7e0c5e-3c1b-4f7e-9d4c-2b1f1e0d7a11", "resourceVersion": "48277",
      "generation": 4, "creationTimestamp": "2026-11-30T08:12:01Z",
      "labels": {
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        "kubernetes.io/service-name": "vllm",
        "kvgate.io/role": "decode"
      },
      "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "vllm",
                           "uid": "4c0f...", "controller": true, "blockOwnerDeletion": true}]
    },
    "addressType": "IPv4",
    "endpoints": [
      {"addresses": ["10.4.0.17"], "conditions": {"ready": true, "serving": true, "terminating": false},
       "hostname": "vllm-0", "targetRef": {"kind": "Pod", "namespace": "llm", "name": "vllm-0",
       "uid": "pod-uid-0"}, "nodeName": "gpu-node-1", "zone": "us-east1-b"},
      {"addresses": ["10.4.1.9"], "conditions": {"ready": false, "serving": true, "terminating": true},
       "targetRef": {"kind": "Pod", "namespace": "llm", "name": "vllm-1", "uid": "pod-uid-1"}},
      {"addresses": ["10.4.2.3"], "conditions": {},
       "targetRef": {"kind": "Pod", "namespace": "llm", "name": "vllm-2", "uid": "pod-uid-2"}},
      {"addresses": ["10.4.3.5"], "conditions": {"ready": false, "serving": false, "terminating": false},
       "targetRef": {"kind": "Pod", "namespace": "llm", "name": "vllm-3", "uid": "pod-uid-3"}}
    ],
    "ports": [{"name": "metrics", "protocol": "TCP", "port": 9090},
              {"name": "http", "protocol": "TCP", "port": 8000, "appProtocol": "http"}]
  }]
})";

config::KubernetesDiscoveryConfig Source() {
  config::KubernetesDiscoveryConfig s;
  s.service = "vllm";
  s.port_name = "http";
  return s;
}

TEST(EndpointSlicesTest, ParsesAListWithConditionsAndTheirDefaults) {
  auto list = ParseSliceList(kList);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->resource_version, "48291");
  ASSERT_EQ(list->items.size(), 1u);
  const EndpointSlice& s = list->items[0];
  EXPECT_EQ(s.name, "vllm-7xk2p");
  EXPECT_EQ(s.resource_version, "48277");
  EXPECT_EQ(s.address_type, "IPv4");
  EXPECT_EQ(s.labels.at("kvgate.io/role"), "decode");
  ASSERT_EQ(s.endpoints.size(), 4u);
  EXPECT_EQ(s.endpoints[0].address, "10.4.0.17");
  EXPECT_EQ(s.endpoints[0].pod_name, "vllm-0");
  EXPECT_EQ(s.endpoints[0].pod_uid, "pod-uid-0");
  EXPECT_EQ(StateOf(s.endpoints[0]), EndpointState::kReady);
  EXPECT_TRUE(s.endpoints[1].serving);
  EXPECT_EQ(StateOf(s.endpoints[1]), EndpointState::kTerminating);
  // No conditions: the API says read unknown as ready and not terminating.
  EXPECT_EQ(StateOf(s.endpoints[2]), EndpointState::kReady);
  EXPECT_EQ(StateOf(s.endpoints[3]), EndpointState::kNotReady);
  ASSERT_EQ(s.ports.size(), 2u);
  EXPECT_EQ(s.ports[1].name, "http");
  EXPECT_EQ(s.ports[1].port, 8000);
}

TEST(EndpointSlicesTest, WorkersOnTheNamedPortWithStatesAndServiceLabels) {
  auto list = ParseSliceList(kList);
  ASSERT_TRUE(list.ok());
  std::vector<std::string> problems;
  const auto workers = WorkersFromSlices({&list->items[0]}, {}, Source(), &problems);
  ASSERT_EQ(workers.size(), 4u);
  EXPECT_EQ(workers[0].config.url.ToString(), "http://10.4.0.17:8000");
  EXPECT_EQ(workers[0].state, EndpointState::kReady);
  EXPECT_EQ(workers[1].config.url.ToString(), "http://10.4.1.9:8000");
  EXPECT_EQ(workers[1].state, EndpointState::kTerminating);
  EXPECT_EQ(workers[3].state, EndpointState::kNotReady);
  for (const auto& w : workers) EXPECT_EQ(w.config.role, config::WorkerRole::kDecode);
  EXPECT_TRUE(problems.empty());

  // No port name: the first port; a fixed port wins over the slice's.
  auto first = Source();
  first.port_name = "";
  EXPECT_EQ(WorkersFromSlices({&list->items[0]}, {}, first, &problems)[0].config.url.port, 9090);
  auto fixed = Source();
  fixed.port = 30000;
  EXPECT_EQ(WorkersFromSlices({&list->items[0]}, {}, fixed, &problems)[0].config.url.port, 30000);
  // A port name the slice lacks leaves its endpoints out, loudly.
  auto missing = Source();
  missing.port_name = "grpc";
  EXPECT_TRUE(WorkersFromSlices({&list->items[0]}, {}, missing, &problems).empty());
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems.back(), HasSubstr("no port named 'grpc'"));
}

TEST(EndpointSlicesTest, PodAnnotationsOverrideLabelsAndMakeKvEventEndpoints) {
  auto list = ParseSliceList(kList);
  ASSERT_TRUE(list.ok());
  std::map<std::string, PodMetadata> pods;
  pods["pod-uid-0"] = {{{"kvgate.io/role", "prefill"},
                        {"kvgate.io/dp-size", "4"},
                        {"kvgate.io/kv-events-port", "5557"},
                        {"kvgate.io/kv-events-replay-port", "5558"},
                        {"kvgate.io/block-size", "32"},
                        {"kvgate.io/bootstrap-port", "9000"}},
                       {{"kvgate.io/role", "mixed"}}};
  pods["pod-uid-2"] = {{{"kvgate.io/dp-size", "many"}}, {}};
  auto source = Source();
  source.kv_events_topic = "kv";
  std::vector<std::string> problems;
  const auto workers = WorkersFromSlices({&list->items[0]}, pods, source, &problems);
  const config::WorkerConfig& w = workers[0].config;
  EXPECT_EQ(w.role, config::WorkerRole::kPrefill);  // annotation over pod label over Service
  EXPECT_EQ(w.dp_size, 4u);
  EXPECT_EQ(w.bootstrap_port, 9000);
  ASSERT_TRUE(w.kv_events.has_value());
  EXPECT_EQ(w.kv_events->endpoint, "tcp://10.4.0.17:5557");
  EXPECT_EQ(w.kv_events->replay_endpoint, "tcp://10.4.0.17:5558");
  EXPECT_EQ(w.kv_events->block_size, 32u);
  EXPECT_EQ(w.kv_events->topic, "kv");
  EXPECT_FALSE(workers[1].config.kv_events.has_value());
  EXPECT_EQ(workers[2].config.dp_size, 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("vllm-2: kvgate.io/dp-size='many' ignored"));
}

TEST(EndpointSlicesTest, TemplateKvEventsPortGivesEveryWorkerItsOwnEndpoint) {
  auto list = ParseSliceList(kList);
  ASSERT_TRUE(list.ok());
  auto source = Source();
  source.kv_events_port = 5557;
  source.kv_events_block_size = 16;
  std::vector<std::string> problems;
  const auto workers = WorkersFromSlices({&list->items[0]}, {}, source, &problems);
  ASSERT_TRUE(workers[2].config.kv_events.has_value());
  EXPECT_EQ(workers[2].config.kv_events->endpoint, "tcp://10.4.2.3:5557");
  EXPECT_EQ(workers[2].config.kv_events->replay_endpoint, "");
}

TEST(EndpointSlicesTest, AnAddressInTwoSlicesKeepsItsReadiestStateAndFqdnSlicesAreLeftOut) {
  EndpointSlice a;
  a.name = "a";
  a.address_type = "IPv6";
  a.ports = {{"http", 8000}};
  SliceEndpoint e;
  e.address = "fd00::5";
  e.ready = false;
  a.endpoints = {e};
  EndpointSlice b = a;
  b.name = "b";
  b.endpoints[0].ready = true;
  EndpointSlice fqdn = a;
  fqdn.name = "c";
  fqdn.address_type = "FQDN";
  std::vector<std::string> problems;
  const auto workers = WorkersFromSlices({&a, &b, &fqdn}, {}, Source(), &problems);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].config.url.ToString(), "http://[fd00::5]:8000");
  EXPECT_EQ(workers[0].state, EndpointState::kReady);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("addressType 'FQDN'"));
}

// Issue 27: endpoints outside the source's bounds are not workers, and are reported.
TEST(EndpointSlicesTest, EndpointsOutsideTheSourcesBoundsAreRefused) {
  EndpointSlice s;
  s.name = "s";
  s.address_type = "IPv4";
  s.ports = {{"http", 8000}};
  for (const char* a : {"10.4.0.17", "127.0.0.1", "169.254.169.254", "192.168.1.4"}) {
    SliceEndpoint e;
    e.address = a;
    s.endpoints.push_back(e);
  }
  auto source = Source();
  source.allowed_networks = {"10.4.0.0/16", "192.168.0.0/16"};
  std::vector<std::string> problems;
  std::vector<RefusedAddress> refused;
  auto workers = WorkersFromSlices({&s}, {}, source, &problems, &refused);
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].config.url.ToString(), "http://10.4.0.17:8000");
  EXPECT_EQ(workers[1].config.url.ToString(), "http://192.168.1.4:8000");
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0].address, "127.0.0.1");
  EXPECT_EQ(refused[0].reason, AddressRefusal::kLoopback);
  EXPECT_EQ(refused[1].reason, AddressRefusal::kMetadata);
  // A port the source does not allow: nothing from this slice.
  source.allowed_ports = {9000};
  refused.clear();
  workers = WorkersFromSlices({&s}, {}, source, &problems, &refused);
  EXPECT_TRUE(workers.empty());
  EXPECT_EQ(refused.size(), 4u);
  EXPECT_EQ(refused[0].reason, AddressRefusal::kPort);
}

TEST(EndpointSlicesTest, WatchEvents) {
  auto added = ParseWatchEvent(
      R"({"type":"ADDED","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1",)"
      R"("metadata":{"name":"vllm-x","resourceVersion":"7"},"addressType":"IPv4","endpoints":null,)"
      R"("ports":null}})");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->type, WatchEvent::Type::kAdded);
  EXPECT_EQ(added->resource_version, "7");
  EXPECT_EQ(added->slice.name, "vllm-x");
  EXPECT_TRUE(added->slice.endpoints.empty());

  auto bookmark = ParseWatchEvent(
      R"({"type":"BOOKMARK","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1",)"
      R"("metadata":{"resourceVersion":"12746","annotations":{"k8s.io/initial-events-end":"true"}}}})");
  ASSERT_TRUE(bookmark.ok()) << bookmark.status();
  EXPECT_EQ(bookmark->type, WatchEvent::Type::kBookmark);
  EXPECT_EQ(bookmark->resource_version, "12746");

  auto gone = ParseWatchEvent(
      R"({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},)"
      R"j("status":"Failure","message":"too old resource version: 5 (48291)","reason":"Expired",)j"
      R"("code":410}})");
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->type, WatchEvent::Type::kError);
  EXPECT_EQ(gone->error_code, 410);
  EXPECT_THAT(gone->error_message, HasSubstr("too old resource version"));

  EXPECT_FALSE(ParseWatchEvent(R"({"type":"ADDED"})").ok());
  EXPECT_FALSE(ParseWatchEvent(R"({"type":"RENAMED","object":{}})").ok());
  EXPECT_FALSE(ParseWatchEvent(R"({"type":"ADDED","object":{"metadata":{}}})").ok());
  EXPECT_FALSE(ParseWatchEvent("not json").ok());
  EXPECT_FALSE(ParseSliceList(R"({"items":[]})").ok());  // no resourceVersion to watch from
}

TEST(EndpointSlicesTest, PodMetadataAndStatusMessages) {
  auto pod = ParsePodMetadata(
      R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"vllm-0","labels":{"app":"vllm"},)"
      R"("annotations":{"kvgate.io/role":"prefill"}},"spec":{},"status":{"phase":"Running"}})");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->labels.at("app"), "vllm");
  EXPECT_EQ(pod->annotations.at("kvgate.io/role"), "prefill");
  EXPECT_EQ(StatusMessage(R"({"kind":"Status","message":"forbidden: no"})"), "forbidden: no");
  EXPECT_EQ(StatusMessage("plain text"), "plain text");
}

}  // namespace
}  // namespace kvgate::router::k8s
