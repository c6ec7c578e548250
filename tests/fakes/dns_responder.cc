#include "tests/fakes/dns_responder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>

namespace kvgate::testing {
namespace {

void U16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

void U32(std::string& out, uint32_t v) {
  U16(out, static_cast<uint16_t>(v >> 16));
  U16(out, static_cast<uint16_t>(v & 0xffff));
}

void Name(std::string& out, const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<char>(dot - start));
    out.append(name, start, dot - start);
    start = dot + 1;
  }
  out.push_back('\0');
}

void ARecord(std::string& out, const std::string& name, const std::string& address) {
  Name(out, name);
  U16(out, 1);
  U16(out, 1);
  U32(out, 5);
  U16(out, 4);
  in_addr a{};
  inet_pton(AF_INET, address.c_str(), &a);
  out.append(reinterpret_cast<const char*>(&a), 4);
}

}  // namespace

DnsResponder::DnsResponder() {
  // UDP on a port the kernel picks, and TCP on the same number (retried in the rare case that
  // number is taken for TCP).
  for (int attempt = 0; attempt < 50; ++attempt) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    tcp_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::listen(tcp_fd_, 16) == 0) {
      break;
    }
    ::close(tcp_fd_);
    ::close(fd_);
    tcp_fd_ = fd_ = -1;
  }
  thread_ = std::thread([this] { Serve(); });
}

DnsResponder::~DnsResponder() {
  stop_ = true;
  thread_.join();
  ::close(fd_);
  if (tcp_fd_ >= 0) ::close(tcp_fd_);
}

std::string DnsResponder::address() const { return "127.0.0.1:" + std::to_string(port_); }

void DnsResponder::SetA(const std::string& name, std::vector<std::string> addresses) {
  common::MutexLock lock(&mu_);
  a_[name] = std::move(addresses);
}

void DnsResponder::SetSrv(const std::string& name, std::vector<DnsSrv> records) {
  common::MutexLock lock(&mu_);
  srv_[name] = std::move(records);
}

void DnsResponder::SetRcode(const std::string& name, int rcode) {
  common::MutexLock lock(&mu_);
  rcode_[name] = rcode;
}

void DnsResponder::SetCname(const std::string& name, const std::string& target) {
  common::MutexLock lock(&mu_);
  cname_[name] = target;
}

void DnsResponder::SetForeignA(const std::string& name, const std::string& owner,
                               std::vector<std::string> addresses) {
  common::MutexLock lock(&mu_);
  foreign_[name] = {owner, std::move(addresses)};
}

void DnsResponder::Serve() {
  char buf[1500];
  while (!stop_) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {tcp_fd_, POLLIN, 0}};
    if (::poll(p, tcp_fd_ >= 0 ? 2 : 1, 20) <= 0) continue;
    if (p[1].revents & POLLIN) {
      const int conn = ::accept(tcp_fd_, nullptr, nullptr);
      if (conn >= 0) ServeTcp(conn);
    }
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    const ssize_t n =
        ::recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 12) continue;
    ++queries_;
    const std::string reply = Answer(std::string(buf, static_cast<size_t>(n)), truncate_udp_);
    if (reply.empty()) continue;
    ::sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

// One query on an accepted TCP connection: a two-byte length, then the message, each way.
void DnsResponder::ServeTcp(int conn) {
  auto read_all = [conn](char* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return false;
      const ssize_t r = ::recv(conn, out + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  unsigned char len[2];
  std::string query;
  if (read_all(reinterpret_cast<char*>(len), 2)) {
    query.resize((size_t{len[0]} << 8) | len[1]);
    if (query.size() >= 12 && read_all(query.data(), query.size())) {
      ++queries_;
      ++tcp_queries_;
      std::string reply = Answer(query, /*truncate=*/false);
      std::string framed;
      U16(framed, static_cast<uint16_t>(reply.size()));
      framed += reply;
      size_t sent = 0;
      while (sent < framed.size()) {
        const ssize_t w = ::send(conn, framed.data() + sent, framed.size() - sent, MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += static_cast<size_t>(w);
      }
    }
  }
  ::close(conn);
}

std::string DnsResponder::Answer(const std::string& q, bool truncate) {
  // The question: uncompressed labels, then type and class.
  std::string name;
  size_t at = 12;
  while (at < q.size() && q[at] != 0) {
    const size_t l = static_cast<uint8_t>(q[at]);
    if (!name.empty()) name.push_back('.');
    for (size_t i = 0; i < l && at + 1 + i < q.size(); ++i) {
      name.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(q[at + 1 + i]))));
    }
    at += 1 + l;
  }
  if (at + 5 > q.size()) return "";
  const uint16_t type = static_cast<uint16_t>((static_cast<uint8_t>(q[at + 1]) << 8) |
                                              static_cast<uint8_t>(q[at + 2]));
  const std::string question = q.substr(12, at + 5 - 12);

  common::MutexLock lock(&mu_);
  int rcode = 0;
  if (auto it = rcode_.find(name); it != rcode_.end()) rcode = it->second;
  const bool known = a_.count(name) > 0 || srv_.count(name) > 0 || cname_.count(name) > 0;
  if (rcode == 0 && !known) rcode = 3;  // NXDOMAIN
  std::string answers, additional;
  uint16_t n_answers = 0, n_additional = 0;
  if (rcode == 0 && type == 1) {
    std::string owner = name;
    if (auto c = cname_.find(name); c != cname_.end()) {
      std::string rdata;
      Name(rdata, c->second);
      Name(answers, name);
      U16(answers, 5);
      U16(answers, 1);
      U32(answers, 5);
      U16(answers, static_cast<uint16_t>(rdata.size()));
      answers += rdata;
      ++n_answers;
      owner = c->second;
    }
    if (auto it = a_.find(owner); it != a_.end()) {
      for (const auto& a : it->second) {
        ARecord(answers, owner, a);
        ++n_answers;
      }
    }
    if (auto f = foreign_.find(name); f != foreign_.end()) {
      for (const auto& a : f->second.second) {
        ARecord(answers, f->second.first, a);
        ++n_answers;
      }
    }
  } else if (rcode == 0 && type == 33) {
    if (auto it = srv_.find(name); it != srv_.end()) {
      for (const auto& s : it->second) {
        std::string rdata;
        U16(rdata, 0);
        U16(rdata, 10);
        U16(rdata, s.port);
        Name(rdata, s.target);
        Name(answers, name);
        U16(answers, 33);
        U16(answers, 1);
        U32(answers, 5);
        U16(answers, static_cast<uint16_t>(rdata.size()));
        answers += rdata;
        ++n_answers;
        if (auto t = a_.find(s.target); t != a_.end()) {
          for (const auto& a : t->second) {
            ARecord(additional, s.target, a);
            ++n_additional;
          }
        }
      }
    }
  }
  if (truncate) {  // what a server sends when the answer does not fit: TC, and no records
    answers.clear();
    additional.clear();
    n_answers = n_additional = 0;
  }
  std::string out = q.substr(0, 2);  // the query's id
  // response, RD, RA (and TC)
  U16(out, static_cast<uint16_t>(0x8180 | (truncate ? 0x0200 : 0) | (rcode & 0xf)));
  U16(out, 1);
  U16(out, n_answers);
  U16(out, 0);
  U16(out, n_additional);
  out += question;
  out += answers;
  out += additional;
  return out;
}

}  // namespace kvgate::testing
