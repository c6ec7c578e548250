// kvgate-store-bench: put then get of batches of large values against kvgate-store, Redis or
// memcached, every byte verified (docs/benchmarks.md, "KV store").
//
//   kvgate-store-bench --store HOST:PORT [--credentials FILE] [--transport shm|tcp]  (or --redis /
//   --memcached HOST:PORT)
//       [--value-size 256K] [--batch 64] [--seconds 5] [--working-set 512M] [--warmup 0]
//       [--exists-chain 2000] [--probe-size 16K [--probe-shared]] [--corrupt-for-test]
//
// Put: batches of new keys (a store never rewrites an immutable key, so every put is new data)
// for --seconds; the store evicts as it fills, as a KV cache does. Get: batches drawn from the
// last --working-set bytes written, for --seconds, each value compared with what was put.
// --warmup BYTES are put first, untimed, so that a run measures a full, evicting store rather
// than first-touch page faults. One
// op is one key (gets count hits only; misses, keys the target evicted, are printed apart).
// Prints `put ops/s=N GB/s=X` and `get ops/s=N GB/s=X`; exits 1 on a wrong byte.
// --exists-chain N (store only): a chain of N objects of --value-size if it is at most 4 KiB
// (else 64 B), then the p50/p99 of one batched exists of the whole chain and the p50/max of one
// batched get of it.
// --probe-size SIZE (store only): a second client (its own connections) gets one SIZE object in a
// loop, quiet first and then while the put and get phases run; prints each phase's latency
// (`probe quiet|put|get n=N p50_us= p99_us= max_us=`): does a large transfer starve small ones?
// --probe-shared: the probe uses the bench's own StoreClient (as a gateway's requests share one).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/store/peer_clients.h"
#include "common/build_info.h"
#include "common/url.h"
#include "store/client.h"
#include "store/store_cli.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvgate::store::ObjectKey;

constexpr size_t kPatterns = 64;  // Distinct values; key k carries pattern k % kPatterns.

struct Args {
  std::string store, redis, memcached;
  std::string credentials;  // The store's credentials file ("" the user's default, "none").
  std::string transport = "shm";
  uint64_t value_size = 256 << 10;
  uint32_t batch = 64;
  double seconds = 5;
  uint64_t working_set = 512ull << 20;
  uint64_t warmup = 0;
  uint64_t tcp_slice = 0;        // 0: the transfer engine's default
  uint32_t tcp_connections = 0;  // 0: the default
  int64_t inline_copy = -1;      // -1: the store client's default
  uint32_t exists_chain = 0;
  uint64_t probe_size = 0;  // 0: no probe client.
  bool probe_shared = false;
  bool corrupt = false;
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "kvgate-store-bench: %s\n", msg.c_str());
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--corrupt-for-test" || f == "--probe-shared") {
      (f == "--corrupt-for-test" ? a.corrupt : a.probe_shared) = true;
      continue;
    }
    if (i + 1 >= argc) Die(f + ": missing value");
    std::string v = argv[++i];
    auto size = [&] {
      auto n = kvgate::store::ParseByteSize(v);
      if (!n.ok() || *n == 0) Die(f + ": bad size " + v);
      return *n;
    };
    auto number = [&] {
      double d = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), d);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || d <= 0)
        Die(f + ": bad number " + v);
      return d;
    };
    if (f == "--store") {
      a.store = v;
    } else if (f == "--credentials") {
      a.credentials = v;
    } else if (f == "--redis") {
      a.redis = v;
    } else if (f == "--memcached") {
      a.memcached = v;
    } else if (f == "--transport") {
      a.transport = v;
    } else if (f == "--value-size") {
      a.value_size = size();
    } else if (f == "--batch") {
      a.batch = static_cast<uint32_t>(number());
    } else if (f == "--seconds") {
      a.seconds = number();
    } else if (f == "--working-set") {
      a.working_set = size();
    } else if (f == "--warmup") {
      a.warmup = size();
    } else if (f == "--tcp-slice") {
      a.tcp_slice = size();
    } else if (f == "--inline-copy") {
      a.inline_copy = static_cast<int64_t>(size());
    } else if (f == "--tcp-connections") {
      a.tcp_connections = static_cast<uint32_t>(number());
    } else if (f == "--probe-size") {
      a.probe_size = size();
    } else if (f == "--exists-chain") {
      a.exists_chain = static_cast<uint32_t>(number());
    } else {
      Die("unknown flag " + f);
    }
  }
  if ((!a.store.empty()) + (!a.redis.empty()) + (!a.memcached.empty()) != 1)
    Die("name exactly one of --store, --redis, --memcached");
  if (a.batch == 0) Die("--batch must be > 0");
  if (a.probe_size > 0 && a.store.empty()) Die("--probe-size needs --store");
  return a;
}

