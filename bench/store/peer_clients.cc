// File: bench/store/peer_clients.cc
// Redis (RESP2) and memcached (text protocol) clients over blocking POSIX sockets: batches are
// sent with sendmsg over iovecs pointing at the caller's values, replies are parsed from a
// buffered reader, and large payloads are received directly into the caller's buffers.
#include "bench/store/peer_clients.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvgate::store::bench {
namespace {

constexpr size_t kMaxIov = 1024;           // Linux UIO_MAXIOV: sendmsg rejects more.
constexpr size_t kReadBuffer = 64 * 1024;  // Also the longest reply line accepted.
constexpr size_t kDirectRead = 16 * 1024;  // Payload tails at least this big skip the buffer.
constexpr std::string_view kCrlf = "\r\n";

iovec Iov(std::string_view s) { return {const_cast<char*>(s.data()), s.size()}; }

bool ParseInt(std::string_view s, int64_t* v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// One blocking connection with a buffered reader for reply lines.
class Conn {
 public:
  Conn(const char* name, int fd) : name_(name), fd_(fd), buf_(kReadBuffer) {}
  ~Conn() { close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Consumes `iov` (entries are advanced past what was sent).
  absl::Status SendAll(std::vector<iovec>& iov) {
    size_t i = 0;
    while (i < iov.size()) {
      msghdr msg{};
      msg.msg_iov = &iov[i];
      msg.msg_iovlen = std::min(iov.size() - i, kMaxIov);
      const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError("send", n);
      }
      size_t left = static_cast<size_t>(n);
      while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
      if (left > 0) {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Send(std::string_view data) {
    std::vector<iovec> iov{Iov(data)};
    return SendAll(iov);
  }

  // The next reply line, without its "\r\n".
  absl::Status ReadLine(std::string* line) {
    size_t scanned = 0;  // Relative to begin_, which Fill() may move.
    while (true) {
      const char* first = buf_.data() + begin_;
      const char* last = buf_.data() + end_;
      const char* nl = std::find(first + scanned, last, '\n');
      if (nl != last) {
        if (nl == first || nl[-1] != '\r') {
          return absl::InternalError(absl::StrCat(name_, ": reply line not ended by CRLF"));
        }
        line->assign(first, nl - 1);
        begin_ += nl + 1 - first;
        return absl::OkStatus();
      }
      scanned = end_ - begin_;
      KVGATE_RETURN_IF_ERROR(Fill());
    }
  }

  // Reads a `len`-byte value and its CRLF into `out`, or discards it (folding kDataLoss into
  // *result) when its size differs, so that the rest of the reply can still be parsed.
  absl::Status ReadValue(const std::string& key, int64_t len, absl::Span<uint8_t> out,
                         absl::Status* result) {
    const bool fits = static_cast<size_t>(len) == out.size();
    if (!fits) {
      result->Update(absl::DataLossError(
          absl::StrCat(name_, ": key ", key, " has ", len, " bytes, expected ", out.size())));
    }
    KVGATE_RETURN_IF_ERROR(
        ReadExact(fits ? reinterpret_cast<char*>(out.data()) : nullptr, static_cast<size_t>(len)));
    char crlf[2];
    KVGATE_RETURN_IF_ERROR(ReadExact(crlf, 2));
    if (std::string_view(crlf, 2) != kCrlf) {
      return absl::InternalError(absl::StrCat(name_, ": value of ", key, " not ended by CRLF"));
    }
    return absl::OkStatus();
  }

 private:
  // Reads exactly n bytes into dst; dst == nullptr discards them.
  absl::Status ReadExact(char* dst, size_t n) {
    while (n > 0) {
      if (begin_ == end_ && dst != nullptr && n >= kDirectRead) {
        const ssize_t got = recv(fd_, dst, n, MSG_WAITALL);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return IoError("recv", got);
        dst += got;
        n -= static_cast<size_t>(got);
        continue;
      }
      if (begin_ == end_) KVGATE_RETURN_IF_ERROR(Fill());
      const size_t take = std::min(n, end_ - begin_);
      if (dst != nullptr) {
        std::memcpy(dst, buf_.data() + begin_, take);
        dst += take;
      }
      begin_ += take;
      n -= take;
    }
    return absl::OkStatus();
  }

  absl::Status Fill() {
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      return absl::InternalError(absl::StrCat(name_, ": reply line over ", kReadBuffer, " bytes"));
    }
    while (true) {
      const ssize_t got = recv(fd_, buf_.data() + end_, buf_.size() - end_, 0);
      if (got > 0) {
        end_ += static_cast<size_t>(got);
        return absl::OkStatus();
      }
      if (got < 0 && errno == EINTR) continue;
      return IoError("recv", got);
    }
  }

  // For a failed send/recv that returned `got`; errno is read only when got < 0.
  absl::Status IoError(const char* op, ssize_t got) const {
    if (got == 0) return absl::UnavailableError(absl::StrCat(name_, ": connection closed"));
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {  // SO_RCVTIMEO / SO_SNDTIMEO expired.
      return absl::DeadlineExceededError(absl::StrCat(name_, ": ", op, " timed out"));
    }
    return absl::UnavailableError(absl::StrCat(name_, ": ", op, ": ", std::strerror(err)));
  }

  const char* name_;  // Peer name, first in every error message.
  int fd_;
  std::vector<char> buf_;
  size_t begin_ = 0;  // Unread bytes are buf_[begin_, end_).
  size_t end_ = 0;
};

absl::StatusOr<int> Dial(const char* name, const std::string& host, uint16_t port) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": cannot connect to ", where, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
    } else if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": cannot connect to ", where, ": ", std::strerror(err)));
  }
  const int one = 1;
  const timeval timeout{30, 0};
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout)) != 0) {
    err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat(name, ": setsockopt: ", std::strerror(err)));
  }
  return fd;
}

