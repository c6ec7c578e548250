// File: store/store_cli.cc
#include "store/store_cli.h"

#include <unistd.h>

#include <charconv>

#include "common/strings.h"
#include "common/url.h"
#include "kvevents/endpoints.h"
#include "store/rpc.h"

namespace kvgate::store {

const char kStoreUsage[] = R"(kvgate-store: the shared KV block store (master + data node)

  kvgate-store --listen HOST:PORT [--http-listen HOST:PORT] [--memory 8GiB]
  kvgate-store --role master --listen HOST:PORT [--etcd etcd://HOST:PORT]
  kvgate-store --role data --master HOST:PORT|etcd://... --memory 64GiB

  --version                   print the version and git commit
  --new-credentials           print a fresh credentials file (for a cluster's Secret)
  --role both|master|data     what this process runs (default both)
  --listen HOST:PORT          master wire protocol (default 127.0.0.1:7400)
  --advertise HOST:PORT       master address given to peers via etcd (default: --listen)
  --etcd etcd://H:P[,H:P][/prefix]  leader election among masters (HA)
  --master ADDR               data node: the master (HOST:PORT[,HOST:PORT] or etcd://...)
  --node-name NAME            data node name, unique in the store (default node-HOST-PORT)
  --memory SIZE               data node pool (default 256MiB)
  --transports LIST           data node transports, best first (default shm,rdma,tcp)
  --data-listen HOST          tcp transport listen address (default: --listen's host)
  --data-advertise HOST       tcp transport host peers connect to
  --http-listen HOST:PORT     /health, /metrics, /admin/store
  --credentials FILE          who may connect: `node|client NAME SECRET SCOPE` lines
                              (default $XDG_RUNTIME_DIR/kvgate-store/credentials, else
                              /tmp/kvgate-store-UID/credentials; made 0600 when missing)
  --node-credential NAME      the data node's credential (default: the file's first node)
  --auth key|none             keyed challenge on every connection (default key)
  --kv-events ENDPOINT        publish KV events (ZMQ PUB), e.g. tcp://127.0.0.1:5557
  --kv-events-remote          allow the event sockets beyond loopback (they carry token ids:
                              restrict who reaches them, e.g. a NetworkPolicy)
  --kv-events-replay ENDPOINT replay socket (ZMQ ROUTER), e.g. tcp://*:5558
  --high-watermark F          evict above this pool fraction (default 0.95)
  --low-watermark F           ... down to this one (default 0.85)
  --heartbeat-ms N            data node heartbeat period (default 200)
  --node-timeout-ms N         a node silent this long is dropped (default 2000)
  --etcd-ttl-s N              master lease TTL (default 3)
  --log-level LEVEL           trace|debug|info|warn|error (default info)
)";

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t n = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), n);
  if (r.ec != std::errc() || r.ptr == text.data())
    return absl::InvalidArgumentError(common::StrCat("bad size '", text, "'"));
  std::string_view unit(r.ptr, text.data() + text.size() - r.ptr);
  uint64_t mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KiB" || unit == "k") {
    mult = 1ull << 10;
  } else if (unit == "M" || unit == "MiB") {
    mult = 1ull << 20;
  } else if (unit == "G" || unit == "GiB") {
    mult = 1ull << 30;
  } else if (unit == "T" || unit == "TiB") {
    mult = 1ull << 40;
  } else {
    return absl::InvalidArgumentError(
        common::StrCat("bad size unit in '", text, "' (use K, M, G, T: powers of 1024)"));
  }
  if (n > UINT64_MAX / mult)
    return absl::InvalidArgumentError(common::StrCat("'", text, "' overflows"));
  return n * mult;
}

