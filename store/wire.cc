// File: store/wire.cc
#include "store/wire.h"

#include <bit>
#include <cstring>

#include "common/strings.h"

namespace kvgate::store {
namespace {

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Key(const ObjectKey& k) {
    Str(k.ns);
    U64(k.hash);
  }
  void Keys(const std::vector<ObjectKey>& keys) {
    U32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) Key(k);
  }
  void U64s(const std::vector<uint64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) U64(x);
  }
  void Codes(const std::vector<KeyCode>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (KeyCode c : v) U8(static_cast<uint8_t>(c));
  }
  void Replicas(const std::vector<Replica>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (const auto& r : v) {
      Str(r.segment);
      U64(r.addr);
      U8(r.capability.present ? transfer::kCapabilityBytes : 0);
      if (r.capability.present) Raw(r.capability.record.data(), r.capability.record.size());
    }
  }
  void Object(const NodeObject& o) {
    Key(o.key);
    U64(o.offset);
    U64s(o.slices);
    U64(o.checksum);
    Bool(o.pinned);
  }
  std::string Take() { return std::move(out_); }

 private:
  // Little-endian hosts only (x86_64, aarch64): the static_assert keeps that honest.
  void Raw(const void* p, size_t n) {
    static_assert(std::endian::native == std::endian::little);
    out_.append(static_cast<const char*>(p), n);
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  absl::Status status() const { return status_; }
  bool ok() const { return status_.ok(); }

  uint8_t U8(const char* field) {
    uint8_t v = 0;
    Raw(&v, 1, field);
    return v;
  }
  bool Bool(const char* field) {
    uint8_t v = U8(field);
    if (v > 1) Fail(field, "expected 0 or 1");
    return v == 1;
  }
  uint32_t U32(const char* field) {
    uint32_t v = 0;
    Raw(&v, 4, field);
    return v;
  }
  uint64_t U64(const char* field) {
    uint64_t v = 0;
    Raw(&v, 8, field);
    return v;
  }
  std::string Str(const char* field, size_t max = 1 << 20) {
    uint32_t n = U32(field);
    if (!ok()) return {};
    if (n > max) {
      Fail(field, common::StrCat("length ", n, " over ", max));
      return {};
    }
    if (n > in_.size() - pos_) {
      Fail(field, "truncated");
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  /// A count of elements each at least `min_bytes` long: bounded by what is left, so a hostile
  /// count cannot make the decoder allocate more than its input.
  uint32_t Count(const char* field, size_t min_bytes) {
    uint32_t n = U32(field);
    if (ok() && static_cast<uint64_t>(n) * min_bytes > in_.size() - pos_) {
      Fail(field, common::StrCat("count ", n, " exceeds the frame"));
      return 0;
    }
    return n;
  }
  ObjectKey Key(const char* field) {
    ObjectKey k;
    k.ns = Str(field, kMaxNamespaceBytes);
    k.hash = U64(field);
    return k;
  }
  std::vector<ObjectKey> Keys(const char* field) {
    std::vector<ObjectKey> keys(Count(field, 12));
    for (auto& k : keys) {
      if (!ok()) break;
      k = Key(field);
    }
    return keys;
  }
  std::vector<uint64_t> U64s(const char* field) {
    std::vector<uint64_t> v(Count(field, 8));
    for (auto& x : v) x = U64(field);
    return v;
  }
  std::vector<KeyCode> Codes(const char* field) {
    std::vector<KeyCode> v(Count(field, 1));
    for (auto& c : v) c = Code(field);
    return v;
  }
  std::vector<Replica> Replicas(const char* field) {
    std::vector<Replica> v(Count(field, 13));
    for (auto& r : v) {
      r.segment = Str(field, 1024);
      r.addr = U64(field);
      const uint8_t cap = U8(field);  // 0 (none) or a whole record.
      if (cap != 0 && cap != transfer::kCapabilityBytes) Fail(field, "bad capability length");
      r.capability.present = ok() && cap != 0;
      if (r.capability.present) Raw(r.capability.record.data(), cap, field);
    }
    return v;
  }
  NodeObject Object(const char* field) {
    NodeObject o;
    o.key = Key(field);
    o.offset = U64(field);
    o.slices = U64s(field);
    o.checksum = U64(field);
    o.pinned = Bool(field);
    return o;
  }
  std::vector<NodeObject> Objects(const char* field) {
    std::vector<NodeObject> v(Count(field, 33));
    for (auto& o : v) {
      if (!ok()) break;
      o = Object(field);
    }
    return v;
  }
  absl::Status Finish() {
    if (ok() && pos_ != in_.size())
      Fail("frame", common::StrCat(in_.size() - pos_, " trailing bytes"));
    return status_;
  }
  /// A per-key code, checked against the known ones.
  KeyCode Code(const char* field) {
    uint8_t x = U8(field);
    if (x > static_cast<uint8_t>(KeyCode::kInvalid)) Fail(field, "unknown key code");
    return static_cast<KeyCode>(x);
  }
  /// Records the first error (later ones are dropped: the first names the real fault).
  void Fail(const char* field, std::string_view why) {
    if (ok())
      status_ = absl::InvalidArgumentError(
          common::StrCat("store wire: ", field, " at byte ", pos_, ": ", why));
  }

 private:
  void Raw(void* p, size_t n, const char* field) {
    if (!ok()) return;
    if (n > in_.size() - pos_) {
      Fail(field, "truncated");
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }

  std::string_view in_;
  size_t pos_ = 0;
  absl::Status status_;
};

template <typename T>
absl::StatusOr<Request> Finish(Reader& r, T value) {
  if (auto s = r.Finish(); !s.ok()) return s;
  return Request(std::move(value));
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kRegisterNode:
      return "register_node";
    case Op::kHeartbeat:
      return "heartbeat";
    case Op::kPublishSegment:
      return "publish_segment";
    case Op::kLookupSegment:
      return "lookup_segment";
    case Op::kExists:
      return "exists";
    case Op::kPutStart:
      return "put_start";
    case Op::kPutEnd:
      return "put_end";
    case Op::kWaitKeys:
      return "wait_keys";
    case Op::kGet:
      return "get";
    case Op::kRemove:
      return "remove";
    case Op::kPin:
      return "pin";
  }
  return "unknown";
}

std::string_view KeyCodeName(KeyCode c) {
  switch (c) {
    case KeyCode::kOk:
      return "ok";
    case KeyCode::kNotFound:
      return "not_found";
    case KeyCode::kPresent:
      return "present";
    case KeyCode::kInFlight:
      return "in_flight";
    case KeyCode::kBusy:
      return "busy";
    case KeyCode::kNoSpace:
      return "no_space";
    case KeyCode::kInvalid:
      return "invalid";
  }
  return "unknown";
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  std::memcpy(out, &h.body_length, 4);
  std::memcpy(out + 4, &kFrameMagic, 2);
  out[6] = h.version;
  out[7] = static_cast<uint8_t>(h.op);
  std::memcpy(out + 8, &h.request_id, 8);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t in[kFrameHeaderSize]) {
  FrameHeader h;
  uint16_t magic = 0;
  std::memcpy(&h.body_length, in, 4);
  std::memcpy(&magic, in + 4, 2);
  h.version = in[6];
  uint8_t op = in[7];
  std::memcpy(&h.request_id, in + 8, 8);
  if (magic != kFrameMagic)
    return absl::InvalidArgumentError("store wire: bad frame magic (not a kvgate-store peer?)");
  if (h.version != kProtocolVersion)
    return absl::FailedPreconditionError(common::StrCat("store wire: protocol version ", h.version,
                                                        ", this build speaks ", kProtocolVersion));
  if (op < static_cast<uint8_t>(Op::kHello) || op > static_cast<uint8_t>(Op::kPin))
    return absl::InvalidArgumentError(common::StrCat("store wire: unknown op ", op));
  if (h.body_length > kMaxFrameBody)
    return absl::InvalidArgumentError(
        common::StrCat("store wire: frame body ", h.body_length, " over ", kMaxFrameBody));
  h.op = static_cast<Op>(op);
  return h;
}

Op RequestOp(const Request& r) {
  static constexpr Op kOps[] = {
      Op::kHello,         Op::kRegisterNode, Op::kHeartbeat, Op::kPublishSegment,
      Op::kLookupSegment, Op::kExists,       Op::kPutStart,  Op::kPutEnd,
      Op::kWaitKeys,      Op::kGet,          Op::kRemove,    Op::kPin};
  return kOps[r.index()];
}

std::string EncodeRequest(const Request& req) {
  Writer w;
  std::visit(
      [&w](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, HelloRequest>) {
          w.Str(r.client_name);
        } else if constexpr (std::is_same_v<T, RegisterNodeRequest>) {
          w.Str(r.node);
          w.Str(r.host_id);
          w.U64(r.base);
          w.U64(r.capacity);
          w.U32(static_cast<uint32_t>(r.objects.size()));
          for (const auto& o : r.objects) w.Object(o);
        } else if constexpr (std::is_same_v<T, HeartbeatRequest>) {
          w.Str(r.node);
          w.U64(r.epoch);
        } else if constexpr (std::is_same_v<T, PublishSegmentRequest>) {
          w.Str(r.name);
          w.Str(r.json);
        } else if constexpr (std::is_same_v<T, LookupSegmentRequest>) {
          w.Str(r.name);
        } else if constexpr (std::is_same_v<T, ExistsRequest>) {
          w.Keys(r.keys);
          w.Bool(r.stop_at_first_miss);
          w.U32(r.lease_ms);
        } else if constexpr (std::is_same_v<T, PutStartRequest>) {
          w.U32(static_cast<uint32_t>(r.items.size()));
          for (const auto& it : r.items) {
            w.Key(it.key);
            w.U64s(it.slices);
            w.Bool(it.parent.has_value());
            w.U64(it.parent.value_or(0));
            w.U32(static_cast<uint32_t>(it.token_ids.size()));
            for (uint32_t t : it.token_ids) w.U32(t);
          }
          w.Str(r.preferred_node);
          w.U32(r.replicas);
          w.Bool(r.want_capabilities);
        } else if constexpr (std::is_same_v<T, PutEndRequest>) {
          w.U32(static_cast<uint32_t>(r.items.size()));
          for (const auto& it : r.items) {
            w.Key(it.key);
            w.U64(it.put_id);
            w.Bool(it.ok);
            w.U64(it.checksum);
          }
        } else if constexpr (std::is_same_v<T, WaitKeysRequest>) {
          w.Keys(r.keys);
          w.U32(r.timeout_ms);
        } else if constexpr (std::is_same_v<T, GetRequest>) {
          w.Keys(r.keys);
          w.U32(r.lease_ms);
          w.Str(r.preferred_node);
          w.Bool(r.want_capabilities);
        } else if constexpr (std::is_same_v<T, RemoveRequest>) {
          w.Keys(r.keys);
        } else if constexpr (std::is_same_v<T, PinRequest>) {
          w.Keys(r.keys);
          w.Bool(r.pinned);
        }
      },
      req);
  return w.Take();
}

absl::StatusOr<Request> DecodeRequest(Op op, std::string_view body) {
  Reader r(body);
  switch (op) {
    case Op::kHello: {
      HelloRequest v;
      v.client_name = r.Str("client_name", 256);
      return Finish(r, std::move(v));
    }
    case Op::kRegisterNode: {
      RegisterNodeRequest v;
      v.node = r.Str("node", 256);
      v.host_id = r.Str("host_id", 1024);
      v.base = r.U64("base");
      v.capacity = r.U64("capacity");
      v.objects = r.Objects("objects");
      return Finish(r, std::move(v));
    }
    case Op::kHeartbeat: {
      HeartbeatRequest v;
      v.node = r.Str("node", 256);
      v.epoch = r.U64("epoch");
      return Finish(r, std::move(v));
    }
    case Op::kPublishSegment: {
      PublishSegmentRequest v;
      v.name = r.Str("name", 256);
      v.json = r.Str("json", kMaxSegmentJson);
      return Finish(r, std::move(v));
    }
    case Op::kLookupSegment: {
      LookupSegmentRequest v;
      v.name = r.Str("name", 256);
      return Finish(r, std::move(v));
    }
    case Op::kExists: {
      ExistsRequest v;
      v.keys = r.Keys("keys");
      v.stop_at_first_miss = r.Bool("stop_at_first_miss");
      v.lease_ms = r.U32("lease_ms");
      return Finish(r, std::move(v));
    }
    case Op::kPutStart: {
      PutStartRequest v;
      v.items.resize(r.Count("items", 25));
      for (auto& it : v.items) {
        if (!r.ok()) break;
        it.key = r.Key("items.key");
        it.slices = r.U64s("items.slices");
        bool has_parent = r.Bool("items.has_parent");
        uint64_t parent = r.U64("items.parent");
        if (has_parent) {
          it.parent = parent;
        } else if (parent != 0) {
          r.Fail("items.parent", "must be 0 without has_parent");  // One encoding per value.
        }
        it.token_ids.resize(r.Count("items.token_ids", 4));
        for (auto& t : it.token_ids) t = r.U32("items.token_ids");
      }
      v.preferred_node = r.Str("preferred_node", 256);
      v.replicas = r.U32("replicas");
      v.want_capabilities = r.Bool("want_capabilities");
      return Finish(r, std::move(v));
    }
    case Op::kPutEnd: {
      PutEndRequest v;
      v.items.resize(r.Count("items", 29));
      for (auto& it : v.items) {
        if (!r.ok()) break;
        it.key = r.Key("items.key");
        it.put_id = r.U64("items.put_id");
        it.ok = r.Bool("items.ok");
        it.checksum = r.U64("items.checksum");
      }
      return Finish(r, std::move(v));
    }
    case Op::kWaitKeys: {
      WaitKeysRequest v;
      v.keys = r.Keys("keys");
      v.timeout_ms = r.U32("timeout_ms");
      return Finish(r, std::move(v));
    }
    case Op::kGet: {
      GetRequest v;
      v.keys = r.Keys("keys");
      v.lease_ms = r.U32("lease_ms");
      v.preferred_node = r.Str("preferred_node", 256);
      v.want_capabilities = r.Bool("want_capabilities");
      return Finish(r, std::move(v));
    }
    case Op::kRemove: {
      RemoveRequest v;
      v.keys = r.Keys("keys");
      return Finish(r, std::move(v));
    }
    case Op::kPin: {
      PinRequest v;
      v.keys = r.Keys("keys");
      v.pinned = r.Bool("pinned");
      return Finish(r, std::move(v));
    }
  }
  return absl::InvalidArgumentError(
      common::StrCat("store wire: unknown op ", static_cast<int>(op)));
}

std::string EncodeStatus(const absl::Status& status) {
  Writer w;
  w.U8(static_cast<uint8_t>(status.code()));
  w.Str(std::string_view(status.message().data(), status.message().size()));
  return w.Take();
}

absl::StatusOr<std::string_view> DecodeStatus(std::string_view body) {
  Reader r(body);
  uint8_t code = r.U8("status");
  std::string message = r.Str("message", 1 << 16);
  if (!r.ok()) return r.status();
  if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated))
    return absl::InvalidArgumentError(common::StrCat("store wire: status code ", code));
  if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), message);
  return body.substr(1 + 4 + message.size());
}

