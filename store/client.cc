// File: store/client.cc
#include "store/client.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"
#include "store/master_metadata.h"
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include "xxhash.h"

namespace kvgate::store {
namespace {

absl::Status KeyError(KeyCode code, const ObjectKey& key, std::string_view what) {
  const std::string msg =
      common::StrCat("store: ", what, " ", KeyName(key), ": ", KeyCodeName(code));
  switch (code) {
    case KeyCode::kNotFound:
      return absl::NotFoundError(msg);
    case KeyCode::kBusy:
      return absl::FailedPreconditionError(msg);
    case KeyCode::kNoSpace:
      return absl::ResourceExhaustedError(msg);
    case KeyCode::kInFlight:
      return absl::DeadlineExceededError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::string DefaultName() {
  static std::atomic<int> n{0};
  char host[64] = {};
  ::gethostname(host, sizeof(host) - 1);
  return common::StrCat("client-", host, "-", ::getpid(), "-", n++);
}

}  // namespace

uint64_t ObjectChecksum(absl::Span<const Slice> slices, absl::Span<const uint64_t> lengths) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (size_t i = 0; i < slices.size() && i < lengths.size(); ++i)
    XXH3_64bits_update(&state, slices[i].addr, lengths[i]);
  return XXH3_64bits_digest(&state);
}

struct StoreClient::Impl {
  common::Mutex segments_mu;
  absl::flat_hash_map<std::string, transfer::SegmentId> segments ABSL_GUARDED_BY(segments_mu);
  std::atomic<uint64_t> keys_written{0}, bytes_written{0}, keys_read{0}, bytes_read{0};
  std::atomic<uint64_t> checksum_failures{0};
  // The async pool.
  common::Mutex jobs_mu;
  common::CondVar jobs_cv;
  std::deque<std::function<void()>> jobs;
  bool stop = false;
  std::vector<std::thread> threads;
};

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Create(StoreClientOptions options) {
  if (options.name.empty()) options.name = DefaultName();
  auto auth = transfer::LoadPeerAuth(options.credentials_file, transfer::PeerRole::kClient,
                                     options.credential, /*create=*/false);
  if (!auth.ok()) return auth.status();
  auto master = MasterClient::Create(options.master, options.name, options.timeout,
                                     *auth != nullptr ? (*auth)->self : std::nullopt);
  if (!master.ok()) return master.status();
  std::shared_ptr<MasterClient> shared = std::move(*master);
  transfer::TransferEngineOptions eo;
  eo.segment_name = options.name;
  eo.metadata = std::make_unique<MasterMetadata>(shared, /*publish=*/false);
  eo.transports = options.transports;
  eo.tcp = options.tcp;
  eo.copy = options.copy;
  eo.default_timeout = options.timeout;
  eo.auth = *auth;
  auto engine = transfer::TransferEngine::Create(std::move(eo));
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<StoreClient>(
      new StoreClient(std::move(options), std::move(shared), std::move(*engine)));
}

StoreClient::StoreClient(StoreClientOptions options, std::shared_ptr<MasterClient> master,
                         std::unique_ptr<transfer::TransferEngine> engine)
    : options_(std::move(options)),
      host_id_(transfer::LocalHostId()),
      want_capabilities_(std::find(options_.transports.begin(), options_.transports.end(), "tcp") !=
                         options_.transports.end()),
      master_(std::move(master)),
      engine_(std::move(engine)),
      impl_(std::make_unique<Impl>()) {
  for (size_t i = 0; i < std::max<size_t>(1, options_.async_threads); ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] {
      for (;;) {
        std::function<void()> job;
        {
          common::MutexLock lock(&impl->jobs_mu);
          while (!impl->stop && impl->jobs.empty()) impl->jobs_cv.Wait(&impl->jobs_mu);
          if (impl->jobs.empty()) return;  // Stopping, and every queued job ran.
          job = std::move(impl->jobs.front());
          impl->jobs.pop_front();
        }
        job();
      }
    });
  }
}

StoreClient::~StoreClient() {
  {
    common::MutexLock lock(&impl_->jobs_mu);
    impl_->stop = true;
  }
  impl_->jobs_cv.SignalAll();
  for (auto& t : impl_->threads) t.join();
}

void StoreClient::Post(std::function<void()> job) {
  {
    common::MutexLock lock(&impl_->jobs_mu);
    impl_->jobs.push_back(std::move(job));
  }
  impl_->jobs_cv.Signal();
}

absl::Status StoreClient::RegisterBuffer(void* addr, uint64_t length, std::string_view location) {
  return engine_->RegisterMemory(addr, length, location);
}
absl::StatusOr<void*> StoreClient::AllocateBuffer(uint64_t length) {
  return engine_->AllocateManagedMemory(length);
}
absl::Status StoreClient::UnregisterBuffer(void* addr) { return engine_->UnregisterMemory(addr); }

