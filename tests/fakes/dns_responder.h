// File: tests/fakes/dns_responder.h
// A DNS server for tests on 127.0.0.1 (UDP and TCP on one port, picked by the kernel): it
// answers A, AAAA and SRV questions from a table the test changes while it runs (records that
// come and go, SERVFAIL, NXDOMAIN), with SRV targets' A records in the additional section as a
// headless Kubernetes Service's are. It can also answer as a hostile or large zone would: with
// CNAMEs, with records for names nobody asked about, and truncated over UDP (TC set, no
// records) so that only TCP gives the whole answer. Its own encoder, independent of the
// router's. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace kvgate::testing {

struct DnsSrv {
  std::string target;
  uint16_t port = 0;
};

class DnsResponder {
 public:
  DnsResponder();
  ~DnsResponder();

  uint16_t port() const { return port_; }
  /// "127.0.0.1:<port>".
  std::string address() const;

  /// The A records of `name` (IPv4 text); an empty list answers NOERROR with no records.
  void SetA(const std::string& name, std::vector<std::string> addresses);
  /// The SRV records of `name`; each target's A records (SetA) go in the additional section.
  void SetSrv(const std::string& name, std::vector<DnsSrv> records);
  /// Answer every question about `name` with this rcode (2 SERVFAIL, 3 NXDOMAIN; 0 clears).
  void SetRcode(const std::string& name, int rcode);
  /// `name` is an alias: A questions about it get a CNAME to `target`, then target's A records.
  void SetCname(const std::string& name, const std::string& target);
  /// Answers to A questions about `name` also carry A records owned by `owner` (another name,
  /// as a hostile server might add them).
  void SetForeignA(const std::string& name, const std::string& owner,
                   std::vector<std::string> addresses);
  /// Over UDP, every answer comes truncated: TC set and no records (TCP answers whole).
  void SetTruncateUdp(bool truncate) { truncate_udp_ = truncate; }
  /// Questions received so far (both transports), and over TCP only.
  uint64_t queries() const { return queries_.load(); }
  uint64_t tcp_queries() const { return tcp_queries_.load(); }

 private:
  void Serve();
  void ServeTcp(int conn);
  std::string Answer(const std::string& query, bool truncate);

  int fd_ = -1;
  int tcp_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> truncate_udp_{false};
  std::atomic<uint64_t> tcp_queries_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> queries_{0};
  common::Mutex mu_;
  std::map<std::string, std::vector<std::string>> a_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<DnsSrv>> srv_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> rcode_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> cname_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> foreign_
      ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvgate::testing