std::string Encode(const HelloResponse& v) {
  Writer w;
  w.U8(v.version);
  w.Str(v.master);
  w.Bool(v.leader);
  return w.Take();
}
std::string Encode(const RegisterNodeResponse& v) {
  Writer w;
  w.U64(v.epoch);
  w.U32(v.heartbeat_ms);
  return w.Take();
}
std::string Encode(const HeartbeatResponse& v) {
  Writer w;
  w.U32(static_cast<uint32_t>(v.added.size()));
  for (const auto& o : v.added) w.Object(o);
  w.U64s(v.removed);
  return w.Take();
}
std::string Encode(const LookupSegmentResponse& v) {
  Writer w;
  w.Str(v.json);
  return w.Take();
}
std::string Encode(const ExistsResponse& v) {
  Writer w;
  w.Codes(v.codes);
  return w.Take();
}
std::string Encode(const PutStartResponse& v) {
  Writer w;
  w.U32(static_cast<uint32_t>(v.items.size()));
  for (const auto& it : v.items) {
    w.U8(static_cast<uint8_t>(it.code));
    w.U64(it.put_id);
    w.Replicas(it.replicas);
  }
  return w.Take();
}
std::string Encode(const KeyCodesResponse& v) {
  Writer w;
  w.Codes(v.codes);
  return w.Take();
}
std::string Encode(const GetResponse& v) {
  Writer w;
  w.U32(static_cast<uint32_t>(v.items.size()));
  for (const auto& it : v.items) {
    w.U8(static_cast<uint8_t>(it.code));
    w.U64s(it.slices);
    w.U64(it.checksum);
    w.Replicas(it.replicas);
  }
  return w.Take();
}
std::string Encode(const EmptyResponse&) { return {}; }

