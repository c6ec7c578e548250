#include "router/discovery/dns_client.h"

#include <algorithm>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace kvgate::router::dns {
namespace {

constexpr size_t kHeaderBytes = 12;
constexpr size_t kMaxName = 255;

using SteadyDeadline = std::chrono::steady_clock::time_point;

// `name` as answers spell owner names: lower case, no trailing dot.
std::string LowerName(std::string_view name) {
  if (name.ends_with('.')) name.remove_suffix(1);
  std::string out(name);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

absl::Status Malformed(std::string_view why) {
  return absl::InvalidArgumentError(common::StrCat("malformed DNS response: ", why));
}

uint16_t U16(std::string_view p, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(p[at]) << 8) |
                               static_cast<uint8_t>(p[at + 1]));
}

uint32_t U32(std::string_view p, size_t at) {
  return (uint32_t{U16(p, at)} << 16) | U16(p, at + 2);
}

void PutU16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

// Reads the (possibly compressed) name at `*at`, leaving `*at` after it in the record.
absl::StatusOr<std::string> ReadName(std::string_view p, size_t* at) {
  std::string name;
  size_t pos = *at;
  bool jumped = false;
  int jumps = 0;
  for (;;) {
    if (pos >= p.size()) return Malformed("name runs past the packet");
    const uint8_t len = static_cast<uint8_t>(p[pos]);
    if ((len & 0xc0) == 0xc0) {  // a pointer to an earlier name
      if (pos + 1 >= p.size()) return Malformed("truncated name pointer");
      if (++jumps > 32) return Malformed("name compression loop");
      const size_t target = ((len & 0x3f) << 8) | static_cast<uint8_t>(p[pos + 1]);
      if (!jumped) *at = pos + 2;
      jumped = true;
      pos = target;
      continue;
    }
    if ((len & 0xc0) != 0) return Malformed("unknown label type");
    if (len == 0) {
      if (!jumped) *at = pos + 1;
      break;
    }
    if (pos + 1 + len > p.size()) return Malformed("label runs past the packet");
    if (!name.empty()) name.push_back('.');
    for (size_t i = 0; i < len; ++i) {
      const char c = p[pos + 1 + i];
      name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    if (name.size() > kMaxName) return Malformed("name longer than 255 bytes");
    pos += 1 + len;
  }
  return name;
}

// Reads `count` resource records from `*at`, keeping those of the known types.
absl::Status ReadRecords(std::string_view p, size_t* at, uint16_t count, std::vector<Record>* out) {
  for (uint16_t i = 0; i < count; ++i) {
    auto name = ReadName(p, at);
    if (!name.ok()) return name.status();
    if (*at + 10 > p.size()) return Malformed("truncated record");
    const uint16_t type = U16(p, *at);
    const uint32_t ttl = U32(p, *at + 4);
    const uint16_t length = U16(p, *at + 8);
    const size_t rdata = *at + 10;
    if (rdata + length > p.size()) return Malformed("record data runs past the packet");
    *at = rdata + length;
    Record r;
    r.name = *std::move(name);
    r.ttl = ttl;
    if (type == static_cast<uint16_t>(RecordType::kA)) {
      if (length != 4) return Malformed("A record of the wrong length");
      net::ip::address_v4::bytes_type b;
      for (size_t k = 0; k < 4; ++k) b[k] = static_cast<uint8_t>(p[rdata + k]);
      r.type = RecordType::kA;
      r.address = net::ip::address_v4(b).to_string();
    } else if (type == static_cast<uint16_t>(RecordType::kAaaa)) {
      if (length != 16) return Malformed("AAAA record of the wrong length");
      net::ip::address_v6::bytes_type b;
      for (size_t k = 0; k < 16; ++k) b[k] = static_cast<uint8_t>(p[rdata + k]);
      r.type = RecordType::kAaaa;
      r.address = net::ip::address_v6(b).to_string();
    } else if (type == static_cast<uint16_t>(RecordType::kSrv)) {
      if (length < 7) return Malformed("SRV record too short");
      r.type = RecordType::kSrv;
      r.priority = U16(p, rdata);
      r.weight = U16(p, rdata + 2);
      r.port = U16(p, rdata + 4);
      size_t target_at = rdata + 6;
      auto target = ReadName(p.substr(0, rdata + length), &target_at);
      if (!target.ok()) return target.status();
      r.target = *std::move(target);
    } else if (type == static_cast<uint16_t>(RecordType::kCname)) {
      r.type = RecordType::kCname;
      size_t target_at = rdata;
      auto target = ReadName(p.substr(0, rdata + length), &target_at);
      if (!target.ok()) return target.status();
      r.target = *std::move(target);
    } else {
      continue;  // OPT, TXT, ...: not needed
    }
    out->push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeQuery(uint16_t id, std::string_view name, RecordType type) {
  if (name.ends_with('.')) name.remove_suffix(1);
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(common::StrCat("'", name, "' is not a DNS name"));
  }
  std::string out;
  out.reserve(kHeaderBytes + name.size() + 6);
  PutU16(out, id);
  PutU16(out, 0x0100);  // a standard query, recursion desired
  PutU16(out, 1);       // one question
  PutU16(out, 0);
  PutU16(out, 0);
  PutU16(out, 0);
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const size_t len = dot - start;
    if (len == 0 || len > 63) {
      return absl::InvalidArgumentError(common::StrCat("'", name, "' is not a DNS name"));
    }
    out.push_back(static_cast<char>(len));
    out.append(name.substr(start, len));
    start = dot + 1;
  }
  out.push_back('\0');
  PutU16(out, static_cast<uint16_t>(type));
  PutU16(out, 1);  // class IN
  return out;
}

absl::StatusOr<Response> DecodeResponse(std::string_view p) {
  if (p.size() < kHeaderBytes) return Malformed("shorter than its header");
  Response r;
  r.id = U16(p, 0);
  const uint16_t flags = U16(p, 2);
  if ((flags & 0x8000) == 0) return Malformed("not a response");
  r.truncated = (flags & 0x0200) != 0;
  r.rcode = flags & 0x000f;
  const uint16_t questions = U16(p, 4), answers = U16(p, 6), authority = U16(p, 8),
                 additional = U16(p, 10);
  size_t at = kHeaderBytes;
  for (uint16_t i = 0; i < questions; ++i) {
    auto name = ReadName(p, &at);
    if (!name.ok()) return name.status();
    if (i == 0) r.question = *std::move(name);
    if (at + 4 > p.size()) return Malformed("truncated question");
    at += 4;
  }
  if (auto s = ReadRecords(p, &at, answers, &r.answers); !s.ok()) return s;
  std::vector<Record> ignored;
  if (auto s = ReadRecords(p, &at, authority, &ignored); !s.ok()) return s;
  if (auto s = ReadRecords(p, &at, additional, &r.additional); !s.ok()) return s;
  return r;
}

std::vector<Record> OwnedBy(const std::vector<Record>& answers, std::string_view name,
                            RecordType type) {
  std::vector<std::string> owners = {LowerName(name)};
  // Follow CNAMEs from the name asked; a bounded walk, so a loop ends.
  for (int link = 0; link < 8; ++link) {
    bool grew = false;
    for (const Record& r : answers) {
      if (r.type != RecordType::kCname || r.name != owners.back()) continue;
      if (std::find(owners.begin(), owners.end(), r.target) != owners.end()) break;
      owners.push_back(r.target);
      grew = true;
      break;
    }
    if (!grew) break;
  }
  std::vector<Record> out;
  for (const Record& r : answers) {
    if (r.type == type && std::find(owners.begin(), owners.end(), r.name) != owners.end()) {
      out.push_back(r);
    }
  }
  return out;
}

namespace {

// The same query over TCP (RFC 1035 4.2.2: each message after a two-byte length), for an
// answer too large for UDP. `deadline` bounds connect, write and read together.
net::awaitable<absl::StatusOr<Response>> QueryTcp(net::io_context& ioc, const udp::endpoint& server,
                                                  const std::string& query, uint16_t id,
                                                  std::string_view name, SteadyDeadline deadline) {
  tcp::socket socket(ioc);
  net::steady_timer timer(ioc);
  timer.expires_at(deadline);
  bool expired = false;
  timer.async_wait([&socket, &expired](const error_code& e) {
    if (e) return;
    expired = true;
    error_code ignored;
    socket.close(ignored);
  });
  const tcp::endpoint to(server.address(), server.port());
  auto fail = [&](std::string_view what, const error_code& ec) -> absl::Status {
    if (expired) {
      return absl::DeadlineExceededError(
          common::StrCat("no DNS answer over TCP for ", name, " in time"));
    }
    return absl::UnavailableError(common::StrCat("DNS over TCP: ", what, ": ", ec.message()));
  };
  auto [cec] = co_await socket.async_connect(to, kNoThrow);
  if (cec) {
    timer.cancel();
    co_return fail("connect", cec);
  }
  std::string framed;
  PutU16(framed, static_cast<uint16_t>(query.size()));
  framed += query;
  auto [wec, wn] = co_await net::async_write(socket, net::buffer(framed), kNoThrow);
  if (wec) {
    timer.cancel();
    co_return fail("write", wec);
  }
  uint8_t len[2];
  auto [lec, ln] = co_await net::async_read(socket, net::buffer(len), kNoThrow);
  if (lec) {
    timer.cancel();
    co_return fail("read", lec);
  }
  std::string answer((size_t{len[0]} << 8) | len[1], '\0');
  auto [bec, bn] = co_await net::async_read(socket, net::buffer(answer), kNoThrow);
  timer.cancel();
  if (bec) co_return fail("read", bec);
  auto response = DecodeResponse(answer);
  if (response.ok() && (response->id != id || response->question != LowerName(name))) {
    co_return Malformed("the TCP answer is for another query");
  }
  co_return response;
}

}  // namespace

net::awaitable<absl::StatusOr<Response>> Query(net::io_context& ioc, const udp::endpoint& server,
                                               std::string_view name, RecordType type,
                                               std::chrono::milliseconds timeout) {
  static thread_local uint16_t next_id = static_cast<uint16_t>(::getpid());
  const uint16_t id = ++next_id;
  auto query = EncodeQuery(id, name, type);
  if (!query.ok()) co_return query.status();
  const SteadyDeadline deadline = std::chrono::steady_clock::now() + timeout;
  udp::socket socket(ioc);
  error_code ec;
  socket.open(server.protocol(), ec);
  if (!ec) socket.connect(server, ec);  // replies from other addresses are then filtered out
  if (ec) {
    co_return absl::UnavailableError(
        common::StrCat("DNS socket to ", server.address().to_string(), ": ", ec.message()));
  }
  socket.send(net::buffer(*query), 0, ec);
  if (ec) co_return absl::UnavailableError(common::StrCat("DNS send: ", ec.message()));
  net::steady_timer timer(ioc);
  timer.expires_at(deadline);
  bool expired = false;
  timer.async_wait([&socket, &expired](const error_code& e) {
    if (e) return;
    expired = true;
    error_code ignored;
    socket.cancel(ignored);
  });
  const std::string asked = LowerName(name);
  char buf[4096];
  for (;;) {
    auto [rec, n] = co_await socket.async_receive(net::buffer(buf), kNoThrow);
    if (expired) {
      co_return absl::DeadlineExceededError(
          common::StrCat("no DNS answer for ", name, " within ", timeout.count(), " ms"));
    }
    if (rec) {
      timer.cancel();
      co_return absl::UnavailableError(common::StrCat("DNS receive: ", rec.message()));
    }
    auto response = DecodeResponse(std::string_view(buf, n));
    // A late answer to an earlier query, or one to a question not asked.
    if (response.ok() && (response->id != id || response->question != asked)) continue;
    timer.cancel();
    // Truncated: what came is a part, maybe with records left out at random; ask over TCP.
    if (response.ok() && response->truncated) {
      co_return co_await QueryTcp(ioc, server, *query, id, name, deadline);
    }
    co_return response;
  }
}

absl::StatusOr<udp::endpoint> ServerEndpoint(std::string_view server) {
  std::string host(server);
  uint16_t port = 53;
  if (host.empty()) {
    std::ifstream in("/etc/resolv.conf");
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string key, value;
      if (words >> key >> value && key == "nameserver") {
        host = value;
        break;
      }
    }
    if (host.empty()) return absl::NotFoundError("no nameserver in /etc/resolv.conf");
  } else if (const size_t colon = host.rfind(':');
             colon != std::string::npos && host.find(':') == colon) {  // IPv4:port
    uint64_t p = 0;
    if (!common::ParseUint64(host.substr(colon + 1), &p) || p == 0 || p > 65535) {
      return absl::InvalidArgumentError(common::StrCat("'", server, "': bad port"));
    }
    port = static_cast<uint16_t>(p);
    host.resize(colon);
  } else if (host.starts_with('[')) {  // [IPv6]:port
    const size_t close = host.find(']');
    uint64_t p = 0;
    if (close == std::string::npos || close + 1 >= host.size() || host[close + 1] != ':' ||
        !common::ParseUint64(host.substr(close + 2), &p) || p == 0 || p > 65535) {
      return absl::InvalidArgumentError(common::StrCat("'", server, "': expected [IPv6]:PORT"));
    }
    port = static_cast<uint16_t>(p);
    host = host.substr(1, close - 1);
  }
  error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(common::StrCat("'", host, "' is not an IP address"));
  return udp::endpoint(address, port);
}

}  // namespace kvgate::router::dns
