// File: tests/support/test_certs.h
// TLS material made by the test itself (OpenSSL, no files checked in): a CA and a server
// certificate it signed for localhost and 127.0.0.1 (usable as a client certificate too), and a
// second CA with its own server certificate, as PEM files in a fresh temp dir.
// Thread-compatible.
#pragma once

#include <string>

namespace kvgate::testing {

struct TestCerts {
  std::string dir;
  std::string ca_cert;            // PEM: the CA clients trust
  std::string server_cert;        // PEM: signed by the CA; SAN DNS:localhost, IP:127.0.0.1
  std::string server_key;         // PEM
  std::string other_ca_cert;      // PEM: another CA (verification against the first must fail)
  std::string other_server_cert;  // PEM: signed by the other CA; same names
  std::string other_server_key;   // PEM
};

/// Makes the CA, the server key and certificate (P-256, valid from an hour ago for a day).
TestCerts MakeTestCerts();

}  // namespace kvgate::testing
