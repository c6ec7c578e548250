// File: router/cluster/cluster_message.h
// The messages kvgate replicas publish to each other through Redis (docs/scale-out.md). One
// Redis PUBLISH carries one frame: the sender's id, its sequence number (one per frame, so a
// gap means frames were lost), the time it was sent and a list of records. A snapshot kept in
// a Redis key is a frame too. Little-endian, length-prefixed, every count and size checked
// against the bytes present and the limits: a frame from the channel is input from a peer and
// is never trusted to be well formed. Records of an unknown kind are skipped, so a newer
// replica can talk to an older one. Sizes stay bounded: prompts travel as block hashes only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvindex/types.h"
#include "router/policies/routing_policy.h"

namespace kvgate::router::cluster {

inline constexpr uint32_t kFrameMagic = 0x4347564b;  // "KVGC"
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 36;
inline constexpr size_t kMaxFrameBytes = size_t{256} << 20;  // a snapshot of a large fleet
inline constexpr size_t kMaxNameBytes = 512;  // worker URL, replica name, response id, key
inline constexpr int64_t kMaxLoadValue = int64_t{1} << 40;

enum class RecordKind : uint8_t {
  kHello = 1,             // text: the sender's replica name (every heartbeat)
  kLoads = 2,             // loads: the sender's reservations per worker; flag: the full table
  kLearn = 3,             // worker will hold blocks (a chain from the root), prompt_tokens long
  kForget = 4,            // worker no longer holds blocks
  kPin = 5,               // text: a stored Responses id, held by worker
  kUnpin = 6,             // text: a deleted Responses id
  kDrain = 7,             // worker's admin drain flag is `flag`
  kSnapshotReady = 8,     // text: the Redis key of the sender's snapshot; flag: merge it now
  kBye = 9,               // the sender stops: forget its load at once
  kSnapshotRequest = 10,  // text: the replica (id in hex) asked to publish a snapshot; "": all
};

struct WorkerLoad {
  std::string worker;  // the worker's canonical URL
  LoadSnapshot load;
  friend bool operator==(const WorkerLoad& a, const WorkerLoad& b) {
    return a.worker == b.worker && a.load.in_flight == b.load.in_flight &&
           a.load.pending_prefill_tokens == b.load.pending_prefill_tokens &&
           a.load.active_decode == b.load.active_decode &&
           a.load.active_kv_blocks == b.load.active_kv_blocks;
  }
};

struct Record {
  RecordKind kind = RecordKind::kHello;
  std::string worker;
  std::string text;
  uint32_t prompt_tokens = 0;
  bool flag = false;
  int64_t changed_unix_us = 0;  // kLoads: when the first change it reports was made
  std::vector<kvindex::BlockHash> blocks;
  std::vector<WorkerLoad> loads;
  friend bool operator==(const Record&, const Record&) = default;
};

struct Frame {
  uint64_t sender = 0;
  uint64_t seq = 0;
  int64_t sent_unix_us = 0;
  std::vector<Record> records;
};

struct DecodeLimits {
  size_t max_frame_bytes = kMaxFrameBytes;
  size_t max_blocks = size_t{1} << 22;  // per record
  size_t max_records = size_t{1} << 20;
};

/// Appends one record's bytes (its kind, length and body) to `out`.
void AppendRecord(std::string* out, const Record& record);
/// AppendRecord for kLearn and kForget without copying the chain into a Record first.
void AppendBlocksRecord(std::string* out, RecordKind kind, std::string_view worker,
                        uint32_t prompt_tokens, absl::Span<const kvindex::BlockHash> blocks);

/// A frame of `records` (bytes made by AppendRecord, `count` of them) with its header.
std::string EncodeFrame(uint64_t sender, uint64_t seq, int64_t sent_unix_us, uint32_t count,
                        std::string_view records);
std::string EncodeFrame(const Frame& frame);

/// Parses a frame. @return kInvalidArgument naming what is wrong (bad magic or version, a
/// length past the end, a count over `limits`, a string too long, a negative load).
absl::StatusOr<Frame> DecodeFrame(std::string_view bytes, const DecodeLimits& limits = {});

}  // namespace kvgate::router::cluster
