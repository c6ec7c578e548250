// File: store/main.cc
// kvgate-store: see store/store_cli.cc for the flags and docs/store.md for the design.
#include <signal.h>

#include <cstdio>
#include <string_view>

#include "common/build_info.h"
#include "common/logging.h"
#include "common/url.h"
#include "spdlog/spdlog.h"
#include "store/admin_http.h"
#include "store/store_cli.h"
#include "store/store_metrics.h"

int main(int argc, char** argv) {
  using namespace kvgate::store;
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-store")) return 0;
  if (argc == 2 && std::string_view(argv[1]) == "--new-credentials") {
    // A fresh credentials file on stdout, for a cluster's Secret (docs/store.md).
    std::fputs(kvgate::transfer::CredentialSet::Generate().c_str(), stdout);
    return 0;
  }
  auto cli = ParseStoreCli(argc, argv);
  if (!cli.ok()) {
    std::fprintf(stderr, "kvgate-store: %s\n", std::string(cli.status().message()).c_str());
    return 2;
  }
  if (cli->help) {
    std::fputs(kStoreUsage, stdout);
    return 0;
  }
  kvgate::common::InitLogging();
  if (auto s = kvgate::common::SetLogLevel(cli->log_level); !s.ok()) {
    std::fprintf(stderr, "kvgate-store: --log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // Wait for SIGINT/SIGTERM on this thread; every other thread inherits the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  // One credentials file for both roles: the master checks every peer against it; the data node
  // presents its node credential and checks whoever connects to its transfer port.
  kvgate::transfer::PeerAuthPtr auth;
  if (cli->credentials_file != "none") {
    auto loaded = kvgate::transfer::LoadPeerAuth(
        cli->credentials_file, kvgate::transfer::PeerRole::kNode,
        cli->run_data ? cli->node_credential : "", /*create=*/true);
    if (!loaded.ok() && !cli->run_data && absl::IsNotFound(loaded.status())) {
      // A master alone needs no node credential of its own: only the set.
      auto set = kvgate::transfer::CredentialSet::Load(
          cli->credentials_file.empty() ? kvgate::transfer::DefaultCredentialsPath()
                                        : cli->credentials_file);
      if (set.ok()) {
        auto a = std::make_shared<kvgate::transfer::PeerAuth>();
        a->verifier = std::make_shared<const kvgate::transfer::CredentialSet>(std::move(*set));
        loaded = kvgate::transfer::PeerAuthPtr(std::move(a));
      }
    }
    if (!loaded.ok()) {
      spdlog::error("kvgate-store: {}", loaded.status().message());
      return 1;
    }
    auth = std::move(*loaded);
    spdlog::info("kvgate-store: peers authenticate with {} ({} credentials)",
                 auth->verifier->source(), auth->verifier->size());
  } else {
    spdlog::warn("kvgate-store: --auth none: anyone who reaches the store can read, write and "
                 "remove every object");
  }
  cli->master.verifier = auth != nullptr ? auth->verifier : nullptr;
  cli->data.auth = auth;

  std::unique_ptr<MasterService> master;
  if (cli->run_master) {
    auto m = MasterService::Start(cli->master);
    if (!m.ok()) {
      spdlog::error("kvgate-store: master: {}", m.status().message());
      return 1;
    }
    master = std::move(*m);
    spdlog::info("kvgate-store: master listening on {}:{}{}", cli->master.listen_host,
                 master->port(), cli->master.etcd.empty() ? "" : " (HA through etcd)");
    if (master->events() != nullptr)
      spdlog::info("kvgate-store: KV events on {} (replay {})", master->events()->endpoint(),
                   master->events()->replay_endpoint());
  }
  std::unique_ptr<DataNode> node;
  if (cli->run_data) {
    DataNodeOptions d = cli->data;
    if (d.master.empty()) d.master = master->address();
    auto n = DataNode::Start(d);
    if (!n.ok()) {
      spdlog::error("kvgate-store: data node: {}", n.status().message());
      return 1;
    }
    node = std::move(*n);
    spdlog::info("kvgate-store: data node {} with {} bytes, master {}", node->name(),
                 node->capacity(), d.master);
  }
  std::unique_ptr<AdminHttpServer> http;
  if (!cli->http_listen.empty()) {
    auto hp = kvgate::common::ParseHostPort(cli->http_listen);
    if (!hp.ok()) {
      spdlog::error("kvgate-store: --http-listen: {}", hp.status().message());
      return 2;
    }
    AdminPages pages;
    MasterService* m = master.get();
    DataNode* dn = node.get();
    pages.health = [m, dn]() -> std::pair<int, std::string> {
      const bool data_ok = dn == nullptr || dn->registered();
      std::string role = m == nullptr ? "data" : m->leader() ? "leader" : "standby";
      return {data_ok ? 200 : 503, "{\"status\":\"" +
                                       std::string(data_ok ? "ok" : "data node not registered") +
                                       "\",\"role\":\"" + role + "\"}"};
    };
    pages.metrics = [m, dn] { return RenderMetrics(m, dn); };
    pages.admin = [m, dn] { return RenderAdminJson(m, dn); };
    auto h = AdminHttpServer::Start(hp->first, hp->second, std::move(pages));
    if (!h.ok()) {
      spdlog::error("kvgate-store: {}", h.status().message());
      return 1;
    }
    http = std::move(*h);
    spdlog::info("kvgate-store: http on {}:{}", hp->first, http->port());
  }
  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("kvgate-store: signal {}, stopping", sig);
  http.reset();
  node.reset();
  master.reset();
  return 0;
}