ClientStats StoreClient::stats() const {
  return {impl_->keys_written.load(), impl_->bytes_written.load(), impl_->keys_read.load(),
          impl_->bytes_read.load(), impl_->checksum_failures.load()};
}

absl::StatusOr<transfer::SegmentId> StoreClient::Segment(const std::string& name) {
  {
    common::MutexLock lock(&impl_->segments_mu);
    auto it = impl_->segments.find(name);
    if (it != impl_->segments.end()) return it->second;
  }
  auto id = engine_->OpenSegment(name);
  if (!id.ok()) return id.status();
  common::MutexLock lock(&impl_->segments_mu);
  impl_->segments.emplace(name, *id);
  return *id;
}

std::vector<absl::Status> StoreClient::Transfer(
    const std::vector<std::vector<transfer::TransferRequest>>& groups,
    const std::function<void()>& while_in_flight,
    const std::function<void(size_t)>& on_group_done) {
  std::vector<absl::Status> out(groups.size());
  // One batch per group (key): a key's requests fail alone, and a finished key can be
  // processed (its checksum) while later keys are still being copied.
  std::vector<std::optional<transfer::BatchId>> batches(groups.size());
  // One flow for the call: a large batch of keys shares the connections with other calls round
  // robin, instead of queueing one flow per key ahead of them.
  static std::atomic<uint64_t> next_flow{1};
  const uint64_t flow = next_flow.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].empty()) continue;
    auto batch =
        engine_->AllocateBatch(static_cast<uint32_t>(groups[i].size()), options_.timeout, flow);
    if (!batch.ok()) {
      out[i] = batch.status();
      continue;
    }
    if (auto s = engine_->Submit(*batch, groups[i]); !s.ok()) {
      out[i] = s;
      (void)engine_->FreeBatch(*batch);
      continue;
    }
    batches[i] = *batch;
  }
  if (while_in_flight) while_in_flight();
  const auto deadline = transfer::Clock::now() + options_.timeout + std::chrono::seconds(1);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!batches[i]) continue;
    auto status = engine_->Wait(*batches[i], deadline);
    for (uint32_t t = 0; t < groups[i].size() && out[i].ok(); ++t) {
      auto ts = engine_->GetTaskStatus(*batches[i], t);
      if (!ts.ok()) {
        out[i] = ts.status();
      } else if (ts->state != transfer::TaskState::kCompleted) {
        out[i] =
            ts->error.ok() ? absl::DeadlineExceededError("store: transfer unfinished") : ts->error;
      }
    }
    // An unfinished batch cannot be freed (its buffers may still be written); past the
    // deadline the engine times its tasks out, and the batch is left to the engine.
    if (status.ok() && status->finished()) (void)engine_->FreeBatch(*batches[i]);
    if (out[i].ok() && on_group_done) on_group_done(i);
  }
  return out;
}

absl::StatusOr<std::vector<bool>> StoreClient::BatchExists(absl::Span<const ObjectKey> keys,
                                                           bool stop_at_first_miss,
                                                           uint32_t lease_ms) {
  ExistsRequest req{{keys.begin(), keys.end()}, stop_at_first_miss, lease_ms};
  auto r = master_->Call<ExistsResponse>(req);
  if (!r.ok()) return r.status();
  std::vector<bool> out;
  out.reserve(r->codes.size());
  for (KeyCode c : r->codes) out.push_back(c == KeyCode::kOk);
  return out;
}

