// File: tests/support/test_certs.cc
#include "tests/support/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <stdexcept>

#include "tests/support/temp_files.h"

namespace kvgate::testing {
namespace {

EVP_PKEY* NewKey() {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  if (k == nullptr) throw std::runtime_error("EVP_EC_gen failed");
  return k;
}

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) throw std::runtime_error("X509V3_EXT_conf_nid failed");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by `issuer_key` (self-signed when issuer is null).
X509* NewCert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long serial,
              bool ca) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* as_issuer = issuer != nullptr ? issuer : cert;
  if (ca) {
    AddExt(cert, as_issuer, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(cert, as_issuer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExt(cert, as_issuer, NID_basic_constraints, "critical,CA:FALSE");
    AddExt(cert, as_issuer, NID_ext_key_usage, "serverAuth,clientAuth");
    AddExt(cert, as_issuer, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  }
  if (X509_sign(cert, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    throw std::runtime_error("X509_sign failed");
  }
  return cert;
}

void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  if (cert != nullptr) PEM_write_X509(f, cert);
  if (key != nullptr) PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
}

}  // namespace

TestCerts MakeTestCerts() {
  TestCerts out;
  out.dir = MakeTempDir("kvgate-certs");
  if (out.dir.empty()) throw std::runtime_error("cannot make a temp dir for the certificates");
  out.ca_cert = out.dir + "/ca.pem";
  out.server_cert = out.dir + "/server.pem";
  out.server_key = out.dir + "/server-key.pem";
  out.other_ca_cert = out.dir + "/other-ca.pem";
  out.other_server_cert = out.dir + "/other-server.pem";
  out.other_server_key = out.dir + "/other-server-key.pem";

  EVP_PKEY* ca_key = NewKey();
  X509* ca = NewCert(ca_key, "kvgate test CA", nullptr, nullptr, 1, true);
  EVP_PKEY* key = NewKey();
  X509* server = NewCert(key, "localhost", ca, ca_key, 2, false);
  EVP_PKEY* other_key = NewKey();
  X509* other = NewCert(other_key, "kvgate other CA", nullptr, nullptr, 3, true);
  WritePem(out.ca_cert, ca, nullptr);
  WritePem(out.server_cert, server, nullptr);
  WritePem(out.server_key, nullptr, key);
  EVP_PKEY* other_server_key = NewKey();
  X509* other_server = NewCert(other_server_key, "localhost", other, other_key, 4, false);
  WritePem(out.other_ca_cert, other, nullptr);
  WritePem(out.other_server_cert, other_server, nullptr);
  WritePem(out.other_server_key, nullptr, other_server_key);
  X509_free(other_server);
  EVP_PKEY_free(other_server_key);
  X509_free(ca);
  X509_free(server);
  X509_free(other);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(key);
  EVP_PKEY_free(other_key);
  return out;
}

}  // namespace kvgate::testing