absl::StatusOr<StoreCli> ParseStoreCli(int argc, const char* const* argv) {
  StoreCli cli;
  std::string listen = "127.0.0.1:7400";
  std::string master_addr;
  std::string node_name;
  bool data_listen_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      cli.help = true;
      continue;
    }
    if (flag == "--kv-events-remote") {
      cli.kv_events_remote = true;
      continue;
    }
    if (i + 1 >= argc)
      return absl::InvalidArgumentError(common::StrCat(flag, ": missing value (see --help)"));
    std::string_view v = argv[++i];
    auto number = [&](auto* out) -> absl::Status {
      auto r = std::from_chars(v.data(), v.data() + v.size(), *out);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size())
        return absl::InvalidArgumentError(common::StrCat(flag, ": bad number '", v, "'"));
      return absl::OkStatus();
    };
    absl::Status s;
    if (flag == "--role") {
      if (v != "both" && v != "master" && v != "data")
        return absl::InvalidArgumentError(common::StrCat("--role: '", v, "' (both|master|data)"));
      cli.run_master = v != "data";
      cli.run_data = v != "master";
    } else if (flag == "--listen") {
      listen = std::string(v);
    } else if (flag == "--advertise") {
      cli.master.advertise = std::string(v);
    } else if (flag == "--etcd") {
      cli.master.etcd = std::string(v);
    } else if (flag == "--master") {
      master_addr = std::string(v);
    } else if (flag == "--node-name") {
      node_name = std::string(v);
    } else if (flag == "--memory") {
      auto n = ParseByteSize(v);
      if (!n.ok())
        return absl::InvalidArgumentError(common::StrCat("--memory: ", n.status().message()));
      cli.data.memory = *n;
    } else if (flag == "--transports") {
      cli.data.transports.clear();
      for (std::string_view rest = v; !rest.empty();) {
        size_t comma = rest.find(',');
        cli.data.transports.emplace_back(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (flag == "--data-listen") {
      cli.data.tcp.listen_address = std::string(v);
      data_listen_set = true;
    } else if (flag == "--data-advertise") {
      cli.data.tcp.advertise_host = std::string(v);
    } else if (flag == "--http-listen") {
      cli.http_listen = std::string(v);
    } else if (flag == "--kv-events") {
      cli.master.events_endpoint = std::string(v);
    } else if (flag == "--kv-events-replay") {
      cli.master.replay_endpoint = std::string(v);
    } else if (flag == "--high-watermark" || flag == "--low-watermark") {
      double d = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), d);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || d <= 0 || d > 1)
        return absl::InvalidArgumentError(common::StrCat(flag, ": expected a fraction in (0, 1]"));
      (flag == "--high-watermark" ? cli.master.master.high_watermark
                                  : cli.master.master.low_watermark) = d;
    } else if (flag == "--heartbeat-ms" || flag == "--node-timeout-ms") {
      uint32_t ms = 0;
      s = number(&ms);
      if (s.ok() && ms == 0) s = absl::InvalidArgumentError(common::StrCat(flag, ": must be > 0"));
      (flag == "--heartbeat-ms" ? cli.master.master.heartbeat_interval
                                : cli.master.master.node_timeout) = std::chrono::milliseconds(ms);
    } else if (flag == "--etcd-ttl-s") {
      s = number(&cli.master.etcd_ttl_s);
    } else if (flag == "--credentials") {
      if (cli.credentials_file != "none") cli.credentials_file = std::string(v);
    } else if (flag == "--node-credential") {
      cli.node_credential = std::string(v);
    } else if (flag == "--auth") {
      if (v != "key" && v != "none")
        return absl::InvalidArgumentError(common::StrCat("--auth: '", v, "' (key|none)"));
      if (v == "none") cli.credentials_file = "none";
    } else if (flag == "--log-level") {
      cli.log_level = std::string(v);
    } else {
      return absl::InvalidArgumentError(common::StrCat("unknown flag ", flag, " (see --help)"));
    }
    if (!s.ok()) return s;
  }
  if (cli.master.master.low_watermark > cli.master.master.high_watermark)
    return absl::InvalidArgumentError("--low-watermark is above --high-watermark");
  auto hp = common::ParseHostPort(listen);
  if (!hp.ok())
    return absl::InvalidArgumentError(common::StrCat("--listen: ", hp.status().message()));
  cli.master.listen_host = hp->first;
  cli.master.listen_port = hp->second;
  // The data port binds where the master does unless told otherwise: a store on loopback
  // must not open its pool to the network.
  if (!data_listen_set) cli.data.tcp.listen_address = hp->first;
  for (const std::string* e : {&cli.master.events_endpoint, &cli.master.replay_endpoint}) {
    if (!e->empty() && !cli.kv_events_remote && !kvevents::IsLoopbackEndpoint(*e))
      return absl::InvalidArgumentError(
          common::StrCat("--kv-events: ", *e,
                         " is beyond loopback; its events carry every tenant's token ids: "
                         "add --kv-events-remote and restrict who reaches it (docs/store.md)"));
  }
  if (cli.run_data) {
    if (master_addr.empty() && !cli.run_master)
      return absl::InvalidArgumentError("--role data needs --master");
    cli.data.master = master_addr;  // Filled with the local master's address at start if empty.
    if (node_name.empty()) {
      char host[64] = {};
      ::gethostname(host, sizeof(host) - 1);
      node_name = common::StrCat("node-", host, "-", ::getpid());
    }
    cli.data.name = node_name;
  }
  return cli;
}

}  // namespace kvgate::store
