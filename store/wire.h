// File: store/wire.h
// The kvgate-store wire protocol, version 1 (docs/store.md, "Wire protocol"): length-prefixed
// binary frames over TCP between clients, data nodes and the master, little-endian throughout.
// Every message is a plain struct with an Encode/Decode pair; decoders never read outside their
// input, bound every count by the bytes left, and reject trailing bytes. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/object_key.h"
#include "transfer/types.h"

namespace kvgate::store {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr uint16_t kFrameMagic = 0x534B;  // "KS" on the wire.
inline constexpr size_t kFrameHeaderSize = 16;
inline constexpr uint32_t kMaxFrameBody = 64u << 20;  // A 2,000-key put is ~1 MiB with tokens.
// A namespace is "model|lora|salt|group"; longer ones only make each object's metadata cost
// more than its bytes.
inline constexpr size_t kMaxNamespaceBytes = 512;
inline constexpr size_t kMaxSegmentJson = 64 << 10;  // A descriptor lists a few buffers.
// Segments published by names no registered node has (a node publishes before registering):
// at most this many, so that publishing cannot grow the master without bound.
inline constexpr size_t kMaxUnregisteredSegments = 256;

enum class Op : uint8_t {
  kHello = 1,
  kRegisterNode = 2,
  kHeartbeat = 3,
  kPublishSegment = 4,
  kLookupSegment = 5,
  kExists = 6,
  kPutStart = 7,
  kPutEnd = 8,
  kWaitKeys = 9,
  kGet = 10,
  kRemove = 11,
  kPin = 12,
};
std::string_view OpName(Op op);

/// [u32 body length][u16 magic][u8 version][u8 op][u64 request id], then the body. A response
/// carries the request's op and id; its body starts with a status (u8 absl code, string message).
struct FrameHeader {
  uint32_t body_length = 0;
  uint8_t version = kProtocolVersion;
  Op op = Op::kHello;
  uint64_t request_id = 0;
};
void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);
/// @return kInvalidArgument on a bad magic, an unknown op, a body over kMaxFrameBody;
/// kFailedPrecondition on another protocol version (named in the message).
absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t in[kFrameHeaderSize]);

/// Where one copy of an object lives: a data node's transfer segment and the address (in the
/// node's address space, as its segment descriptor publishes) of the object's first byte.
/// With authentication on, `capability` lets the requesting client (only) read, or for a put
/// write, the object's range there until it expires (transfer/capability.h).
struct Replica {
  std::string segment;
  uint64_t addr = 0;
  transfer::RangeCapability capability{};
  friend bool operator==(const Replica&, const Replica&) = default;
};

/// What a put announces about one key. `slices` are the object's parts in order (the KV first,
/// then extra slices such as speculative-decoding state); they are stored, leased, evicted and
/// read together. `parent` and `token_ids` are optional and only feed the store's KV events.
struct PutItem {
  ObjectKey key;
  std::vector<uint64_t> slices;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> token_ids;
};

/// An object as a data node re-registers it with a new master.
struct NodeObject {
  ObjectKey key;
  uint64_t offset = 0;  // From the node's segment base.
  std::vector<uint64_t> slices;
  uint64_t checksum = 0;
  bool pinned = false;
};

// --- requests ---------------------------------------------------------------------------------
struct HelloRequest {
  std::string client_name;
};
struct RegisterNodeRequest {
  std::string node;  // Unique name; also the data node's transfer segment name.
  std::string host_id;
  uint64_t base = 0;  // Address of the node's pool in its segment.
  uint64_t capacity = 0;
  std::vector<NodeObject> objects;  // Non-empty when re-registering after a master failover.
};
struct HeartbeatRequest {
  std::string node;
  uint64_t epoch = 0;  // From the RegisterNode reply.
};
struct PublishSegmentRequest {
  std::string name;
  std::string json;  // transfer::SegmentToJson().
};
struct LookupSegmentRequest {
  std::string name;
};
struct ExistsRequest {
  std::vector<ObjectKey> keys;
  bool stop_at_first_miss = false;
  uint32_t lease_ms = 0;  // 0: no lease.
};
struct PutStartRequest {
  std::vector<PutItem> items;
  std::string preferred_node;  // A node name or a host id (the client's own host); may be empty.
  uint32_t replicas = 1;
  // Whether the client reads or writes through a transport that checks capabilities (tcp):
  // signing costs the master ~0.5 us a replica, which shm-only clients need not pay.
  bool want_capabilities = true;
};
struct PutEndItem {
  ObjectKey key;
  uint64_t put_id = 0;
  bool ok = true;  // False revokes the allocation.
  uint64_t checksum = 0;
};
struct PutEndRequest {
  std::vector<PutEndItem> items;
};
struct WaitKeysRequest {
  std::vector<ObjectKey> keys;
  uint32_t timeout_ms = 0;
};
struct GetRequest {
  std::vector<ObjectKey> keys;
  uint32_t lease_ms = 0;
  std::string preferred_node;
  bool want_capabilities = true;  // As in PutStartRequest.
};
struct RemoveRequest {
  std::vector<ObjectKey> keys;
};
struct PinRequest {
  std::vector<ObjectKey> keys;
  bool pinned = true;
};

