#include "transfer/segment.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/json_util.h"
#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::transfer {
namespace {

namespace od = simdjson::ondemand;

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(common::StrCat("segment descriptor: ", what));
}

void AppendField(std::string& out, std::string_view key, std::string_view value) {
  common::AppendJsonString(out, key);
  out.push_back(':');
  common::AppendJsonString(out, value);
}

void AppendField(std::string& out, std::string_view key, uint64_t value) {
  common::AppendJsonString(out, key);
  common::StrAppend(&out, ":", value);
}

// Each field is read whatever its position; unknown fields are skipped, so a newer owner can add
// fields without breaking older peers.
absl::Status ParseBuffer(od::object obj, BufferDesc* out) {
  bool have_addr = false, have_length = false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return Bad("bad buffer key");
    auto value = field.value();
    if (key == "addr") {
      if (value.get_uint64().get(out->addr)) return Bad("buffer addr is not a uint64");
      have_addr = true;
    } else if (key == "length") {
      if (value.get_uint64().get(out->length)) return Bad("buffer length is not a uint64");
      have_length = true;
    } else if (key == "location") {
      std::string_view s;
      if (value.get_string().get(s)) return Bad("buffer location is not a string");
      out->location = std::string(s);
    } else if (key == "id") {
      if (value.get_uint64().get(out->id)) return Bad("buffer id is not a uint64");
    } else if (key == "shm") {
      if (value.get_bool().get(out->shm)) return Bad("buffer shm is not a bool");
    } else if (key == "rkeys") {
      od::array keys;
      if (value.get_array().get(keys)) return Bad("buffer rkeys is not an array");
      for (auto k : keys) {
        uint64_t v = 0;
        if (k.get_uint64().get(v) || v > UINT32_MAX) return Bad("rkey is not a uint32");
        out->rkeys.push_back(static_cast<uint32_t>(v));
      }
    }
  }
  if (!have_addr || !have_length) return Bad("buffer without addr or length");
  if (out->length == 0) return Bad("buffer of length 0");
  if (out->addr + out->length < out->addr) return Bad("buffer wraps the address space");
  return absl::OkStatus();
}

absl::Status ParseDevice(od::object obj, RdmaDeviceDesc* out) {
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return Bad("bad device key");
    auto value = field.value();
    std::string_view s;
    if (key == "name") {
      if (value.get_string().get(s)) return Bad("device name is not a string");
      out->name = std::string(s);
    } else if (key == "gid") {
      if (value.get_string().get(s)) return Bad("device gid is not a string");
      out->gid = std::string(s);
    } else if (key == "lid") {
      uint64_t v = 0;
      if (value.get_uint64().get(v) || v > UINT16_MAX) return Bad("device lid is not a uint16");
      out->lid = static_cast<uint32_t>(v);
    }
  }
  if (out->name.empty()) return Bad("device without name");
  return absl::OkStatus();
}

}  // namespace

const BufferDesc* SegmentDescriptor::FindRange(uint64_t addr, uint64_t length) const {
  if (length == 0 || addr + length < addr) return nullptr;
  // First buffer starting after addr; the candidate is the one before it.
  auto it = std::upper_bound(buffers.begin(), buffers.end(), addr,
                             [](uint64_t a, const BufferDesc& b) { return a < b.addr; });
  if (it == buffers.begin()) return nullptr;
  --it;
  if (addr - it->addr > it->length || length > it->length - (addr - it->addr)) return nullptr;
  return &*it;
}

