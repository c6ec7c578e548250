// File: tests/fakes/kube_api_double.h
// A Kubernetes API server for discovery tests, on 127.0.0.1 (port 0), over HTTPS (the test's
// own certificate) or plain HTTP. It speaks the real list/watch protocol for
// discovery.k8s.io/v1 EndpointSlices: a list answers an EndpointSliceList at the current
// resourceVersion; a watch (?watch=1&resourceVersion=N) streams, chunked, one JSON event a
// line — every change after N, then changes as the test makes them, BOOKMARKs when asked for,
// and ends after timeoutSeconds. History before Compact() is gone: a watch from an older
// version gets 410 Gone, as an HTTP answer or (like the real server) as an ERROR event. Label
// selectors with equality terms; Pods by name (GET /api/v1/namespaces/NS/pods/NAME); bearer
// token checked when set. The JSON has the shape of the Kubernetes API reference's objects.
// Thread-safe; one thread per connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvgate::testing {

struct FakeEndpoint {
  std::string address;
  // Absent conditions are left out of the JSON (the API's "unknown").
  std::optional<bool> ready = true;
  std::optional<bool> serving = true;
  std::optional<bool> terminating = false;
  std::string pod;  // targetRef name (uid "uid-<pod>"); empty: no targetRef
};

struct FakeSlice {
  std::string name;
  std::string service;                        // the kubernetes.io/service-name label
  std::map<std::string, std::string> labels;  // more labels (the Service's)
  std::string address_type = "IPv4";
  std::vector<FakeEndpoint> endpoints;
  std::vector<std::pair<std::string, uint16_t>> ports;  // name, port
};

class KubeApiDouble {
 public:
  struct Options {
    std::string cert_file;  // both set: HTTPS
    std::string key_file;
    std::string token;  // set: every request needs "Authorization: Bearer <token>"
    std::string namespace_ = "llm";
  };
  explicit KubeApiDouble(Options options);
  ~KubeApiDouble();

  uint16_t port() const { return port_; }
  /// "https://127.0.0.1:<port>" or "http://...".
  std::string url() const;

  /// Creates or replaces a slice (ADDED or MODIFIED to watchers).
  void Apply(const FakeSlice& slice);
  void Delete(const std::string& name);
  /// Sends a BOOKMARK at the current version to watches that asked for bookmarks.
  void Bookmark();
  /// Forgets history up to now, as etcd compaction does, after the cluster-wide version moved
  /// on (another object changed): a watch from any version seen so far gets 410 Gone.
  void Compact();
  /// 410 as an HTTP answer (true) or as an ERROR event in a 200 stream (false, the default,
  /// as kube-apiserver does for a watch).
  void set_gone_as_http(bool v) { gone_as_http_ = v; }
  /// Closes every open watch connection without ending its chunked body (a dropped connection).
  void DropWatches();
  /// A pod's annotations and labels (GET .../pods/NAME); unknown pods answer 404.
  void SetPod(const std::string& name, std::map<std::string, std::string> annotations,
              std::map<std::string, std::string> labels = {});
  /// Answer pod reads with this status (403: RBAC says no; 0: normal).
  void set_pod_status(int status) { pod_status_ = status; }

  uint64_t lists() const { return lists_.load(); }
  uint64_t watches() const { return watches_.load(); }  // watches answered 200
  uint64_t gone() const { return gone_.load(); }        // 410s sent
  uint64_t pod_reads() const { return pod_reads_.load(); }
  uint64_t unauthorized() const { return unauthorized_.load(); }
  uint64_t open_watches() const { return open_watches_.load(); }
  uint64_t handshake_failures() const { return handshake_failures_.load(); }
  /// The resourceVersion the last watch asked for.
  std::string last_watch_version() const;
  uint64_t version() const;

 private:
  struct Event {
    uint64_t rv;
    std::string type;
    std::string service;  // for selector matching
    std::map<std::string, std::string> labels;
    std::string object;  // JSON
  };
  class Conn;
  void AcceptLoop();
  void Serve(int fd);
  void HandleSlices(Conn& c, const std::map<std::string, std::string>& query);
  std::string SliceJson(const FakeSlice& s, uint64_t rv) const;
  static bool Matches(const std::string& selector,
                      const std::map<std::string, std::string>& labels);

  const Options options_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> gone_as_http_{false};
  std::atomic<int> pod_status_{0};
  std::atomic<uint64_t> lists_{0}, watches_{0}, gone_{0}, pod_reads_{0}, unauthorized_{0},
      open_watches_{0}, handshake_failures_{0};
  std::thread acceptor_;

  mutable common::Mutex mu_;
  common::CondVar cv_;  // signalled on every change a watch may stream
  uint64_t rv_ ABSL_GUARDED_BY(mu_) = 100;
  uint64_t compacted_ ABSL_GUARDED_BY(mu_) = 0;  // events at or below this are forgotten
  uint64_t drop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, FakeSlice> slices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> slice_rv_ ABSL_GUARDED_BY(mu_);  // each slice's version
  std::vector<Event> history_ ABSL_GUARDED_BY(mu_);
  std::map<std::string,
           std::pair<std::map<std::string, std::string>, std::map<std::string, std::string>>>
      pods_ ABSL_GUARDED_BY(mu_);
  std::string last_watch_version_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::testing
