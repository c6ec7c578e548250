#include "router/discovery/kubernetes_discovery.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/strings.h"
#include "router/discovery/endpoint_slices.h"
#include "router/discovery/kube_client.h"
#include "spdlog/spdlog.h"

namespace kvgate::router {
namespace {

using std::chrono::milliseconds;

// The pod's own namespace: the file beside the service account token.
std::string OwnNamespace(const std::string& token_file) {
  const auto path = std::filesystem::path(token_file).parent_path() / "namespace";
  std::ifstream in(path);
  std::string ns;
  if (in) std::getline(in, ns);
  while (!ns.empty() && (ns.back() == '\n' || ns.back() == ' ')) ns.pop_back();
  if (ns.empty()) {
    spdlog::warn("discovery: cannot read {}; watching namespace 'default'", path.string());
    return "default";
  }
  return ns;
}

}  // namespace

struct KubernetesDiscovery::Impl : std::enable_shared_from_this<Impl> {
  Impl(net::io_context& ioc, size_t index, config::KubernetesDiscoveryConfig source,
       OnChange on_change, OnRefused on_refused)
      : ioc(ioc),
        index(index),
        source(std::move(source)),
        on_change(std::move(on_change)),
        on_refused(std::move(on_refused)) {}

  std::string Selector() const {
    std::string sel;
    if (!source.service.empty()) sel = "kubernetes.io/service-name=" + source.service;
    if (!source.label_selector.empty()) {
      common::StrAppend(&sel, sel.empty() ? "" : ",", source.label_selector);
    }
    return sel;
  }
  std::string ListPath() const {
    return common::StrCat("/apis/discovery.k8s.io/v1/namespaces/", ns,
                          "/endpointslices?labelSelector=", QueryEscape(Selector()));
  }
  std::string WatchPath(const std::string& rv) const {
    return common::StrCat(ListPath(),
                          "&watch=1&allowWatchBookmarks=true&resourceVersion=", QueryEscape(rv),
                          "&timeoutSeconds=", source.watch_timeout_s);
  }
  std::string What() const {
    return common::StrCat("kubernetes ", ns, "/",
                          source.service.empty() ? Selector() : source.service);
  }

  // Waits `d` unless stopped meanwhile (the wait is short enough to notice Stop soon).
  net::awaitable<void> Sleep(milliseconds d) {
    net::steady_timer t(ioc);
    t.expires_after(d);
    co_await t.async_wait(kNoThrow);
  }
  milliseconds NextBackoff() {
    const milliseconds d = backoff;
    backoff = std::min(backoff * 2, milliseconds(source.retry_max_ms));
    return d;
  }