kvgate::store::StoreClientOptions StoreOptions(const Args& a) {
  kvgate::store::StoreClientOptions o;
  o.master = a.store;
  o.credentials_file = a.credentials;
  o.transports = {a.transport};
  if (a.tcp_slice > 0) o.tcp.slice_bytes = static_cast<uint32_t>(a.tcp_slice);
  if (a.tcp_connections > 0) o.tcp.connections_per_peer = a.tcp_connections;
  if (a.inline_copy >= 0) o.copy.inline_max_bytes = static_cast<uint64_t>(a.inline_copy);
  return o;
}

// What a bench drives: put / get one batch of key ids.
class Target {
 public:
  virtual ~Target() = default;
  virtual void Put(const std::vector<uint64_t>& ids) = 0;
  /// Reads into out[i * value_size]; found[i] says whether key i was there (evicted otherwise).
  virtual void Get(const std::vector<uint64_t>& ids, uint8_t* out, std::vector<bool>* found) = 0;
};

class StoreTarget final : public Target {
 public:
  StoreTarget(const Args& a, const uint8_t* patterns_src) : a_(a) {
    auto c = kvgate::store::StoreClient::Create(StoreOptions(a));
    if (!c.ok()) Die(std::string(c.status().message()));
    client_ = std::move(*c);
    auto p = client_->AllocateBuffer(kPatterns * a.value_size);
    auto g = client_->AllocateBuffer(uint64_t{a.batch} * a.value_size);
    if (!p.ok() || !g.ok()) Die("cannot allocate registered buffers");
    patterns_ = static_cast<uint8_t*>(*p);
    get_buf_ = static_cast<uint8_t*>(*g);
    std::memcpy(patterns_, patterns_src, kPatterns * a.value_size);
  }
  uint8_t* get_buffer() { return get_buf_; }
  void Put(const std::vector<uint64_t>& ids) override {
    std::vector<kvgate::store::PutEntry> entries(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      entries[i].key = {"bench", ids[i]};
      entries[i].slices = {{patterns_ + (ids[i] % kPatterns) * a_.value_size, a_.value_size}};
    }
    for (const auto& r : client_->BatchPutFrom(entries))
      if (r.code == kvgate::store::PutCode::kError) Die("put: " + std::string(r.error.message()));
  }
  void Get(const std::vector<uint64_t>& ids, uint8_t* out, std::vector<bool>* found) override {
    std::vector<kvgate::store::GetEntry> entries(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      entries[i].key = {"bench", ids[i]};
      entries[i].slices = {{out + i * a_.value_size, a_.value_size}};
    }
    auto got = client_->BatchGetInto(entries);
    for (size_t i = 0; i < got.size(); ++i) {
      (*found)[i] = got[i].ok();
      if (!got[i].ok() && !absl::IsNotFound(got[i].status()))
        Die("get: " + std::string(got[i].status().message()));
    }
  }
  kvgate::store::StoreClient& client() { return *client_; }

 private:
  const Args& a_;
  std::unique_ptr<kvgate::store::StoreClient> client_;
  uint8_t* patterns_ = nullptr;
  uint8_t* get_buf_ = nullptr;
};

class PeerTarget final : public Target {
 public:
  PeerTarget(const Args& a, const uint8_t* patterns) : a_(a), patterns_(patterns) {
    const std::string& addr = a.redis.empty() ? a.memcached : a.redis;
    auto hp = kvgate::common::ParseHostPort(addr);
    if (!hp.ok()) Die(std::string(hp.status().message()));
    auto p = a.redis.empty() ? kvgate::store::bench::ConnectMemcached(hp->first, hp->second)
                             : kvgate::store::bench::ConnectRedis(hp->first, hp->second);
    if (!p.ok()) Die(std::string(p.status().message()));
    peer_ = std::move(*p);
  }
  void Put(const std::vector<uint64_t>& ids) override {
    std::vector<std::string> keys;
    std::vector<std::string_view> values;
    for (uint64_t id : ids) {
      keys.push_back("bench:" + std::to_string(id));
      values.emplace_back(
          reinterpret_cast<const char*>(patterns_) + (id % kPatterns) * a_.value_size,
          a_.value_size);
    }
    if (auto s = peer_->PutBatch(keys, values); !s.ok()) Die(std::string(s.message()));
  }
  void Get(const std::vector<uint64_t>& ids, uint8_t* out, std::vector<bool>* found) override {
    std::vector<std::string> keys;
    std::vector<absl::Span<uint8_t>> spans;
    for (size_t i = 0; i < ids.size(); ++i) {
      keys.push_back("bench:" + std::to_string(ids[i]));
      spans.emplace_back(out + i * a_.value_size, a_.value_size);
      std::memset(out + i * a_.value_size, 0, 8);  // A miss must not look like a hit.
    }
    auto s = peer_->GetBatch(keys, spans);
    if (!s.ok() && !absl::IsNotFound(s)) Die(std::string(s.message()));
    // The peers report misses as one status: tell hits from misses by their first bytes.
    for (size_t i = 0; i < ids.size(); ++i)
      (*found)[i] = s.ok() || std::memcmp(out + i * a_.value_size,
                                          patterns_ + (ids[i] % kPatterns) * a_.value_size, 8) == 0;
  }

