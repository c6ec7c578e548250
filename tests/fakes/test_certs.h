// File: tests/fakes/test_certs.h
// TLS material made by the test itself (OpenSSL, no files checked in): a CA and a server
// certificate it signed for localhost and 127.0.0.1, as PEM files in a fresh temp dir.
// Thread-compatible.
#pragma once

#include <string>

namespace kvgate::testing {

struct TestCerts {
  std::string dir;
  std::string ca_cert;        // PEM: the CA clients trust
  std::string server_cert;    // PEM: signed by the CA; SAN DNS:localhost, IP:127.0.0.1
  std::string server_key;     // PEM
  std::string other_ca_cert;  // PEM: a CA that signed nothing here (verification must fail)
};

/// Makes the CA, the server key and certificate (P-256, valid from an hour ago for a day).
TestCerts MakeTestCerts();

}  // namespace kvgate::testing
