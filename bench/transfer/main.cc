// kvgate-transfer-bench: bandwidth and latency of the transfer engine between two processes.
//
//   kvgate-transfer-bench --transport local|shm|tcp|rdma --sizes 4K,1M,64M [--verify]
//       [--op read|write] [--batch N] [--depth N] [--seconds S] [--latency] [--iters N]
//       [--batch-sweep 1,8,64] [--memcpy] [--connections N] [--slice 64K] [--crc]
//       [--local-location cuda:0]
//
// The process spawns itself (--serve) as the segment owner and reads from or writes to it; one
// line per size, naming the size as given, with its GB/s (1 GB = 1e9 bytes). --verify checks
// every byte (READ: against the owner's pattern; WRITE: read back and compared) and exits 1 on
// any difference. A transport that cannot run here prints "unavailable: <reason>" and exits 77.
// `local` is by definition one process: requests go to the engine's own segment.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/build_info.h"
#include "common/logging.h"
#include "common/strings.h"
#include "transfer/transfer_engine.h"

extern char** environ;

namespace kvgate::transfer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kUnavailable = 77;
constexpr uint64_t kMaxServerBytes = 1ull << 30;

struct Args {
  std::string transport = "tcp";
  std::vector<std::pair<std::string, uint64_t>> sizes;  // As given, and in bytes.
  bool verify = false;
  std::string op = "read";
  uint32_t batch = 1;
  uint32_t depth = 1;
  double seconds = 0.5;
  bool latency = false;
  uint32_t iters = 0;
  std::vector<uint32_t> batch_sweep;
  bool memcpy_baseline = false;
  uint32_t connections = 4;
  uint32_t inflight = 0;  // tcp: slices in flight per connection (0: the default).
  uint64_t sockbuf = 0;   // tcp: SO_SNDBUF/SO_RCVBUF (0: kernel autotuning).
  uint64_t region = 0;    // Cap on the memory requests cycle through (0: batch x depth x size).
  int copy_threads = -1;  // local/shm copy workers (-1: the default).
  uint64_t slice = 64 << 10;
  bool crc = false;
  std::string local_location = "cpu:0";
  bool corrupt_for_test = false;  // Flip one byte before verifying (tests the check itself).
  bool serve = false;
  std::string name, metadata;
  uint64_t serve_bytes = 0;
};