 private:
  const Args& a_;
  const uint8_t* patterns_;
  std::unique_ptr<kvgate::store::bench::KvPeer> peer_;
};

// The small client of --probe-size: its own StoreClient (engine, connections) unless `shared`,
// one object.
class Probe {
 public:
  Probe(const Args& a, kvgate::store::StoreClient* shared) : size_(a.probe_size), client_(shared) {
    if (client_ == nullptr) {
      auto c = kvgate::store::StoreClient::Create(StoreOptions(a));
      if (!c.ok()) Die(std::string(c.status().message()));
      own_ = std::move(*c);
      client_ = own_.get();
    }
    auto b = client_->AllocateBuffer(size_);
    if (!b.ok()) Die("probe: cannot allocate a registered buffer");
    buf_ = static_cast<uint8_t*>(*b);
    std::memset(buf_, 0x5a, size_);
    kvgate::store::PutEntry e{key_, {{buf_, size_}}, {}, {}};
    for (const auto& r : client_->BatchPutFrom({&e, 1}))
      if (r.code == kvgate::store::PutCode::kError)
        Die("probe put: " + std::string(r.error.message()));
  }
  ~Probe() { Stop(nullptr); }
  void Start() {
    stop_ = false;
    us_.clear();
    thread_ = std::thread([this] {
      kvgate::store::GetEntry e{key_, {{buf_, size_}}};
      while (!stop_.load()) {
        const auto t0 = Clock::now();
        auto got = client_->BatchGetInto({&e, 1});
        if (!got[0].ok()) Die("probe get: " + std::string(got[0].status().message()));
        us_.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  }
  /// Stops the loop and prints its latencies as phase `what` (nothing when null).
  void Stop(const char* what) {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    if (what == nullptr || us_.empty()) return;
    std::sort(us_.begin(), us_.end());
    std::printf("probe %s n=%zu p50_us=%.0f p99_us=%.0f max_us=%.0f\n", what, us_.size(),
                us_[us_.size() / 2], us_[us_.size() * 99 / 100], us_.back());
    std::fflush(stdout);
  }

 private:
  const uint64_t size_;
  const ObjectKey key_{"probe", 1};
  kvgate::store::StoreClient* client_;
  std::unique_ptr<kvgate::store::StoreClient> own_;
  uint8_t* buf_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<double> us_;
};

void Report(const char* what, uint64_t ops, uint64_t bytes, double secs) {
  std::printf("%s ops/s=%.0f GB/s=%.3f\n", what, ops / secs, bytes / secs / 1e9);
  std::fflush(stdout);
}

void ExistsChain(kvgate::store::StoreClient& client, uint32_t n, uint64_t value_size) {
  // --value-size when it names a small object (a simulator's stand-in block is 256 B), else
  // 64 B as before, so that a long chain still fits a small store.
  const uint64_t v = value_size <= 4096 ? value_size : 64;
  auto buf = client.AllocateBuffer(v);
  auto into = client.AllocateBuffer(uint64_t{n} * v);
  if (!buf.ok() || !into.ok()) Die("exists: cannot allocate");
  std::memset(*buf, 7, v);
  std::vector<ObjectKey> keys;
  std::vector<kvgate::store::PutEntry> entries;
  std::vector<kvgate::store::GetEntry> gets;
  for (uint32_t i = 0; i < n; ++i) {
    keys.push_back({"chain-" + std::to_string(v), 0x9e3779b97f4a7c15ull * (i + 1)});
    entries.push_back({keys.back(), {{*buf, v}}, {}, {}});
    gets.push_back({keys.back(), {{static_cast<uint8_t*>(*into) + i * v, v}}});
  }
  for (size_t at = 0; at < entries.size(); at += 256) {
    auto part = absl::MakeConstSpan(entries).subspan(at, 256);
    for (const auto& r : client.BatchPutFrom(part))
      if (r.code == kvgate::store::PutCode::kError)
        Die("exists: put: " + std::string(r.error.message()));
  }
  std::vector<double> us;
  for (int i = 0; i < 300; ++i) {
    const auto t0 = Clock::now();
    auto r = client.BatchExists(keys, /*stop_at_first_miss=*/true);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!r.ok() || r->size() != n || !std::all_of(r->begin(), r->end(), [](bool b) { return b; }))
      Die("exists: the chain is not all present");
  }
  std::sort(us.begin(), us.end());
  std::printf("exists chain=%u p50_us=%.1f p99_us=%.1f\n", n, us[us.size() / 2],
              us[us.size() * 99 / 100]);
  // Then one batched get of the whole chain: a simulated engine's store load of a long prompt.
  us.clear();
  for (int i = 0; i < 20; ++i) {
    std::memset(*into, 0, uint64_t{n} * v);
    const auto t0 = Clock::now();
    auto got = client.BatchGetInto(gets);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    for (uint32_t k = 0; k < n; ++k) {
      if (!got[k].ok()) Die("get chain: " + std::string(got[k].status().message()));
      if (static_cast<uint8_t*>(*into)[uint64_t{k} * v + v - 1] != 7) Die("get chain: wrong byte");
    }
  }
  std::sort(us.begin(), us.end());
  std::printf("get chain=%u value=%lu p50_us=%.1f max_us=%.1f\n", n, static_cast<unsigned long>(v),
              us[us.size() / 2], us.back());
}

}  // namespace

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-store-bench")) return 0;
  const Args a = Parse(argc, argv);
  std::vector<uint8_t> patterns(kPatterns * a.value_size);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < patterns.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(&patterns[i], &v, std::min<size_t>(8, patterns.size() - i));
  }
  std::unique_ptr<Target> target;
  std::vector<uint8_t> own_get_buf;
  uint8_t* get_buf = nullptr;
  StoreTarget* store = nullptr;
  if (!a.store.empty()) {
    auto t = std::make_unique<StoreTarget>(a, patterns.data());
    store = t.get();
    get_buf = t->get_buffer();
    target = std::move(t);
  } else {
    target = std::make_unique<PeerTarget>(a, patterns.data());
    own_get_buf.resize(uint64_t{a.batch} * a.value_size);
    get_buf = own_get_buf.data();
  }
  if (a.exists_chain > 0) {
    if (store == nullptr) Die("--exists-chain needs --store");
    ExistsChain(store->client(), a.exists_chain, a.value_size);
    return 0;
  }
  uint64_t next = 0;
  std::vector<uint64_t> ids(a.batch);
  while (next * a.value_size < a.warmup) {
    for (auto& id : ids) id = next++;
    target->Put(ids);
  }
  std::unique_ptr<Probe> probe;
  if (a.probe_size > 0) {
    probe = std::make_unique<Probe>(a, a.probe_shared ? &store->client() : nullptr);
    probe->Start();
    std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
    probe->Stop("quiet");
    probe->Start();
  }
  // Put.
  const uint64_t first_timed = next;
  auto t0 = Clock::now();
  const auto put_end = t0 + std::chrono::duration<double>(a.seconds);
  while (Clock::now() < put_end) {
    for (auto& id : ids) id = next++;
    target->Put(ids);
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (probe) probe->Stop("put");
  Report("put", next - first_timed, (next - first_timed) * a.value_size, secs);
  if (probe) probe->Start();
  // Get, from the most recent working set.
  const uint64_t window =
      std::max<uint64_t>(a.batch, std::min<uint64_t>(next, a.working_set / a.value_size));
  std::mt19937_64 pick(7);
  uint64_t ops = 0, misses = 0;
  std::vector<bool> found(ids.size());
  t0 = Clock::now();
  const auto get_end = t0 + std::chrono::duration<double>(a.seconds);
  while (Clock::now() < get_end) {
    for (auto& id : ids) id = next - 1 - pick() % std::min(window, next);
    target->Get(ids, get_buf, &found);
    if (a.corrupt) get_buf[a.value_size / 2] ^= 1;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!found[i]) {
        ++misses;
        continue;
      }
      const uint8_t* want = patterns.data() + (ids[i] % kPatterns) * a.value_size;
      const uint8_t* got = get_buf + i * a.value_size;
      if (std::memcmp(want, got, a.value_size) != 0) {
        size_t at = 0;
        while (want[at] == got[at]) ++at;
        std::printf("MISMATCH at byte %zu of key %llu\n", at,
                    static_cast<unsigned long long>(ids[i]));
        return 1;
      }
      ++ops;
    }
  }
  secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (probe) probe->Stop("get");
  Report("get", ops, ops * a.value_size, secs);  // Hits only.
  if (misses > 0)
    std::printf("get misses=%llu (evicted from the last --working-set)\n",
                static_cast<unsigned long long>(misses));
  return 0;
}