absl::Status CheckSizes(const char* name, size_t keys, size_t values) {
  if (keys == values) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": ", keys, " keys but ", values, " values"));
}

// heads[ends[i-1], ends[i]) precedes values[i]; each value is followed by CRLF.
std::vector<iovec> Interleave(const std::string& heads, const std::vector<size_t>& ends,
                              absl::Span<const std::string_view> values) {
  std::vector<iovec> iov;
  iov.reserve(3 * values.size());
  size_t start = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    iov.push_back(Iov(std::string_view(heads).substr(start, ends[i] - start)));
    iov.push_back(Iov(values[i]));
    iov.push_back(Iov(kCrlf));
    start = ends[i];
  }
  return iov;
}

class RedisPeer final : public KvPeer {
 public:
  explicit RedisPeer(int fd) : conn_(kName, fd) {}
  std::string_view Name() const override { return kName; }

  absl::Status PutBatch(absl::Span<const std::string> keys,
                        absl::Span<const std::string_view> values) override {
    KVGATE_RETURN_IF_ERROR(CheckSizes(kName, keys.size(), values.size()));
    // Pipelined SETs rather than one MSET: Redis reads each large argument straight into its
    // value then (redis-benchmark -P measures the same shape; MSET of 64 x 256 KiB was 3x slower).
    std::string heads;
    std::vector<size_t> ends;
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StrAppend(&heads, "*3\r\n$3\r\nSET\r\n$", keys[i].size(), "\r\n", keys[i], "\r\n$",
                      values[i].size(), "\r\n");
      ends.push_back(heads.size());
    }
    std::vector<iovec> iov = Interleave(heads, ends, values);
    KVGATE_RETURN_IF_ERROR(conn_.SendAll(iov));
    std::string line;
    for (size_t i = 0; i < keys.size(); ++i) {
      KVGATE_RETURN_IF_ERROR(conn_.ReadLine(&line));
      if (line != "+OK") return absl::InternalError(absl::StrCat("redis: SET failed: ", line));
    }
    return absl::OkStatus();
  }

  absl::Status GetBatch(absl::Span<const std::string> keys,
                        absl::Span<const absl::Span<uint8_t>> out) override {
    KVGATE_RETURN_IF_ERROR(CheckSizes(kName, keys.size(), out.size()));
    if (keys.empty()) return absl::OkStatus();
    std::string cmd;  // Pipelined GETs, as for puts.
    for (const std::string& key : keys)
      absl::StrAppend(&cmd, "*2\r\n$3\r\nGET\r\n$", key.size(), "\r\n", key, "\r\n");
    KVGATE_RETURN_IF_ERROR(conn_.Send(cmd));
    std::string line;
    // Misses and mismatches still drain the reply so the connection stays usable.
    absl::Status result;
    for (size_t i = 0; i < keys.size(); ++i) {
      KVGATE_RETURN_IF_ERROR(conn_.ReadLine(&line));
      int64_t len = 0;
      if (line.empty() || line[0] != '$' || !ParseInt(std::string_view(line).substr(1), &len)) {
        return absl::InternalError(absl::StrCat("redis: unexpected GET reply: ", line));
      }
      if (len < 0) {
        result.Update(absl::NotFoundError(absl::StrCat("redis: key ", keys[i], " not found")));
        continue;
      }
      KVGATE_RETURN_IF_ERROR(conn_.ReadValue(keys[i], len, out[i], &result));
    }
    return result;
  }

 private:
  static constexpr char kName[] = "redis";
  Conn conn_;
};