std::vector<PutResult> StoreClient::BatchPutFrom(absl::Span<const PutEntry> entries) {
  std::vector<PutResult> results(entries.size());
  PutStartRequest start;
  start.preferred_node = host_id_;
  start.replicas = options_.replicas;
  start.want_capabilities = want_capabilities_;
  for (const PutEntry& e : entries) {
    PutItem& item = start.items.emplace_back();
    item.key = e.key;
    for (const Slice& s : e.slices) item.slices.push_back(s.length);
    item.parent = e.parent;
    item.token_ids = e.token_ids;
  }
  auto started = master_->Call<PutStartResponse>(start);
  if (!started.ok() || started->items.size() != entries.size()) {
    absl::Status err = started.ok() ? absl::InternalError("store: put_start reply size mismatch")
                                    : started.status();
    for (auto& r : results) r.error = err;
    return results;
  }
  // WRITE every allocated object to each of its replicas.
  std::vector<std::vector<transfer::TransferRequest>> groups(entries.size());
  std::vector<size_t> waiting;  // Keys another client is writing.
  for (size_t i = 0; i < entries.size(); ++i) {
    const PutStartItemResult& it = started->items[i];
    if (it.code == KeyCode::kPresent) {
      results[i].code = PutCode::kAlreadyPresent;
    } else if (it.code == KeyCode::kInFlight) {
      waiting.push_back(i);
    } else if (it.code != KeyCode::kOk) {
      results[i].error = KeyError(it.code, entries[i].key, "put");
    } else {
      for (const Replica& rep : it.replicas) {
        auto seg = Segment(rep.segment);
        if (!seg.ok()) {
          results[i].error = seg.status();
          groups[i].clear();
          break;
        }
        uint64_t offset = 0;
        for (const Slice& s : entries[i].slices) {
          groups[i].push_back({transfer::TransferOp::kWrite, s.addr, *seg, rep.addr + offset,
                               s.length, rep.capability});
          offset += s.length;
        }
      }
    }
  }
  // Checksums are computed from the caller's buffers while the WRITEs are in flight.
  std::vector<uint64_t> checksums(entries.size(), 0);
  std::vector<absl::Status> moved = Transfer(groups, [&] {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (groups[i].empty()) continue;
      std::vector<uint64_t> lengths;
      for (const Slice& s : entries[i].slices) lengths.push_back(s.length);
      checksums[i] = ObjectChecksum(entries[i].slices, lengths);
    }
  });
  PutEndRequest end;
  std::vector<size_t> ended;
  for (size_t i = 0; i < entries.size(); ++i) {
    const PutStartItemResult& it = started->items[i];
    if (it.code != KeyCode::kOk) continue;
    if (results[i].error.ok() && !moved[i].ok()) results[i].error = moved[i];
    const bool ok = results[i].error.ok();
    end.items.push_back({entries[i].key, it.put_id, ok, ok ? checksums[i] : 0});
    ended.push_back(i);
  }
  if (!end.items.empty()) {
    auto committed = master_->Call<KeyCodesResponse>(end);
    for (size_t j = 0; j < ended.size(); ++j) {
      PutResult& r = results[ended[j]];
      if (!r.error.ok()) continue;
      if (!committed.ok()) {
        r.error = committed.status();
      } else if (j >= committed->codes.size() || committed->codes[j] != KeyCode::kOk) {
        r.error = absl::AbortedError(common::StrCat(
            "store: put ", KeyName(entries[ended[j]].key),
            ": the master revoked it before the commit (put time-out or its node was lost)"));
      } else {
        r.code = PutCode::kStored;
        impl_->keys_written.fetch_add(1);
        for (const Slice& s : entries[ended[j]].slices) impl_->bytes_written.fetch_add(s.length);
      }
    }
  }
  if (waiting.empty()) return results;
  // Keys in flight elsewhere: wait for the other writer; write them ourselves if it failed.
  WaitKeysRequest wait;
  for (size_t i : waiting) wait.keys.push_back(entries[i].key);
  wait.timeout_ms = static_cast<uint32_t>(options_.in_flight_wait.count());
  auto settled = master_->Call<KeyCodesResponse>(wait);
  std::vector<PutEntry> retry;
  std::vector<size_t> retry_index;
  for (size_t j = 0; j < waiting.size(); ++j) {
    PutResult& r = results[waiting[j]];
    const KeyCode c =
        settled.ok() && j < settled->codes.size() ? settled->codes[j] : KeyCode::kInFlight;
    if (!settled.ok()) {
      r.error = settled.status();
    } else if (c == KeyCode::kOk) {
      r.code = PutCode::kAlreadyPresent;
    } else if (c == KeyCode::kNotFound) {
      retry.push_back(entries[waiting[j]]);
      retry_index.push_back(waiting[j]);
    } else {
      r.error = KeyError(c, entries[waiting[j]].key, "put (waiting for another writer)");
    }
  }
  if (!retry.empty()) {
    std::vector<PutResult> again = BatchPutFrom(retry);
    for (size_t j = 0; j < retry.size(); ++j) results[retry_index[j]] = std::move(again[j]);
  }
  return results;
}