std::string SegmentToJson(const SegmentDescriptor& desc) {
  std::string out = "{";
  AppendField(out, "name", desc.name);
  out.push_back(',');
  AppendField(out, "instance", desc.instance);
  out.push_back(',');
  AppendField(out, "host_id", desc.host_id);
  out.push_back(',');
  AppendField(out, "version", desc.version);
  out.push_back(',');
  AppendField(out, "tcp_endpoint", desc.tcp_endpoint);
  out.push_back(',');
  AppendField(out, "shm_socket", desc.shm_socket);
  out.push_back(',');
  AppendField(out, "rdma_endpoint", desc.rdma_endpoint);
  out.append(",\"rdma_devices\":[");
  for (size_t i = 0; i < desc.rdma_devices.size(); ++i) {
    const auto& d = desc.rdma_devices[i];
    if (i) out.push_back(',');
    out.push_back('{');
    AppendField(out, "name", d.name);
    out.push_back(',');
    AppendField(out, "lid", d.lid);
    out.push_back(',');
    AppendField(out, "gid", d.gid);
    out.push_back('}');
  }
  out.append("],\"buffers\":[");
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const auto& b = desc.buffers[i];
    if (i) out.push_back(',');
    out.push_back('{');
    AppendField(out, "addr", b.addr);
    out.push_back(',');
    AppendField(out, "length", b.length);
    out.push_back(',');
    AppendField(out, "location", b.location);
    out.push_back(',');
    AppendField(out, "id", b.id);
    common::StrAppend(&out, ",\"shm\":", b.shm, ",\"rkeys\":[", common::StrJoin(b.rkeys, ","),
                      "]}");
  }
  out.append("]}");
  return out;
}

absl::StatusOr<SegmentDescriptor> ParseSegmentJson(std::string_view json) {
  simdjson::padded_string padded(json.data(), json.size());
  od::parser parser;
  od::document doc;
  if (parser.iterate(padded).get(doc)) return Bad("not JSON");
  od::object root;
  if (doc.get_object().get(root)) return Bad("not a JSON object");
  SegmentDescriptor desc;
  // simdjson reports malformed JSON lazily, as an error on the next access: every get is checked.
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return Bad("malformed JSON");
    auto value = field.value();
    std::string_view s;
    if (key == "name" || key == "instance" || key == "host_id" || key == "tcp_endpoint" ||
        key == "shm_socket" || key == "rdma_endpoint") {
      if (value.get_string().get(s)) return Bad(common::StrCat(key, " is not a string"));
      std::string* dst = key == "name"           ? &desc.name
                         : key == "instance"     ? &desc.instance
                         : key == "host_id"      ? &desc.host_id
                         : key == "tcp_endpoint" ? &desc.tcp_endpoint
                         : key == "shm_socket"   ? &desc.shm_socket
                                                 : &desc.rdma_endpoint;
      *dst = std::string(s);
    } else if (key == "version") {
      if (value.get_uint64().get(desc.version)) return Bad("version is not a uint64");
    } else if (key == "buffers" || key == "rdma_devices") {
      od::array arr;
      if (value.get_array().get(arr)) return Bad(common::StrCat(key, " is not an array"));
      for (auto elem : arr) {
        od::object obj;
        if (elem.get_object().get(obj)) return Bad(common::StrCat(key, " entry is not an object"));
        if (key == "buffers") {
          BufferDesc b;
          if (auto st = ParseBuffer(obj, &b); !st.ok()) return st;
          desc.buffers.push_back(std::move(b));
        } else {
          RdmaDeviceDesc d;
          if (auto st = ParseDevice(obj, &d); !st.ok()) return st;
          desc.rdma_devices.push_back(std::move(d));
        }
      }
    }  // Other fields are skipped by the iteration.
  }
  if (desc.name.empty()) return Bad("no name");
  if (desc.instance.empty()) return Bad(common::StrCat("'", desc.name, "' has no instance"));
  std::sort(desc.buffers.begin(), desc.buffers.end(),
            [](const BufferDesc& a, const BufferDesc& b) { return a.addr < b.addr; });
  for (size_t i = 0; i < desc.buffers.size(); ++i) {
    const auto& b = desc.buffers[i];
    if (i > 0 && desc.buffers[i - 1].addr + desc.buffers[i - 1].length > b.addr) {
      return Bad(common::StrCat("'", desc.name, "' has overlapping buffers"));
    }
    if (!b.rkeys.empty() && b.rkeys.size() != desc.rdma_devices.size()) {
      return Bad(common::StrCat("'", desc.name, "': a buffer has ", b.rkeys.size(), " rkeys for ",
                                desc.rdma_devices.size(), " RDMA devices"));
    }
  }
  return desc;
}

std::string LocalHostId() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return common::StrCat(boot_id, "/", host);
}

}  // namespace kvgate::transfer