  // List + watch, forever.
  net::awaitable<void> Watch() {
    auto self = shared_from_this();
    std::string rv;
    while (!stopped) {
      if (rv.empty()) {
        auto list = co_await client->Get(ListPath());
        if (stopped) co_return;
        absl::StatusOr<k8s::SliceList> parsed =
            !list.ok() ? absl::StatusOr<k8s::SliceList>(list.status())
            : list->first != 200
                ? absl::UnavailableError(
                      common::StrCat("HTTP ", list->first, ": ", k8s::StatusMessage(list->second)))
                : k8s::ParseSliceList(list->second);
        if (!parsed.ok()) {
          spdlog::error("discovery: {}: listing EndpointSlices failed: {}", What(),
                        parsed.status().message());
          co_await Sleep(NextBackoff());
          continue;
        }
        slices.clear();
        for (auto& s : parsed->items) slices[s.name] = std::move(s);
        rv = parsed->resource_version;
        backoff = milliseconds(250);
        Changed();
      }
      auto watch = co_await client->Open(WatchPath(rv));
      if (stopped) co_return;
      if (!watch.ok()) {
        spdlog::warn("discovery: {}: watch failed: {}; resuming from {}", What(),
                     watch.status().message(), rv);
        co_await Sleep(NextBackoff());
        continue;
      }
      if ((*watch)->status() == 410) {
        spdlog::info("discovery: {}: resourceVersion {} expired (410); listing again", What(), rv);
        rv.clear();
        continue;
      }
      if ((*watch)->status() != 200) {
        auto body = co_await (*watch)->ReadAll(milliseconds(source.timeout_ms));
        spdlog::error("discovery: {}: watch answered HTTP {}: {}", What(), (*watch)->status(),
                      body.ok() ? k8s::StatusMessage(*body) : std::string(body.status().message()));
        co_await Sleep(NextBackoff());
        continue;
      }
      // The server ends the watch after timeoutSeconds; no byte for longer means it is gone.
      const milliseconds idle(uint64_t{source.watch_timeout_s} * 1000 + 30'000);
      bool pause = false;
      for (;;) {
        auto line = co_await (*watch)->NextLine(idle);
        if (stopped) co_return;
        if (!line.ok()) {
          spdlog::warn("discovery: {}: watch dropped ({}); resuming from {}", What(),
                       line.status().message(), rv);
          pause = true;
          break;
        }
        if (!line->has_value()) break;  // the server ended it: resume at once
        if ((*line)->empty()) continue;
        auto ev = k8s::ParseWatchEvent(**line);
        if (!ev.ok()) {
          spdlog::error("discovery: {}: bad watch event: {}", What(), ev.status().message());
          pause = true;
          break;
        }
        using Type = k8s::WatchEvent::Type;
        if (ev->type == Type::kError) {
          if (ev->error_code == 410) {
            spdlog::info("discovery: {}: {} (410); listing again", What(), ev->error_message);
            rv.clear();
          } else {
            spdlog::error("discovery: {}: watch error {}: {}", What(), ev->error_code,
                          ev->error_message);
            pause = true;
          }
          break;
        }
        if (!ev->resource_version.empty()) rv = ev->resource_version;
        if (ev->type == Type::kBookmark) continue;
        if (ev->type == Type::kDeleted) {
          slices.erase(ev->slice.name);
        } else {
          slices[ev->slice.name] = std::move(ev->slice);
        }
        backoff = milliseconds(250);
        Changed();
      }
      if (pause) co_await Sleep(NextBackoff());
    }
  }

  // The slices changed: the publisher recomputes the workers.
  void Changed() {
    dirty = true;
    if (wake != nullptr) wake->cancel();
  }

  // Turns the slices into workers whenever they change, reading new pods' metadata first; a
  // pod whose metadata could not be read is left out and read again a little later.
  net::awaitable<void> Publish() {
    auto self = shared_from_this();
    // The timer lives in this frame (destroyed with it when the io_context goes), Changed()
    // reaches it through `wake`.
    net::steady_timer timer(ioc);
    wake = &timer;
    struct Unhook {
      net::steady_timer*& w;
      ~Unhook() { w = nullptr; }
    } unhook{wake};
    while (!stopped) {
      if (!dirty) {
        timer.expires_after(retry_pods ? milliseconds(1'000) : std::chrono::hours(24));
        co_await timer.async_wait(kNoThrow);
        if (stopped) co_return;
        if (!dirty && !retry_pods) continue;
      }
      dirty = false;
      retry_pods = false;
      std::set<std::string> unknown;  // pod uids whose metadata could not be read
      if (source.pod_metadata && pods_allowed) {
        // The pods to read, copied first: the watch may change `slices` while a read waits.
        std::vector<std::pair<std::string, std::string>> wanted;  // uid, name
        for (const auto& [_, s] : slices) {
          for (const auto& e : s.endpoints) {
            if (!e.pod_uid.empty() && !pods.contains(e.pod_uid)) {
              wanted.emplace_back(e.pod_uid, e.pod_name);
            }
          }
        }
        for (const auto& [uid, name] : wanted) {
          if (pods.contains(uid)) continue;  // the same pod in two slices
          auto r = co_await client->Get(common::StrCat("/api/v1/namespaces/", ns, "/pods/", name));
          if (stopped) co_return;
          if (r.ok() && r->first == 200) {
            if (auto meta = k8s::ParsePodMetadata(r->second); meta.ok()) {
              pods[uid] = *std::move(meta);
              continue;
            }
          }
          if (r.ok() && r->first == 403) {
            spdlog::error(
                "discovery: {}: not allowed to read pods ({}); kvgate.io/* pod annotations are "
                "ignored (grant get on pods, or set pod_metadata: false)",
                What(), k8s::StatusMessage(r->second));
            pods_allowed = false;
            break;
          }
          if (r.ok() && r->first == 404) {  // gone already: its endpoint will follow
            pods[uid] = {};
            continue;
          }
          spdlog::warn("discovery: {}: reading pod {} failed: {}", What(), name,
                       r.ok() ? common::StrCat("HTTP ", r->first) : r.status().ToString());
          unknown.insert(uid);
        }
      }
      // The slices may have changed while pods were read: use what is there now.
      std::vector<const k8s::EndpointSlice*> current;
      std::set<std::string> live_pods;
      for (const auto& [_, s] : slices) {
        current.push_back(&s);
        for (const auto& e : s.endpoints) live_pods.insert(e.pod_uid);
      }
      std::erase_if(pods, [&](const auto& p) { return !live_pods.contains(p.first); });
      std::vector<std::string> problems;
      std::vector<RefusedAddress> refused;
      std::vector<DiscoveredWorker> workers =
          k8s::WorkersFromSlices(current, pods, source, &problems, &refused);
      for (const auto& r : refused_seen.Update(refused)) {
        spdlog::warn(
            "discovery: {}: endpoint {}:{} refused ({}): not a worker; allowed_networks / "
            "allowed_ports admit it (docs/configuration.md, discovery)",
            What(), r.address, r.port, AddressRefusalName(r.reason));
        if (on_refused) on_refused(What(), AddressRefusalName(r.reason));
      }
      if (source.pod_metadata && pods_allowed && !unknown.empty()) {
        std::set<std::string> skip_addresses;
        for (const auto& [_, s] : slices) {
          for (const auto& e : s.endpoints) {
            if (unknown.contains(e.pod_uid)) skip_addresses.insert(e.address);
          }
        }
        std::erase_if(workers, [&](const DiscoveredWorker& w) {
          return skip_addresses.contains(w.config.url.host);
        });
        retry_pods = true;
      }
      if (warned.size() > 1000) warned.clear();  // pods come and go: keep it bounded
      for (const auto& p : problems) {
        if (warned.insert(p).second) spdlog::warn("discovery: {}: {}", What(), p);
      }
      if (workers != last) {
        size_t ready = 0;
        for (const auto& w : workers) ready += w.state == EndpointState::kReady;
        spdlog::info("discovery: {}: {} worker(s), {} ready", What(), workers.size(), ready);
        last = workers;
        on_change(index, std::move(workers));
      }
    }
  }

  net::io_context& ioc;
  const size_t index;
  const config::KubernetesDiscoveryConfig source;
  const OnChange on_change;
  const OnRefused on_refused;
  std::unique_ptr<KubeClient> client;
  std::string ns;
  std::atomic<bool> stopped{false};
  // Control thread only:
  milliseconds backoff{250};
  std::map<std::string, k8s::EndpointSlice> slices;  // by name
  std::map<std::string, k8s::PodMetadata> pods;      // by uid
  bool pods_allowed = true;
  bool dirty = false;
  bool retry_pods = false;
  net::steady_timer* wake = nullptr;  // Publish()'s timer while it runs
  std::vector<DiscoveredWorker> last;
  std::set<std::string> warned;   // problems logged once
  RefusedAddresses refused_seen;  // refusals logged and counted once while they last
};

KubernetesDiscovery::KubernetesDiscovery(net::io_context& ioc, size_t index,
                                         config::KubernetesDiscoveryConfig source,
                                         OnChange on_change, OnRefused on_refused)
    : impl_(std::make_shared<Impl>(ioc, index, std::move(source), std::move(on_change),
                                   std::move(on_refused))) {}

KubernetesDiscovery::~KubernetesDiscovery() { Stop(); }

void KubernetesDiscovery::Start() {
  Impl& s = *impl_;
  s.ns = s.source.namespace_.empty() ? OwnNamespace(s.source.token_file) : s.source.namespace_;
  KubeClientOptions o;
  if (s.source.api_server.empty()) {
    auto in_cluster = InClusterApiServer();
    if (!in_cluster.ok()) {
      spdlog::error("discovery: {}: {}", s.What(), in_cluster.status().message());
      return;
    }
    o.server = *in_cluster;
  } else {
    o.server = *common::ParseHttpUrl(s.source.api_server, /*allow_https=*/true);  // validated
  }
  o.token_file = s.source.token_file;
  o.ca_file = s.source.ca_file;
  o.timeout = milliseconds(s.source.timeout_ms);
  auto client = KubeClient::Create(s.ioc, o);
  if (!client.ok()) {
    spdlog::error("discovery: {}: {}", s.What(), client.status().message());
    return;
  }
  s.client = *std::move(client);
  spdlog::info("discovery: watching EndpointSlices {} on {}", s.What(), o.server.ToString());
  net::co_spawn(s.ioc, s.Watch(), net::detached);
  net::co_spawn(s.ioc, s.Publish(), net::detached);
}

void KubernetesDiscovery::Stop() { impl_->stopped = true; }

}  // namespace kvgate::router