bool ParseSize(std::string_view s, uint64_t* out) {
  uint64_t mult = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1ull << 10;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1ull << 20;
  if (!s.empty() && (s.back() == 'G' || s.back() == 'g')) mult = 1ull << 30;
  if (mult != 1) s.remove_suffix(1);
  uint64_t v = 0;
  if (!common::ParseUint64(s, &v) || v == 0) return false;
  *out = v * mult;
  return true;
}

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "kvgate-transfer-bench: " << why
            << "\nusage: kvgate-transfer-bench --transport local|shm|tcp|rdma --sizes 4K,1M,64M "
               "[--verify] [--op read|write] [--batch N] [--depth N] [--seconds S] [--latency] "
               "[--iters N] [--batch-sweep 1,8,64] [--memcpy] [--connections N] [--slice 64K] "
               "[--inflight N] [--sockbuf 4M] [--region 1M] [--copy-threads N] [--crc] "
               "[--local-location cuda:0]\n";
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(k + " needs a value");
      return argv[++i];
    };
    uint64_t n = 0;
    if (k == "--transport") {
      a.transport = value();
    } else if (k == "--sizes") {
      const std::vector<std::string> parts = absl::StrSplit(value(), ',');
      for (const std::string& s : parts) {
        if (!ParseSize(s, &n)) Usage("bad size '" + s + "'");
        a.sizes.emplace_back(s, n);
      }
    } else if (k == "--verify") {
      a.verify = true;
    } else if (k == "--op") {
      a.op = value();
      if (a.op != "read" && a.op != "write") Usage("--op is read or write");
    } else if (k == "--batch" || k == "--depth" || k == "--iters" || k == "--connections" ||
               k == "--inflight") {
      if (!common::ParseUint64(value(), &n) || n == 0 || n > 65536) Usage("bad " + k);
      (k == "--batch"         ? a.batch
       : k == "--depth"       ? a.depth
       : k == "--iters"       ? a.iters
       : k == "--connections" ? a.connections
                              : a.inflight) = static_cast<uint32_t>(n);
    } else if (k == "--seconds") {
      if (!common::ParseDouble(value(), &a.seconds) || a.seconds <= 0) Usage("bad --seconds");
    } else if (k == "--latency") {
      a.latency = true;
    } else if (k == "--batch-sweep") {
      const std::vector<std::string> parts = absl::StrSplit(value(), ',');
      for (const std::string& s : parts) {
        if (!common::ParseUint64(s, &n) || n == 0 || n > 65536) Usage("bad batch '" + s + "'");
        a.batch_sweep.push_back(static_cast<uint32_t>(n));
      }
    } else if (k == "--memcpy") {
      a.memcpy_baseline = true;
    } else if (k == "--slice") {
      if (!ParseSize(value(), &a.slice)) Usage("bad --slice");
    } else if (k == "--copy-threads") {
      if (!common::ParseUint64(value(), &n) || n > 64) Usage("bad --copy-threads");
      a.copy_threads = static_cast<int>(n);
    } else if (k == "--region") {
      if (!ParseSize(value(), &a.region)) Usage("bad --region");
    } else if (k == "--sockbuf") {
      const std::string v = value();
      if (v != "0" && !ParseSize(v, &a.sockbuf)) Usage("bad --sockbuf");
    } else if (k == "--crc") {
      a.crc = true;
    } else if (k == "--local-location") {
      a.local_location = value();
    } else if (k == "--corrupt-for-test") {
      a.corrupt_for_test = true;
    } else if (k == "--serve") {
      a.serve = true;
    } else if (k == "--name") {
      a.name = value();
    } else if (k == "--metadata") {
      a.metadata = value();
    } else if (k == "--serve-bytes") {
      if (!common::ParseUint64(value(), &a.serve_bytes)) Usage("bad --serve-bytes");
    } else {
      Usage("unknown argument " + k);
    }
  }
  if (a.sizes.empty() && !a.serve) a.sizes = {{"4K", 4096}, {"1M", 1 << 20}, {"64M", 64 << 20}};
  return a;
}

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }
void FillPattern(uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) p[i] = Pattern(i);
}

TransferEngineOptions EngineOptions(const Args& a, const std::string& name,
                                    const std::string& metadata) {
  TransferEngineOptions o;
  o.segment_name = name;
  o.metadata_uri = metadata;
  o.transports = {a.transport};
  o.default_timeout = std::chrono::seconds(60);
  o.verify_crc32c = a.crc;
  o.tcp.listen_address = "127.0.0.1";
  o.tcp.connections_per_peer = a.connections;
  o.tcp.slice_bytes = static_cast<uint32_t>(a.slice);
  if (a.inflight > 0) o.tcp.max_inflight_slices_per_connection = a.inflight;
  o.tcp.socket_buffer_bytes = static_cast<uint32_t>(a.sockbuf);
  if (a.copy_threads >= 0) o.copy.threads = static_cast<uint32_t>(a.copy_threads);
  o.rdma.slice_bytes = static_cast<uint32_t>(a.slice);
  o.load_gpu_runtimes = a.local_location != "cpu:0";
  return o;
}

// The owner: a pattern-filled buffer, then "ready ADDR LEN"; exits when stdin closes.
int Serve(const Args& a) {
  common::InitLogging();
  auto engine = TransferEngine::Create(EngineOptions(a, a.name, a.metadata));
  if (!engine.ok()) {
    std::cout << "unavailable: " << engine.status().message() << std::endl;
    return kUnavailable;
  }
  void* buf = nullptr;
  std::unique_ptr<uint8_t[]> plain;
  if (a.transport == "shm") {
    auto p = (*engine)->AllocateManagedMemory(a.serve_bytes);
    if (!p.ok()) {
      std::cout << "unavailable: " << p.status().message() << std::endl;
      return kUnavailable;
    }
    buf = *p;
  } else {
    plain = std::make_unique<uint8_t[]>(a.serve_bytes);
    buf = plain.get();
    if (auto st = (*engine)->RegisterMemory(buf, a.serve_bytes); !st.ok()) {
      std::cout << "unavailable: " << st.message() << std::endl;
      return kUnavailable;
    }
  }
  FillPattern(static_cast<uint8_t*>(buf), a.serve_bytes);
  std::cout << "ready " << reinterpret_cast<uint64_t>(buf) << " " << a.serve_bytes << std::endl;
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}