using Request =
    std::variant<HelloRequest, RegisterNodeRequest, HeartbeatRequest, PublishSegmentRequest,
                 LookupSegmentRequest, ExistsRequest, PutStartRequest, PutEndRequest,
                 WaitKeysRequest, GetRequest, RemoveRequest, PinRequest>;
Op RequestOp(const Request& r);
std::string EncodeRequest(const Request& r);
/// @return kInvalidArgument naming the field and offset on malformed, truncated or oversized
/// input, or trailing bytes.
absl::StatusOr<Request> DecodeRequest(Op op, std::string_view body);

// --- responses (the part after the status) ------------------------------------------------------
/// Per-key outcome codes shared by the batched replies.
enum class KeyCode : uint8_t {
  kOk = 0,        // Exists: present; put: allocated / committed; get: found; remove: removed.
  kNotFound = 1,  // Absent (or its data node is gone).
  kPresent = 2,   // PutStart: already stored, nothing to write.
  kInFlight = 3,  // PutStart: another client is writing it (WaitKeys for the outcome).
  kBusy = 4,      // Remove: leased or being written.
  kNoSpace = 5,   // PutStart: no data node could take it, even after eviction.
  kInvalid = 6,   // Bad slices, unknown put id, ...
};
std::string_view KeyCodeName(KeyCode c);

struct HelloResponse {
  uint8_t version = kProtocolVersion;
  std::string master;  // The master's instance name.
  bool leader = true;
};
struct RegisterNodeResponse {
  uint64_t epoch = 0;
  uint32_t heartbeat_ms = 0;
};
/// What changed on the node since its last heartbeat, so that it can re-register its objects
/// with a new master after a failover.
struct HeartbeatResponse {
  std::vector<NodeObject> added;
  std::vector<uint64_t> removed;  // Offsets of objects freed.
};
struct LookupSegmentResponse {
  std::string json;
};
struct ExistsResponse {
  std::vector<KeyCode> codes;  // Up to and including the first miss when stop_at_first_miss.
};
struct PutStartItemResult {
  KeyCode code = KeyCode::kOk;
  uint64_t put_id = 0;
  std::vector<Replica> replicas;
};
struct PutStartResponse {
  std::vector<PutStartItemResult> items;
};
struct KeyCodesResponse {  // PutEnd, WaitKeys, Remove, Pin.
  std::vector<KeyCode> codes;
};
struct GetItemResult {
  KeyCode code = KeyCode::kOk;
  std::vector<uint64_t> slices;
  uint64_t checksum = 0;
  std::vector<Replica> replicas;  // Preferred node first.
};
struct GetResponse {
  std::vector<GetItemResult> items;
};
struct EmptyResponse {};

/// Appends [status code u8][message] then `payload` (for OK replies).
std::string EncodeStatus(const absl::Status& status);
/// Splits a reply body into its status and the payload after it.
absl::StatusOr<std::string_view> DecodeStatus(std::string_view body);

std::string Encode(const HelloResponse& r);
std::string Encode(const RegisterNodeResponse& r);
std::string Encode(const HeartbeatResponse& r);
std::string Encode(const LookupSegmentResponse& r);
std::string Encode(const ExistsResponse& r);
std::string Encode(const PutStartResponse& r);
std::string Encode(const KeyCodesResponse& r);
std::string Encode(const GetResponse& r);
std::string Encode(const EmptyResponse& r);

absl::Status Decode(std::string_view in, HelloResponse* r);
absl::Status Decode(std::string_view in, RegisterNodeResponse* r);
absl::Status Decode(std::string_view in, HeartbeatResponse* r);
absl::Status Decode(std::string_view in, LookupSegmentResponse* r);
absl::Status Decode(std::string_view in, ExistsResponse* r);
absl::Status Decode(std::string_view in, PutStartResponse* r);
absl::Status Decode(std::string_view in, KeyCodesResponse* r);
absl::Status Decode(std::string_view in, GetResponse* r);
absl::Status Decode(std::string_view in, EmptyResponse* r);

}  // namespace kvgate::store