absl::Status Decode(std::string_view in, HelloResponse* v) {
  Reader r(in);
  v->version = r.U8("version");
  v->master = r.Str("master", 256);
  v->leader = r.Bool("leader");
  return r.Finish();
}
absl::Status Decode(std::string_view in, RegisterNodeResponse* v) {
  Reader r(in);
  v->epoch = r.U64("epoch");
  v->heartbeat_ms = r.U32("heartbeat_ms");
  return r.Finish();
}
absl::Status Decode(std::string_view in, HeartbeatResponse* v) {
  Reader r(in);
  v->added = r.Objects("added");
  v->removed = r.U64s("removed");
  return r.Finish();
}
absl::Status Decode(std::string_view in, LookupSegmentResponse* v) {
  Reader r(in);
  v->json = r.Str("json");
  return r.Finish();
}
absl::Status Decode(std::string_view in, ExistsResponse* v) {
  Reader r(in);
  v->codes = r.Codes("codes");
  return r.Finish();
}
absl::Status Decode(std::string_view in, PutStartResponse* v) {
  Reader r(in);
  v->items.resize(r.Count("items", 13));
  for (auto& it : v->items) {
    if (!r.ok()) break;
    it.code = r.Code("items.code");
    it.put_id = r.U64("items.put_id");
    it.replicas = r.Replicas("items.replicas");
  }
  return r.Finish();
}
absl::Status Decode(std::string_view in, KeyCodesResponse* v) {
  Reader r(in);
  v->codes = r.Codes("codes");
  return r.Finish();
}
absl::Status Decode(std::string_view in, GetResponse* v) {
  Reader r(in);
  v->items.resize(r.Count("items", 17));
  for (auto& it : v->items) {
    if (!r.ok()) break;
    it.code = r.Code("items.code");
    it.slices = r.U64s("items.slices");
    it.checksum = r.U64("items.checksum");
    it.replicas = r.Replicas("items.replicas");
  }
  return r.Finish();
}
absl::Status Decode(std::string_view in, EmptyResponse*) { return Reader(in).Finish(); }

}  // namespace kvgate::store