struct Server {
  pid_t pid = -1;
  int to = -1;
  uint64_t addr = 0, len = 0;
  std::string error;
  ~Server() {
    if (to >= 0) close(to);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
};

bool SpawnServer(const Args& a, const std::string& metadata, uint64_t bytes, Server* s) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
  std::vector<std::string> args = {"/proc/self/exe", "--serve",
                                   "--transport",    a.transport,
                                   "--name",         "bench-server",
                                   "--metadata",     metadata,
                                   "--serve-bytes",  std::to_string(bytes),
                                   "--connections",  std::to_string(a.connections),
                                   "--slice",        std::to_string(a.slice),
                                   "--sockbuf",      std::to_string(a.sockbuf)};
  if (a.crc) args.push_back("--crc");
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  const int rc = posix_spawn(&s->pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  s->to = in[1];
  if (rc != 0) return false;
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(out[0]);
  if (line.rfind("unavailable: ", 0) == 0) {
    s->error = line;
    return false;
  }
  std::vector<std::string> w = absl::StrSplit(line, ' ');
  return w.size() == 3 && w[0] == "ready" && common::ParseUint64(w[1], &s->addr) &&
         common::ParseUint64(w[2], &s->len);
}

double Gbps(uint64_t bytes, Clock::duration d) {
  return static_cast<double>(bytes) / std::chrono::duration<double>(d).count() / 1e9;
}

// Runs `reqs` as one batch per iteration, `depth` batches in flight, until `seconds` (or `iters`)
// are reached. Returns bytes moved per second, or an error.
struct RunResult {
  uint64_t bytes = 0;
  uint64_t batches = 0;
  Clock::duration elapsed{};
  std::vector<double> latencies_us;
};

absl::StatusOr<RunResult> Run(TransferEngine& engine, const std::vector<TransferRequest>& reqs,
                              uint32_t depth, double seconds, uint32_t iters, bool record) {
  RunResult r;
  uint64_t per_batch = 0;
  for (const auto& q : reqs) per_batch += q.length;
  std::vector<BatchId> ring;
  std::vector<Clock::time_point> started;
  for (uint32_t i = 0; i < depth; ++i) {
    auto b = engine.AllocateBatch(static_cast<uint32_t>(reqs.size()));
    if (!b.ok()) return b.status();
    ring.push_back(*b);
  }
  started.resize(depth);
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(seconds);
  uint64_t submitted = 0;
  auto submit = [&](uint32_t k) -> absl::Status {
    (void)engine.FreeBatch(ring[k]);
    auto b = engine.AllocateBatch(static_cast<uint32_t>(reqs.size()));
    if (!b.ok()) return b.status();
    ring[k] = *b;
    started[k] = Clock::now();
    ++submitted;
    return engine.Submit(ring[k], reqs);
  };
  auto done = [&]() {
    return iters > 0 ? submitted >= iters : (Clock::now() >= until && submitted >= 3);
  };
  for (uint32_t k = 0; k < depth && !done(); ++k) {
    if (auto st = submit(k); !st.ok()) return st;
  }
  uint64_t outstanding = submitted;
  uint32_t k = 0;
  while (outstanding > 0) {
    auto st = engine.Wait(ring[k], Clock::now() + std::chrono::seconds(120));
    if (!st.ok()) return st.status();
    if (st->state != TaskState::kCompleted) {
      return absl::InternalError(
          common::StrCat("transfer ", TaskStateName(st->state), ": ", st->first_error.message()));
    }
    if (record) {
      r.latencies_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - started[k]).count());
    }
    r.bytes += per_batch;
    ++r.batches;
    --outstanding;
    if (!done()) {
      if (auto s2 = submit(k); !s2.ok()) return s2;
      ++outstanding;
    }
    k = (k + 1) % depth;
  }
  r.elapsed = Clock::now() - t0;
  for (BatchId b : ring) (void)engine.FreeBatch(b);
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

