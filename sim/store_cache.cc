// File: sim/store_cache.cc
#include "sim/store_cache.h"

#include <cstring>

#include "common/mutex.h"
#include "spdlog/spdlog.h"

namespace kvgate::sim {

void FillBlockBytes(uint64_t hash, uint8_t* out, uint64_t n) {
  uint64_t x = hash | 1;
  for (uint64_t i = 0; i < n; i += 8) {
    x ^= x << 13;  // xorshift: cheap, and distinct per block
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<uint64_t>(8, n - i));
  }
}

absl::StatusOr<std::unique_ptr<StoreKvCache>> StoreKvCache::Create(
    std::shared_ptr<store::StoreClient> client, StoreCacheOptions options) {
  const uint64_t bytes =
      uint64_t{options.max_blocks} * options.block_size * options.bytes_per_token;
  auto load = client->AllocateBuffer(bytes);
  if (!load.ok()) return load.status();
  auto save = client->AllocateBuffer(bytes);
  if (!save.ok()) return save.status();
  return std::unique_ptr<StoreKvCache>(new StoreKvCache(std::move(client), std::move(options),
                                                        static_cast<uint8_t*>(*load),
                                                        static_cast<uint8_t*>(*save)));
}

StoreKvCache::StoreKvCache(std::shared_ptr<store::StoreClient> client, StoreCacheOptions options,
                           uint8_t* load_buf, uint8_t* save_buf)
    : options_(std::move(options)),
      ns_(store::MakeNamespace(options_.model, "", "", 0)),
      client_(std::move(client)),
      load_buf_(load_buf),
      save_buf_(save_buf) {
  saver_ = std::thread([this] { SaveLoop(); });
}

