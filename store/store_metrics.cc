// File: store/store_metrics.cc
#include "store/store_metrics.h"

#include <map>
#include <vector>

#include "common/json_util.h"
#include "common/process_metrics.h"
#include "common/strings.h"

namespace kvgate::store {
namespace {

class Text {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    common::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(std::string_view name, std::string_view labels, uint64_t v) {
    common::StrAppend(&out_, name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}",
                      " ", v, "\n");
  }
  void One(std::string_view name, std::string_view type, std::string_view help, uint64_t v) {
    Family(name, type, help);
    Sample(name, "", v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Label values are node and op names; escape what the text format requires anyway.
std::string Label(std::string_view key, std::string_view value) {
  std::string out = common::StrCat(key, "=\"");
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

class TransferSink final : public transfer::MetricsSink {
 public:
  void Counter(std::string_view name, std::string_view help, std::string_view transport,
               std::string_view op, uint64_t value) override {
    Family& f = families_[std::string(name)];
    f.help = std::string(help);
    std::string labels = Label("transport", transport);
    if (!op.empty()) labels += "," + Label("op", op);
    f.samples.emplace_back(std::move(labels), value);
  }
  void Render(Text& t) {
    for (auto& [name, f] : families_) {
      t.Family(name, "counter", f.help);
      for (auto& [labels, v] : f.samples) t.Sample(name, labels, v);
    }
  }

 private:
  struct Family {
    std::string help;
    std::vector<std::pair<std::string, uint64_t>> samples;
  };
  std::map<std::string, Family> families_;
};

}  // namespace

std::string RenderMetrics(const MasterService* svc, DataNode* node) {
  Text t;
  if (svc != nullptr) {
    t.One("kvgate_store_master_leader", "gauge", "1 while this master is the leader.",
          svc->leader() ? 1 : 0);
    t.Family("kvgate_store_requests_total", "counter", "Master requests received, by op.");
    for (int op = static_cast<int>(Op::kHello); op <= static_cast<int>(Op::kPin); ++op)
      t.Sample("kvgate_store_requests_total", Label("op", OpName(static_cast<Op>(op))),
               svc->requests(static_cast<Op>(op)));
    t.One("kvgate_store_bad_requests_total", "counter",
          "Requests whose body did not decode (answered with an error).", svc->bad_requests());
    t.One("kvgate_store_protocol_errors_total", "counter",
          "Connections closed on a malformed frame.", svc->protocol_errors());
    t.One("kvgate_store_auth_failures_total", "counter",
          "Connections that did not prove a credential (docs/store.md, Authentication).",
          svc->auth_failures());
    t.One("kvgate_store_refused_connections_total", "counter",
          "Connections closed at once for being over a connection or handshake limit.",
          svc->refused_connections());
    t.One("kvgate_store_denied_requests_total", "counter",
          "Requests refused for the credential's role or scope.", svc->denied_requests());
    if (auto m = svc->master()) {
      const MasterStats s = m->Stats();
      t.One("kvgate_store_objects", "gauge", "Committed objects.", s.objects);
      t.One("kvgate_store_bytes", "gauge", "Bytes of committed objects, every replica counted.",
            s.bytes);
      t.One("kvgate_store_capacity_bytes", "gauge", "Pool bytes of all data nodes.", s.capacity);
      t.One("kvgate_store_in_flight_puts", "gauge", "Objects allocated and not yet committed.",
            s.in_flight_puts);
      t.One("kvgate_store_leased_objects", "gauge", "Objects under a read lease.", s.leased);
      t.One("kvgate_store_pinned_objects", "gauge", "Soft-pinned objects.", s.pinned);
      t.Family("kvgate_store_lookups_total", "counter", "Keys looked up, by call and result.");
      t.Sample("kvgate_store_lookups_total", "call=\"exists\",result=\"hit\"", s.exists_hits);
      t.Sample("kvgate_store_lookups_total", "call=\"exists\",result=\"miss\"", s.exists_misses);
      t.Sample("kvgate_store_lookups_total", "call=\"get\",result=\"hit\"", s.get_hits);
      t.Sample("kvgate_store_lookups_total", "call=\"get\",result=\"miss\"", s.get_misses);
      t.Family("kvgate_store_puts_total", "counter", "Puts ended, by outcome.");
      t.Sample("kvgate_store_puts_total", "result=\"committed\"", s.puts_committed);
      t.Sample("kvgate_store_puts_total", "result=\"revoked\"", s.puts_revoked);
      t.Sample("kvgate_store_puts_total", "result=\"expired\"", s.puts_expired);
      t.Sample("kvgate_store_puts_total", "result=\"no_space\"", s.put_no_space);
      t.Family("kvgate_store_put_dedups_total", "counter",
               "Keys of a put not written because they were stored or being written.");
      t.Sample("kvgate_store_put_dedups_total", "reason=\"present\"", s.put_dedups_present);
      t.Sample("kvgate_store_put_dedups_total", "reason=\"in_flight\"", s.put_dedups_in_flight);
      t.One("kvgate_store_evictions_total", "counter", "Objects evicted.", s.evictions);
      t.One("kvgate_store_evicted_bytes_total", "counter", "Bytes evicted.", s.evicted_bytes);
      t.One("kvgate_store_removes_total", "counter", "Objects removed by clients.", s.removes);
      t.One("kvgate_store_nodes_lost_total", "counter", "Data nodes dropped (missed heartbeats).",
            s.nodes_lost);
      t.One("kvgate_store_objects_lost_total", "counter", "Objects lost with their data nodes.",
            s.objects_lost);
      t.Family("kvgate_store_node_capacity_bytes", "gauge", "Pool size per data node.");
      for (const NodeUsage& n : s.nodes)
        t.Sample("kvgate_store_node_capacity_bytes", Label("node", n.name), n.capacity);
      t.Family("kvgate_store_node_used_bytes", "gauge", "Allocated bytes per data node.");
      for (const NodeUsage& n : s.nodes)
        t.Sample("kvgate_store_node_used_bytes", Label("node", n.name), n.used);
      t.Family("kvgate_store_node_objects", "gauge", "Objects (and in-flight puts) per node.");
      for (const NodeUsage& n : s.nodes)
        t.Sample("kvgate_store_node_objects", Label("node", n.name), n.objects);
    }
  }
  if (node != nullptr) {
    t.Family("kvgate_store_data_node_registered", "gauge",
             "1 while the data node is registered with the leader.");
    t.Sample("kvgate_store_data_node_registered", Label("node", node->name()),
             node->registered() ? 1 : 0);
    t.Family("kvgate_store_data_node_objects", "gauge",
             "Objects the data node knows it holds (as of its last heartbeat).");
    t.Sample("kvgate_store_data_node_objects", Label("node", node->name()), node->objects());
    TransferSink sink;
    node->engine().CollectMetrics(sink);
    sink.Render(t);
  }
  return t.Take() + common::ProcessMetricsText("kvgate-store");
}

std::string RenderAdminJson(const MasterService* svc, const DataNode* node) {
  std::string out = "{";
  if (svc != nullptr) {
    out += "\"master\":{\"address\":";
    common::AppendJsonString(out, svc->address());
    common::StrAppend(&out, ",\"leader\":", svc->leader());
    if (auto m = svc->master()) {
      const MasterStats s = m->Stats();
      common::StrAppend(&out, ",\"objects\":", s.objects, ",\"bytes\":", s.bytes,
                        ",\"capacity_bytes\":", s.capacity,
                        ",\"in_flight_puts\":", s.in_flight_puts, ",\"leased\":", s.leased,
                        ",\"pinned\":", s.pinned, ",\"evictions\":", s.evictions, ",\"nodes\":[");
      for (size_t i = 0; i < s.nodes.size(); ++i) {
        out += i ? ",{\"name\":" : "{\"name\":";
        common::AppendJsonString(out, s.nodes[i].name);
        common::StrAppend(&out, ",\"capacity_bytes\":", s.nodes[i].capacity,
                          ",\"used_bytes\":", s.nodes[i].used, ",\"objects\":", s.nodes[i].objects,
                          "}");
      }
      out += "]";
    }
    if (svc->events() != nullptr) {
      out += ",\"kv_events\":";
      common::AppendJsonString(out, svc->events()->endpoint());
      out += ",\"kv_events_replay\":";
      common::AppendJsonString(out, svc->events()->replay_endpoint());
    }
    out += "}";
  }
  if (node != nullptr) {
    if (svc != nullptr) out += ",";
    out += "\"data_node\":{\"name\":";
    common::AppendJsonString(out, node->name());
    common::StrAppend(&out, ",\"capacity_bytes\":", node->capacity(),
                      ",\"registered\":", node->registered(), ",\"objects\":", node->objects(),
                      "}");
  }
  out += "}";
  return out;
}

}  // namespace kvgate::store