int Main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  if (a.serve) return Serve(a);
  common::InitLogging();
  (void)common::SetLogLevel("warn");

  if (a.memcpy_baseline) {
    for (const auto& [label, size] : a.sizes) {
      std::vector<uint8_t> src(size, 1), dst(size, 2);
      uint64_t bytes = 0, n = 0;
      const auto t0 = Clock::now();
      do {
        std::memcpy(dst.data(), src.data(), size);
        bytes += size;
        ++n;
        src[n % size] = static_cast<uint8_t>(n);  // Keeps the copy from being hoisted.
      } while (Clock::now() - t0 < std::chrono::duration<double>(a.seconds) || n < 3);
      std::printf("%-6s memcpy  %8.2f GB/s  (single thread, %llu copies)\n", label.c_str(),
                  Gbps(bytes, Clock::now() - t0), static_cast<unsigned long long>(n));
    }
    return 0;
  }

  char tmpl[] = "/tmp/kvgate-transfer-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string metadata = "file:" + dir + "/segments";
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};

  uint32_t max_batch = a.batch;
  for (uint32_t b : a.batch_sweep) max_batch = std::max(max_batch, b);
  uint64_t max_size = 0;
  for (const auto& s : a.sizes) max_size = std::max(max_size, s.second);
  const uint64_t want = max_size * max_batch * a.depth;
  uint64_t region = std::min<uint64_t>(std::max<uint64_t>(want, 4096), kMaxServerBytes);
  if (a.region > 0) region = std::max(a.region, max_size);  // Cache-resident runs.

  auto engine = TransferEngine::Create(EngineOptions(a, "bench-client", metadata));
  if (!engine.ok()) {
    std::cout << "unavailable: " << engine.status().message() << std::endl;
    return kUnavailable;
  }
  Server server;
  SegmentId seg{};
  uint64_t remote_base = 0;
  std::unique_ptr<uint8_t[]> own_remote;
  if (a.transport == "local") {
    own_remote = std::make_unique<uint8_t[]>(region);
    FillPattern(own_remote.get(), region);
    if (auto st = (*engine)->RegisterMemory(own_remote.get(), region); !st.ok()) {
      std::cerr << st << "\n";
      return 1;
    }
    remote_base = reinterpret_cast<uint64_t>(own_remote.get());
    auto s = (*engine)->OpenSegment("bench-client");
    if (!s.ok()) return 1;
    seg = *s;
  } else {
    if (!SpawnServer(a, metadata, region, &server)) {
      std::cout << (server.error.empty() ? "unavailable: the server process did not start"
                                         : server.error)
                << std::endl;
      return kUnavailable;
    }
    auto s = (*engine)->OpenSegment("bench-server");
    if (!s.ok()) {
      std::cout << "unavailable: " << s.status().message() << std::endl;
      return kUnavailable;
    }
    seg = *s;
    remote_base = server.addr;
  }

  // The local side: host memory, or device memory through the GPU runtime.
  std::unique_ptr<uint8_t[]> host_local;
  uint8_t* local = nullptr;
  std::unique_ptr<GpuRuntime> gpu;
  auto loc = ParseLocation(a.local_location);
  if (!loc.ok()) Usage(std::string(loc.status().message()));
  if (loc->is_device()) {
    auto rt = loc->kind == MemoryKind::kCuda ? LoadCudaRuntime() : LoadHipRuntime();
    if (!rt.ok()) {
      std::cout << "unavailable: " << rt.status().message() << std::endl;
      return kUnavailable;
    }
    gpu = std::move(*rt);
    auto p = gpu->AllocDevice(region * 2, loc->device);
    if (!p.ok()) {
      std::cout << "unavailable: " << p.status().message() << std::endl;
      return kUnavailable;
    }
    local = static_cast<uint8_t*>(*p);
  } else {
    host_local = std::make_unique<uint8_t[]>(region * 2);  // Second half: read-back.
    local = host_local.get();
  }
  if (auto st = (*engine)->RegisterMemory(local, region * 2, a.local_location); !st.ok()) {
    std::cout << "unavailable: " << st.message() << std::endl;
    return kUnavailable;
  }
  const auto op = a.op == "read" ? TransferOp::kRead : TransferOp::kWrite;
  auto requests = [&](uint64_t size, uint32_t batch) {
    std::vector<TransferRequest> reqs;
    for (uint32_t i = 0; i < batch; ++i) {
      const uint64_t off = (uint64_t{i} * size) % (region - size + 1);
      reqs.push_back({op, local + off, seg, remote_base + off, size});
    }
    return reqs;
  };
  // Every byte, on the host.
  auto verify = [&](uint64_t size, uint32_t batch) -> bool {
    const uint64_t span = std::min<uint64_t>(size * batch, region);
    std::vector<uint8_t> host(span);
    if (op == TransferOp::kWrite) {
      // Read back what was written into the second half of local memory.
      std::vector<TransferRequest> back;
      for (uint64_t off = 0; off < span; off += size) {
        back.push_back({TransferOp::kRead, local + region + off, seg, remote_base + off,
                        std::min(size, span - off)});
      }
      auto r = Run(**engine, back, 1, 0, 1, false);
      if (!r.ok()) {
        std::printf("MISMATCH: read-back failed: %s\n", std::string(r.status().message()).c_str());
        return false;
      }
    }
    const uint8_t* got = op == TransferOp::kWrite ? local + region : local;
    if (gpu != nullptr) {
      if (!gpu->Copy(host.data(), got, span).ok()) return false;
    } else {
      std::memcpy(host.data(), got, span);
    }
    if (a.corrupt_for_test) host[span / 2] ^= 1;
    for (uint64_t i = 0; i < span; ++i) {
      if (host[i] != Pattern(i)) {
        std::printf("MISMATCH at byte %llu: got %u, expected %u\n",
                    static_cast<unsigned long long>(i), host[i], Pattern(i));
        return false;
      }
    }
    return true;
  };
  auto prepare = [&](uint64_t size, uint32_t batch) {
    const uint64_t span = std::min<uint64_t>(size * batch, region);
    std::vector<uint8_t> host(region * 2);
    // READ starts from zeros (stale bytes cannot pass); WRITE sends the pattern.
    if (op == TransferOp::kWrite) FillPattern(host.data(), span);
    if (gpu != nullptr) {
      (void)gpu->Copy(local, host.data(), region * 2);
    } else {
      std::memcpy(local, host.data(), region * 2);
    }
  };

  bool all_ok = true;
  const std::string t = a.transport;
  for (const auto& [label, size] : a.sizes) {
    if (size > region) {
      std::printf("%-6s skipped: larger than the %llu-byte region\n", label.c_str(),
                  static_cast<unsigned long long>(region));
      continue;
    }
    if (a.latency) {
      prepare(size, 1);
      auto r = Run(**engine, requests(size, 1), 1, a.seconds, a.iters ? a.iters : 2000, true);
      if (!r.ok()) {
        std::printf("%-6s %s failed: %s\n", label.c_str(), a.op.c_str(),
                    std::string(r.status().message()).c_str());
        return 1;
      }
      const bool ok = !a.verify || verify(size, 1);
      std::printf("%-6s %-5s %-5s latency p50 %8.1f us  p99 %8.1f us  (%zu ops%s)\n", label.c_str(),
                  a.op.c_str(), t.c_str(), Percentile(r->latencies_us, 0.5),
                  Percentile(r->latencies_us, 0.99), r->latencies_us.size(),
                  a.verify ? (ok ? ", verified" : ", WRONG BYTES") : "");
      all_ok &= ok;
      continue;
    }
    std::vector<uint32_t> batches =
        a.batch_sweep.empty() ? std::vector<uint32_t>{a.batch} : a.batch_sweep;
    for (uint32_t batch : batches) {
      prepare(size, batch);
      auto r = Run(**engine, requests(size, batch), a.depth, a.seconds, a.iters, false);
      if (!r.ok()) {
        std::printf("%-6s %s failed: %s\n", label.c_str(), a.op.c_str(),
                    std::string(r.status().message()).c_str());
        return 1;
      }
      const bool ok = !a.verify || verify(size, batch);
      const double secs = std::chrono::duration<double>(r->elapsed).count();
      std::printf("%-6s %-5s %-5s %8.2f GB/s  batch %u depth %u  %.0f req/s  (%llu batches%s)\n",
                  label.c_str(), a.op.c_str(), t.c_str(), Gbps(r->bytes, r->elapsed), batch,
                  a.depth, static_cast<double>(r->batches) * batch / secs,
                  static_cast<unsigned long long>(r->batches),
                  a.verify ? (ok ? ", verified" : ", WRONG BYTES") : "");
      all_ok &= ok;
    }
  }
  std::fflush(stdout);
  (void)(*engine)->UnregisterMemory(local);
  if (gpu != nullptr) gpu->FreeDevice(local);
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace kvgate::transfer

int main(int argc, char** argv) {
  if (kvgate::common::PrintVersionIfAsked(argc, argv, "kvgate-transfer-bench")) return 0;
  return kvgate::transfer::Main(argc, argv);
}
