#include "tests/transfer/test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/strings.h"
#include "tests/support/child_process.h"
#include "transfer/crc32c.h"

#if defined(__SANITIZE_THREAD__)
// TSan's dynamic annotations (in its runtime).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace kvgate::transfer::testing {
namespace {

// The peer's main thread touches its segment's bytes (filling them, checksumming what a remote
// WRITE left) in an order set by the other process: the test reads the peer's "ready" line
// before it sends, and the peer reads the next command after the WRITE completed. TSan sees only
// one process, so to it these accesses race with the serving threads; they are hidden from it
// here (and only here). The engine's own synchronisation stays fully checked.
class IgnoreBufferAccesses {
 public:
  IgnoreBufferAccesses() {
#if defined(__SANITIZE_THREAD__)
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
  }
  ~IgnoreBufferAccesses() {
#if defined(__SANITIZE_THREAD__)
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
  }
};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint8_t PatternByte(uint64_t seed, uint64_t offset) {
  const uint64_t word = Mix(seed * 0x100000001B3ull ^ (offset / 8));
  return static_cast<uint8_t>(word >> (8 * (offset % 8)));
}

void FillPattern(uint8_t* p, uint64_t length, uint64_t seed, uint64_t first_offset) {
  uint64_t i = 0;
  // Byte by byte up to a word boundary of the pattern, then whole words.
  for (; i < length && (first_offset + i) % 8 != 0; ++i) p[i] = PatternByte(seed, first_offset + i);
  for (; i + 8 <= length; i += 8) {
    const uint64_t word = Mix(seed * 0x100000001B3ull ^ ((first_offset + i) / 8));
    std::memcpy(p + i, &word, 8);
  }
  for (; i < length; ++i) p[i] = PatternByte(seed, first_offset + i);
}

int64_t FindPatternMismatch(const uint8_t* p, uint64_t length, uint64_t seed,
                            uint64_t first_offset) {
  for (uint64_t i = 0; i < length; ++i) {
    if (p[i] != PatternByte(seed, first_offset + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

TransferEngineOptions TestEngineOptions(const std::string& name, const std::string& metadata_uri,
                                        std::vector<std::string> transports) {
  TransferEngineOptions o;
  o.segment_name = name;
  o.metadata_uri = metadata_uri;
  o.transports = std::move(transports);
  o.default_timeout = std::chrono::seconds(10);
  o.tcp.listen_address = "127.0.0.1";
  o.rdma.listen_address = "127.0.0.1";
  o.load_gpu_runtimes = false;
  return o;
}

// ---------------------------------------------------------------------------------------------

PeerProcess::PeerProcess(PeerOptions options) : options_(std::move(options)) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
  std::vector<std::string> args = {"/proc/self/exe", "--transfer-peer",
                                   "--name",         options_.name,
                                   "--metadata",     options_.metadata_uri,
                                   "--transports",   options_.transports,
                                   "--bytes",        std::to_string(options_.bytes),
                                   "--seed",         std::to_string(options_.seed),
                                   "--managed",      options_.managed ? "1" : "0"};
  kvgate::testing::ChildStdio stdio;
  stdio.stdin_fd = in[0];
  stdio.stdout_fd = out[1];
  pid_ = kvgate::testing::SpawnChild(std::move(args), stdio);
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
}

PeerProcess::~PeerProcess() {
  if (to_child_ >= 0) close(to_child_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
  if (from_child_ >= 0) close(from_child_);
}

absl::StatusOr<std::string> PeerProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("peer: no reply in time");
    pollfd p{from_child_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(from_child_, buf, sizeof(buf));
    if (n <= 0) return absl::UnavailableError("peer: exited");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

bool PeerProcess::WaitReady(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return false;
  auto line = ReadLine(timeout);
  if (!line.ok()) return false;
  std::vector<std::string> parts = absl::StrSplit(*line, ' ');
  return parts.size() == 3 && parts[0] == "ready" && common::ParseUint64(parts[1], &addr_) &&
         common::ParseUint64(parts[2], &len_);
}

absl::StatusOr<std::string> PeerProcess::Command(const std::string& line,
                                                 std::chrono::milliseconds timeout) {
  const std::string msg = line + "\n";
  if (write(to_child_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) {
    return absl::UnavailableError("peer: cannot write command");
  }
  return ReadLine(timeout);
}

absl::StatusOr<uint32_t> PeerProcess::Crc(uint64_t addr, uint64_t len) {
  auto reply = Command(common::StrCat("crc ", addr, " ", len));
  if (!reply.ok()) return reply.status();
  uint64_t v = 0;
  if (reply->rfind("crc ", 0) != 0 || !common::ParseUint64(reply->substr(4), &v)) {
    return absl::InternalError("peer: bad crc reply: " + *reply);
  }
  return static_cast<uint32_t>(v);
}

void PeerProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

bool PeerProcess::Stop() {
  Signal(SIGSTOP);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string pid, comm, state;
    stat >> pid >> comm >> state;  // comm is "(exe)": no spaces for this binary.
    if (state == "T" || state == "t") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

int PeerProcess::Wait() {
  if (pid_ <= 0) return -1;
  const int code = kvgate::testing::ReapChild(pid_);
  pid_ = -1;
  return code;
}

// ---------------------------------------------------------------------------------------------

int RunPeer(int argc, char** argv) {
  common::InitLogging();  // stderr: stdout carries the replies.
  std::map<std::string, std::string> args;
  for (int i = 2; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  uint64_t bytes = 0, seed = 0, managed = 1;
  common::ParseUint64(args["--bytes"], &bytes);
  common::ParseUint64(args["--seed"], &seed);
  common::ParseUint64(args["--managed"], &managed);
  std::vector<std::string> transports = absl::StrSplit(args["--transports"], ',');
  auto engine = TransferEngine::Create(
      TestEngineOptions(args["--name"], args["--metadata"], std::move(transports)));
  if (!engine.ok()) {
    std::cerr << "peer: " << engine.status() << std::endl;
    return 1;
  }
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  auto allocate = [&](uint64_t n) -> absl::StatusOr<uint8_t*> {
    if (managed != 0) {
      auto p = (*engine)->AllocateManagedMemory(n);
      if (!p.ok()) return p.status();
      IgnoreBufferAccesses ignore;
      FillPattern(static_cast<uint8_t*>(*p), n, seed);
      return static_cast<uint8_t*>(*p);
    }
    owned.push_back(std::make_unique<uint8_t[]>(n));
    {
      IgnoreBufferAccesses ignore;
      FillPattern(owned.back().get(), n, seed);
    }
    if (auto st = (*engine)->RegisterMemory(owned.back().get(), n); !st.ok()) return st;
    return owned.back().get();
  };
  auto main_buffer = allocate(bytes);
  if (!main_buffer.ok()) {
    std::cerr << "peer: " << main_buffer.status() << std::endl;
    return 1;
  }
  std::cout << "ready " << reinterpret_cast<uint64_t>(*main_buffer) << " " << bytes << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    uint64_t a = 0, b = 0;
    if (w.size() == 3 && w[0] == "crc" && common::ParseUint64(w[1], &a) &&
        common::ParseUint64(w[2], &b)) {
      uint32_t crc = 0;
      {
        IgnoreBufferAccesses ignore;
        crc = Crc32c(0, reinterpret_cast<const void*>(a), b);
      }
      std::cout << "crc " << crc << std::endl;
    } else if (w.size() == 2 && w[0] == "register" && common::ParseUint64(w[1], &a)) {
      auto p = allocate(a);
      if (p.ok()) {
        std::cout << "buffer " << reinterpret_cast<uint64_t>(*p) << std::endl;
      } else {
        std::cout << "error " << p.status().message() << std::endl;
      }
    } else if (w.size() == 2 && w[0] == "unregister" && common::ParseUint64(w[1], &a)) {
      auto st = (*engine)->UnregisterMemory(reinterpret_cast<void*>(a));
      std::cout << (st.ok() ? std::string("ok") : "error " + std::string(st.message()))
                << std::endl;
    } else if (line == "quit") {
      break;
    } else {
      std::cout << "error unknown command" << std::endl;
    }
  }
  return 0;
}

}  // namespace kvgate::transfer::testing