StoreKvCache::~StoreKvCache() {
  {
    common::MutexLock lock(&mu_);
    while (loading_) cv_.Wait(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  saver_.join();
  (void)client_->UnregisterBuffer(load_buf_);
  (void)client_->UnregisterBuffer(save_buf_);
}

bool StoreKvCache::Usable() {
  common::MutexLock lock(&mu_);
  stats_.available = std::chrono::steady_clock::now() >= down_until_;
  return stats_.available;
}

void StoreKvCache::Failed(const absl::Status& s) {
  common::MutexLock lock(&mu_);
  ++stats_.errors;
  const auto now = std::chrono::steady_clock::now();
  if (now >= down_until_)
    spdlog::warn("kvgate-sim: store unavailable ({}); recomputing for {} ms", s.message(),
                 options_.retry_after.count());
  down_until_ = now + options_.retry_after;
  stats_.available = false;
}

size_t StoreKvCache::Lookup(absl::Span<const uint64_t> hashes) {
  if (hashes.empty() || !Usable()) return 0;
  std::vector<store::ObjectKey> keys;
  keys.reserve(hashes.size());
  for (uint64_t h : hashes) keys.push_back(Key(h));
  auto present = client_->BatchExists(keys, /*stop_at_first_miss=*/true);
  if (!present.ok()) {
    Failed(present.status());
    return 0;
  }
  size_t n = 0;
  while (n < present->size() && (*present)[n]) ++n;
  common::MutexLock lock(&mu_);
  ++stats_.lookups;
  stats_.hit_blocks += n;
  return n;
}

std::vector<store::GetEntry> StoreKvCache::LoadEntries(absl::Span<const uint64_t> hashes) const {
  const size_t n = std::min<size_t>(hashes.size(), options_.max_blocks);
  std::vector<store::GetEntry> gets(n);
  for (size_t i = 0; i < n; ++i)
    gets[i] = {Key(hashes[i]), {{load_buf_ + i * block_bytes(), block_bytes()}}};
  return gets;
}

size_t StoreKvCache::Loaded(const std::vector<absl::StatusOr<uint64_t>>& got, size_t asked) {
  size_t loaded = 0;
  while (loaded < got.size() && got[loaded].ok()) ++loaded;
  if (loaded < got.size() && !absl::IsNotFound(got[loaded].status())) Failed(got[loaded].status());
  common::MutexLock lock(&mu_);
  stats_.loaded_blocks += loaded;
  stats_.load_failures += asked - loaded;
  return loaded;
}

size_t StoreKvCache::Load(absl::Span<const uint64_t> hashes) {
  return Loaded(client_->BatchGetInto(LoadEntries(hashes)), hashes.size());
}

void StoreKvCache::LoadAsync(absl::Span<const uint64_t> hashes,
                             absl::AnyInvocable<void(size_t) &&> done) {
  {
    common::MutexLock lock(&mu_);
    loading_ = true;
  }
  client_->BatchGetIntoAsync(
      LoadEntries(hashes), [this, asked = hashes.size(),
                            done = std::make_shared<absl::AnyInvocable<void(size_t) &&>>(std::move(
                                done))](std::vector<absl::StatusOr<uint64_t>> got) mutable {
        const size_t loaded = Loaded(got, asked);
        {
          common::MutexLock lock(&mu_);
          loading_ = false;
          cv_.SignalAll();
        }
        std::move (*done)(loaded);
      });
}

void StoreKvCache::Save(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
                        absl::Span<const uint32_t> tokens) {
  if (hashes.empty()) return;
  common::MutexLock lock(&mu_);
  if (stop_) return;
  jobs_.push_back({{hashes.begin(), hashes.end()}, parent, {tokens.begin(), tokens.end()}});
  cv_.SignalAll();
}

void StoreKvCache::Flush() {
  common::MutexLock lock(&mu_);
  while (!jobs_.empty() || saving_) cv_.WaitFor(&mu_, std::chrono::milliseconds(10));
}

StoreCacheStats StoreKvCache::stats() const {
  common::MutexLock lock(&mu_);
  return stats_;
}

void StoreKvCache::SaveLoop() {
  for (;;) {
    SaveJob job;
    {
      common::MutexLock lock(&mu_);
      while (jobs_.empty() && !stop_) cv_.WaitFor(&mu_, std::chrono::milliseconds(100));
      if (jobs_.empty()) return;  // Stopping, and every queued save ran.
      job = std::move(jobs_.front());
      jobs_.pop_front();
      saving_ = true;
    }
    if (Usable()) {
      const size_t n = std::min<size_t>(job.hashes.size(), options_.max_blocks);
      std::vector<store::PutEntry> puts(n);
      const uint32_t bs = options_.block_size;
      for (size_t i = 0; i < n; ++i) {
        uint8_t* p = save_buf_ + i * block_bytes();
        FillBlockBytes(job.hashes[i], p, block_bytes());
        puts[i].key = Key(job.hashes[i]);
        puts[i].slices = {{p, block_bytes()}};
        puts[i].parent = i == 0 ? job.parent : std::optional<uint64_t>(job.hashes[i - 1]);
        if (job.tokens.size() >= (i + 1) * bs)
          puts[i].token_ids.assign(job.tokens.begin() + i * bs, job.tokens.begin() + (i + 1) * bs);
      }
      auto results = client_->BatchPutFrom(puts);
      uint64_t saved = 0, present = 0;
      absl::Status error;
      for (const auto& r : results) {
        if (r.code == store::PutCode::kStored) ++saved;
        if (r.code == store::PutCode::kAlreadyPresent) ++present;
        if (r.code == store::PutCode::kError && error.ok()) error = r.error;
      }
      // A full store evicts; only an unreachable one is a failure of the store.
      if (absl::IsUnavailable(error) || absl::IsDeadlineExceeded(error)) Failed(error);
      common::MutexLock lock(&mu_);
      stats_.saved_blocks += saved;
      stats_.present_blocks += present;
    }
    common::MutexLock lock(&mu_);
    saving_ = false;
    cv_.SignalAll();
  }
}

}  // namespace kvgate::sim