class MemcachedPeer final : public KvPeer {
 public:
  explicit MemcachedPeer(int fd) : conn_(kName, fd) {}
  std::string_view Name() const override { return kName; }

  absl::Status PutBatch(absl::Span<const std::string> keys,
                        absl::Span<const std::string_view> values) override {
    KVGATE_RETURN_IF_ERROR(CheckSizes(kName, keys.size(), values.size()));
    std::string heads;
    std::vector<size_t> ends;
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StrAppend(&heads, "set ", keys[i], " 0 0 ", values[i].size(), "\r\n");
      ends.push_back(heads.size());
    }
    std::vector<iovec> iov = Interleave(heads, ends, values);
    KVGATE_RETURN_IF_ERROR(conn_.SendAll(iov));
    absl::Status result;
    std::string line;
    for (size_t i = 0; i < keys.size(); ++i) {
      KVGATE_RETURN_IF_ERROR(conn_.ReadLine(&line));
      if (line != "STORED") {
        result.Update(
            absl::InternalError(absl::StrCat("memcached: set ", keys[i], " failed: ", line)));
      }
    }
    return result;
  }

  absl::Status GetBatch(absl::Span<const std::string> keys,
                        absl::Span<const absl::Span<uint8_t>> out) override {
    KVGATE_RETURN_IF_ERROR(CheckSizes(kName, keys.size(), out.size()));
    if (keys.empty()) return absl::OkStatus();
    std::string cmd = "get";
    for (const std::string& key : keys) absl::StrAppend(&cmd, " ", key);
    cmd += kCrlf;
    KVGATE_RETURN_IF_ERROR(conn_.Send(cmd));
    absl::Status result;
    const auto miss = [&](size_t i) {
      result.Update(absl::NotFoundError(absl::StrCat("memcached: key ", keys[i], " not found")));
    };
    // Hits come back in request order and misses are left out, so skipped keys were misses.
    size_t next = 0;
    std::string line;
    while (true) {
      KVGATE_RETURN_IF_ERROR(conn_.ReadLine(&line));
      if (line == "END") break;
      std::vector<std::string_view> f;
      for (size_t pos = 0; pos <= line.size();) {
        const size_t sp = std::min(line.find(' ', pos), line.size());
        f.push_back(std::string_view(line).substr(pos, sp - pos));
        pos = sp + 1;
      }
      int64_t len = 0;
      if (f.size() != 4 || f[0] != "VALUE" || !ParseInt(f[3], &len) || len < 0) {
        return absl::InternalError(absl::StrCat("memcached: unexpected get reply: ", line));
      }
      size_t j = next;
      while (j < keys.size() && keys[j] != f[1]) ++j;
      if (j == keys.size()) {
        return absl::InternalError(absl::StrCat("memcached: reply for unexpected key: ", line));
      }
      for (; next < j; ++next) miss(next);
      ++next;
      KVGATE_RETURN_IF_ERROR(conn_.ReadValue(keys[j], len, out[j], &result));
    }
    for (; next < keys.size(); ++next) miss(next);
    return result;
  }

 private:
  static constexpr char kName[] = "memcached";
  Conn conn_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvPeer>> ConnectRedis(const std::string& host, uint16_t port) {
  KVGATE_ASSIGN_OR_RETURN(const int fd, Dial("redis", host, port));
  return std::unique_ptr<KvPeer>(new RedisPeer(fd));
}

absl::StatusOr<std::unique_ptr<KvPeer>> ConnectMemcached(const std::string& host, uint16_t port) {
  KVGATE_ASSIGN_OR_RETURN(const int fd, Dial("memcached", host, port));
  return std::unique_ptr<KvPeer>(new MemcachedPeer(fd));
}

}  // namespace kvgate::store::bench