std::vector<absl::StatusOr<uint64_t>> StoreClient::BatchGetInto(
    absl::Span<const GetEntry> entries) {
  std::vector<absl::StatusOr<uint64_t>> results(entries.size(), uint64_t{0});
  GetRequest req;
  req.lease_ms = options_.get_lease_ms;
  req.preferred_node = host_id_;
  req.want_capabilities = want_capabilities_;
  for (const GetEntry& e : entries) req.keys.push_back(e.key);
  auto got = master_->Call<GetResponse>(req);
  if (!got.ok() || got->items.size() != entries.size()) {
    absl::Status err =
        got.ok() ? absl::InternalError("store: get reply size mismatch") : got.status();
    for (auto& r : results) r = err;
    return results;
  }
  std::vector<bool> pending(entries.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const GetItemResult& it = got->items[i];
    if (it.code != KeyCode::kOk || it.replicas.empty()) {
      results[i] =
          KeyError(it.code == KeyCode::kOk ? KeyCode::kNotFound : it.code, entries[i].key, "get");
      continue;
    }
    bool fits = entries[i].slices.size() == it.slices.size();
    for (size_t s = 0; fits && s < it.slices.size(); ++s)
      fits = entries[i].slices[s].length >= it.slices[s];
    if (!fits) {
      results[i] = absl::InvalidArgumentError(
          common::StrCat("store: get ", KeyName(entries[i].key), ": the object has ",
                         it.slices.size(), " slices; the buffers given do not hold them"));
      continue;
    }
    pending[i] = true;
  }
  // Replica by replica: a key whose read failed is tried on its next copy.
  for (size_t replica = 0;; ++replica) {
    std::vector<std::vector<transfer::TransferRequest>> groups(entries.size());
    bool any = false;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (!pending[i]) continue;
      const GetItemResult& it = got->items[i];
      if (replica >= it.replicas.size()) {
        pending[i] = false;
        continue;
      }
      auto seg = Segment(it.replicas[replica].segment);
      if (!seg.ok()) {
        results[i] = seg.status();
        continue;
      }
      uint64_t offset = 0;
      for (size_t s = 0; s < it.slices.size(); ++s) {
        groups[i].push_back({transfer::TransferOp::kRead, entries[i].slices[s].addr, *seg,
                             it.replicas[replica].addr + offset, it.slices[s],
                             it.replicas[replica].capability});
        offset += it.slices[s];
      }
      any = true;
    }
    if (!any) break;
    // Each object's checksum is verified as soon as its copy is done, while later ones copy.
    std::vector<uint64_t> sums(entries.size(), 0);
    std::vector<absl::Status> moved = Transfer(groups, {}, [&](size_t i) {
      sums[i] = ObjectChecksum(entries[i].slices, got->items[i].slices);
    });
    for (size_t i = 0; i < entries.size(); ++i) {
      if (groups[i].empty()) continue;
      const GetItemResult& it = got->items[i];
      if (!moved[i].ok()) {
        results[i] = moved[i];
        continue;
      }
      pending[i] = false;
      if (sums[i] != it.checksum) {
        impl_->checksum_failures.fetch_add(1);
        spdlog::error("store: get {}: checksum mismatch on {}", KeyName(entries[i].key),
                      it.replicas[replica].segment);
        results[i] = absl::DataLossError(common::StrCat("store: get ", KeyName(entries[i].key),
                                                        ": checksum mismatch (corrupted copy on ",
                                                        it.replicas[replica].segment, ")"));
        continue;
      }
      uint64_t bytes = 0;
      for (uint64_t s : it.slices) bytes += s;
      results[i] = bytes;
      impl_->keys_read.fetch_add(1);
      impl_->bytes_read.fetch_add(bytes);
    }
  }
  return results;
}

std::vector<absl::Status> StoreClient::BatchRemove(absl::Span<const ObjectKey> keys) {
  std::vector<absl::Status> out(keys.size());
  auto r = master_->Call<KeyCodesResponse>(RemoveRequest{{keys.begin(), keys.end()}});
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r.ok()) {
      out[i] = r.status();
    } else if (i >= r->codes.size() || r->codes[i] != KeyCode::kOk) {
      out[i] = KeyError(i < r->codes.size() ? r->codes[i] : KeyCode::kInvalid, keys[i], "remove");
    }
  }
  return out;
}

std::vector<absl::Status> StoreClient::BatchPin(absl::Span<const ObjectKey> keys, bool pinned) {
  std::vector<absl::Status> out(keys.size());
  auto r = master_->Call<KeyCodesResponse>(PinRequest{{keys.begin(), keys.end()}, pinned});
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r.ok()) {
      out[i] = r.status();
    } else if (i >= r->codes.size() || r->codes[i] != KeyCode::kOk) {
      out[i] = KeyError(i < r->codes.size() ? r->codes[i] : KeyCode::kInvalid, keys[i], "pin");
    }
  }
  return out;
}

void StoreClient::BatchExistsAsync(std::vector<ObjectKey> keys, bool stop_at_first_miss,
                                   std::function<void(absl::StatusOr<std::vector<bool>>)> done) {
  Post([this, keys = std::move(keys), stop_at_first_miss, done = std::move(done)] {
    done(BatchExists(keys, stop_at_first_miss));
  });
}

void StoreClient::BatchPutFromAsync(std::vector<PutEntry> entries,
                                    std::function<void(std::vector<PutResult>)> done) {
  Post([this, entries = std::move(entries), done = std::move(done)] {
    done(BatchPutFrom(entries));
  });
}

void StoreClient::BatchGetIntoAsync(
    std::vector<GetEntry> entries,
    std::function<void(std::vector<absl::StatusOr<uint64_t>>)> done) {
  Post([this, entries = std::move(entries), done = std::move(done)] {
    done(BatchGetInto(entries));
  });
}

}  // namespace kvgate::store
