#include "tests/integration/test_util.h"

#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Declared here: Debian's gcc ships the sanitizer runtimes without their interface headers.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#define KVGATE_SANITIZER_ALLOCATOR 1
#endif

namespace kvgate::testing {

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

uint64_t ProcessRssBytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

uint64_t HeapInUseBytes() {
#ifdef KVGATE_SANITIZER_ALLOCATOR
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

bool UnderSanitizerAllocator() {
#ifdef KVGATE_SANITIZER_ALLOCATOR
  return true;
#else
  return false;
#endif
}

std::string WriteTempFile(const std::string& name, const std::string& content) {
  char tmpl[] = "/tmp/kvgate-test-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  const std::string path = std::string(dir) + "/" + name;
  std::ofstream(path) << content;
  return path;
}

std::string WriteSecretFile(const std::string& name, const std::string& content) {
  const std::string path = WriteTempFile(name, content);
  ::chmod(path.c_str(), 0600);
  return path;
}

}  // namespace kvgate::testing
