// File: tests/fakes/dns_responder.h
// A DNS server for tests on 127.0.0.1 (UDP, port 0): it answers A, AAAA and SRV questions from
// a table the test changes while it runs (records that come and go, SERVFAIL, NXDOMAIN), with
// SRV targets' A records in the additional section as a headless Kubernetes Service's are.
// Its own encoder, independent of the router's. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  /// Questions received so far.
  uint64_t queries() const { return queries_.load(); }

 private:
  void Serve();
  std::string Answer(const std::string& query);

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> queries_{0};
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> a_;
  std::map<std::string, std::vector<DnsSrv>> srv_;
  std::map<std::string, int> rcode_;
  std::thread thread_;
};

}  // namespace kvgate::testing
