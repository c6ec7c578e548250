// File: router/discovery/dns_client.h
// The DNS a worker-discovery loop needs (RFC 1035, RFC 2782): one query for A, AAAA or SRV
// records of a name, sent over UDP to one server — and again over TCP when the answer is
// truncated (RFC 1035 4.2.2, RFC 7766) — and its answer decoded: answers (CNAMEs included)
// and the additional section (a headless Kubernetes Service's SRV answer carries its targets'
// A records there), with name compression. Names are queried as given (fully qualified: no
// search domains). Which answer records belong to the name asked is the caller's to check
// (OwnedBy). Encoding and decoding are pure; Query() runs on the caller's io_context.
// Thread-compatible.
#pragma once

#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "net/asio.h"

namespace kvgate::router::dns {

using udp = boost::asio::ip::udp;

enum class RecordType : uint16_t { kA = 1, kCname = 5, kAaaa = 28, kSrv = 33 };

struct Record {
  RecordType type = RecordType::kA;
  std::string name;     // the owner name, lower case, without the trailing dot
  std::string address;  // A / AAAA: the address as text
  std::string target;   // SRV: the target host; CNAME: the canonical name
  uint16_t port = 0;    // SRV
  uint16_t priority = 0;
  uint16_t weight = 0;
  uint32_t ttl = 0;
};

struct Response {
  uint16_t id = 0;
  int rcode = 0;  // 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, ...
  bool truncated = false;
  std::string question;            // the first question's name, lower case, no trailing dot
  std::vector<Record> answers;     // of the types above; others are skipped
  std::vector<Record> additional;  // likewise
};

inline constexpr int kNxDomain = 3;

/// The query packet. @return kInvalidArgument for a name that is not a valid DNS name.
absl::StatusOr<std::string> EncodeQuery(uint16_t id, std::string_view name, RecordType type);

/// Decodes a response packet. @return kInvalidArgument for a malformed packet (truncated
/// records, compression loops, labels over 63 bytes, names over 255).
absl::StatusOr<Response> DecodeResponse(std::string_view packet);

/// The records of `answers` of type `type` that belong to `name`: owned by it, or by a name
/// a CNAME chain from it leads to (at most 8 links). Others — records for names nobody asked
/// about, which a hostile or broken server may add — are left out.
std::vector<Record> OwnedBy(const std::vector<Record>& answers, std::string_view name,
                            RecordType type);

/// Sends one query to `server` and waits up to `timeout` for its answer (a reply with another
/// id, another question or from another address is ignored). A truncated (TC) answer is asked
/// again over TCP to the same server, within what is left of `timeout`.
/// @return kDeadlineExceeded without an answer, kUnavailable when a socket fails, the
///         DecodeResponse() error for a malformed one.
net::awaitable<absl::StatusOr<Response>> Query(net::io_context& ioc, const udp::endpoint& server,
                                               std::string_view name, RecordType type,
                                               std::chrono::milliseconds timeout);

/// "IP:PORT" or "IP" (port 53); empty: the first nameserver of /etc/resolv.conf.
absl::StatusOr<udp::endpoint> ServerEndpoint(std::string_view server);

}  // namespace kvgate::router::dns
