// File: store/client.h
// The store client: the calls a vLLM KV connector makes (shared/reference/protocols.md §7) —
// register buffers, batched exists (stopping at the first miss), put from buffers writing only
// the keys the store lacks, get into buffers verifying each object's checksum — and their
// asynchronous forms. Metadata goes to the master; bytes move between the caller's registered
// buffers and the data nodes through transfer/ (shm on one host, RDMA or tcp across hosts).
//
//   auto client = *StoreClient::Create({.master = "10.0.0.5:7400"});
//   void* kv = *client->AllocateBuffer(64 << 20);     // or RegisterBuffer(gpu_ptr, n, "cuda:0")
//   auto present = *client->BatchExists(keys, /*stop_at_first_miss=*/true);
//   auto stored = client->BatchPutFrom(entries);      // one PutResult per key
//   auto got = client->BatchGetInto(gets);            // bytes read, or an error, per key
//
// Thread-safe: any method from any thread; the async forms run on the client's own threads and
// call back there. Buffers named in a call must stay registered until it returns (or calls
// back).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "store/master_client.h"
#include "store/object_key.h"
#include "transfer/transfer_engine.h"

namespace kvgate::store {

/// A piece of registered memory.
struct Slice {
  void* addr = nullptr;
  uint64_t length = 0;
};

struct PutEntry {
  ObjectKey key;
  std::vector<Slice> slices;        // The KV first, then extra slices (e.g. EAGLE hidden states).
  std::optional<uint64_t> parent;   // The block before it in the chain, for KV events.
  std::vector<uint32_t> token_ids;  // Its tokens, for KV events (kvgate indexes by tokens).
};

struct GetEntry {
  ObjectKey key;
  std::vector<Slice> slices;  // One per object slice, each at least as long.
};

enum class PutCode : uint8_t { kStored, kAlreadyPresent, kError };

struct PutResult {
  PutCode code = PutCode::kError;
  absl::Status error;  // For kError.
};

struct StoreClientOptions {
  std::string master;  // See MasterClient::Create().
  /// The credentials file (transfer/peer_auth.h): "" the user's default (the file a local
  /// kvgate-store made), "none" when the store runs with --auth none.
  std::string credentials_file;
  std::string credential;  // Which client credential; default the file's first.
  std::string name;        // Transfer segment name, unique; default "client-<host>-<pid>-<n>".
  std::vector<std::string> transports = {"shm", "rdma", "tcp"};
  uint32_t replicas = 1;
  uint32_t get_lease_ms = 5000;  // Protects an object from eviction while it is read.
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds in_flight_wait{5000};  // For a key another client is writing.
  size_t async_threads = 1;
  /// Copies of 256 KiB objects go to the copy threads (the engine's default runs copies up to
  /// 1 MiB inline), so that a put's checksums overlap its shm copies.
  transfer::CopyPoolParams copy = [] {
    transfer::CopyPoolParams p;
    p.inline_max_bytes = 64 << 10;
    return p;
  }();
  /// KV objects are large: 1 MiB tcp slices (the engine's default is 64 KiB) cut per-slice
  /// work (a back-to-back sweep on loopback: put 2.06 -> 2.79 GB/s; docs/benchmarks.md).
  transfer::TcpParams tcp = [] {
    transfer::TcpParams p;
    p.slice_bytes = 1 << 20;
    return p;
  }();
};

struct ClientStats {
  uint64_t keys_written = 0, bytes_written = 0;
  uint64_t keys_read = 0, bytes_read = 0;
  uint64_t checksum_failures = 0;
};

class StoreClient {
 public:
  /// @return kInvalidArgument / kUnavailable from the master address or the transfer engine.
  static absl::StatusOr<std::unique_ptr<StoreClient>> Create(StoreClientOptions options);
  ~StoreClient();

  absl::Status RegisterBuffer(void* addr, uint64_t length, std::string_view location = "cpu:0");
  /// Host memory the shm transport can use on both sides (freed by UnregisterBuffer).
  absl::StatusOr<void*> AllocateBuffer(uint64_t length);
  absl::Status UnregisterBuffer(void* addr);

  /// Whether each key is stored; with `stop_at_first_miss`, the answer ends at the first miss
  /// (included), as a prefix lookup wants. A positive answer leases the object for `lease_ms`.
  absl::StatusOr<std::vector<bool>> BatchExists(absl::Span<const ObjectKey> keys,
                                                bool stop_at_first_miss, uint32_t lease_ms = 0);
  /// Writes the keys the store lacks and commits them; keys already stored, or written by
  /// another client at the same time, are not written again (kAlreadyPresent).
  std::vector<PutResult> BatchPutFrom(absl::Span<const PutEntry> entries);
  /// Reads each object into its buffers: its size in bytes, kNotFound, kInvalidArgument
  /// (buffers too small), kDataLoss (checksum mismatch), or the transfer's error.
  std::vector<absl::StatusOr<uint64_t>> BatchGetInto(absl::Span<const GetEntry> entries);
  /// kOk per key removed; kNotFound / kFailedPrecondition (leased or being written) otherwise.
  std::vector<absl::Status> BatchRemove(absl::Span<const ObjectKey> keys);
  /// Soft pin: pinned objects are evicted only when nothing else can be.
  std::vector<absl::Status> BatchPin(absl::Span<const ObjectKey> keys, bool pinned);

  void BatchExistsAsync(std::vector<ObjectKey> keys, bool stop_at_first_miss,
                        std::function<void(absl::StatusOr<std::vector<bool>>)> done);
  void BatchPutFromAsync(std::vector<PutEntry> entries,
                         std::function<void(std::vector<PutResult>)> done);
  void BatchGetIntoAsync(std::vector<GetEntry> entries,
                         std::function<void(std::vector<absl::StatusOr<uint64_t>>)> done);

  ClientStats stats() const;
  transfer::TransferEngine& engine() { return *engine_; }

 private:
  struct Impl;
  StoreClient(StoreClientOptions options, std::shared_ptr<MasterClient> master,
              std::unique_ptr<transfer::TransferEngine> engine);
  absl::StatusOr<transfer::SegmentId> Segment(const std::string& name);
  /// Runs the transfers and reports, per group of requests, the first error (OK when all
  /// completed). CPU work overlaps the copies: `while_in_flight` runs after submission, and
  /// `on_group_done(i)` as soon as group i completed (in group order).
  std::vector<absl::Status> Transfer(
      const std::vector<std::vector<transfer::TransferRequest>>& groups,
      const std::function<void()>& while_in_flight = {},
      const std::function<void(size_t)>& on_group_done = {});
  void Post(std::function<void()> job);

  const StoreClientOptions options_;
  const std::string host_id_;
  // Whether this client has the one transport that checks capabilities (tcp); shm-only and
  // RDMA-only clients do not ask the master to sign.
  const bool want_capabilities_;
  std::shared_ptr<MasterClient> master_;
  std::unique_ptr<transfer::TransferEngine> engine_;
  std::unique_ptr<Impl> impl_;
};

/// XXH3-64 of the slices' bytes in order: the object checksum the store keeps and gets verify.
uint64_t ObjectChecksum(absl::Span<const Slice> slices, absl::Span<const uint64_t> lengths);

}  // namespace kvgate::store
