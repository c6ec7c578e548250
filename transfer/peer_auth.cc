// File: transfer/peer_auth.cc
#include "transfer/peer_auth.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "common/strings.h"

namespace kvgate::transfer {
namespace {

constexpr std::string_view kHelloMagic = "KVAU";
constexpr uint8_t kAuthVersion = 1;

// Non-empty fields of `s` split at any of `seps`.
std::vector<std::string_view> Fields(std::string_view s, std::string_view seps) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t j = std::min(s.find_first_of(seps, i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool ScopeMatches(const std::vector<std::string>& scope, std::string_view value) {
  for (const std::string& s : scope) {
    if (s == "*" || s == value) return true;
    if (!s.empty() && s.back() == '*' && value.substr(0, s.size() - 1) == s.substr(0, s.size() - 1))
      return true;
  }
  return false;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::abort();  // No randomness: nothing here can be made safe.
  }
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool ParseHex(std::string_view hex, AuthSecret* out) {
  if (hex.size() != 2 * out->size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < out->size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

// HMAC-SHA256 over the parts, each length-prefixed so that no two part lists collide.
std::string Mac(const AuthSecret& key, std::initializer_list<std::string_view> parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  std::string out(kAuthMacBytes, '\0');
  size_t len = 0;
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, key.data(), key.size(), params) == 1;
  for (std::string_view p : parts) {
    const uint32_t n = static_cast<uint32_t>(p.size());
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(&n), sizeof(n)) == 1 &&
         EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) ==
                 1 && len == kAuthMacBytes;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) std::abort();  // OpenSSL without HMAC-SHA256 is not a state to run in.
  return out;
}

bool SameMac(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Blocking whole-buffer I/O for the socket adapters.
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t w = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}
bool RecvAll(int fd, std::string* out, size_t n) {
  out->assign(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(fd, out->data() + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string_view PeerRoleName(PeerRole role) { return role == PeerRole::kNode ? "node" : "client"; }

bool Credential::InScope(std::string_view value) const { return ScopeMatches(scope, value); }
bool Principal::InScope(std::string_view value) const { return ScopeMatches(scope, value); }

absl::StatusOr<CredentialSet> CredentialSet::Parse(std::string_view text, std::string_view source) {
  CredentialSet set;
  set.source_ = std::string(source);
  int line_no = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::vector<std::string_view> f = Fields(line, " \t\r");
    if (f.empty()) continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(common::StrCat(source, ":", line_no, ": ", why));
    };
    if (f.size() != 4) return bad("expected `node|client NAME SECRET_HEX SCOPE[,SCOPE...]`");
    Credential c;
    if (f[0] == "node") {
      c.role = PeerRole::kNode;
    } else if (f[0] == "client") {
      c.role = PeerRole::kClient;
    } else {
      return bad(common::StrCat("unknown role '", f[0], "' (node or client)"));
    }
    if (f[1].size() > kAuthMaxName) return bad("name longer than 255 bytes");
    c.name = std::string(f[1]);
    if (set.Find(c.name) != nullptr) return bad(common::StrCat("duplicate name '", c.name, "'"));
    if (!ParseHex(f[2], &c.secret)) return bad("the secret must be 64 hex digits (32 bytes)");
    for (std::string_view s : Fields(f[3], ",")) c.scope.emplace_back(s);
    if (c.scope.empty()) return bad("empty scope");
    set.credentials_.push_back(std::move(c));
  }
  if (set.credentials_.empty())
    return absl::InvalidArgumentError(common::StrCat(source, ": no credentials"));
  return set;
}

absl::StatusOr<CredentialSet> CredentialSet::Load(const std::string& path) {
  // Symlinks are followed (a Kubernetes Secret volume's files are links into ..data/).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        common::StrCat("store credentials ", path, ": ", std::strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  std::string text;
  if (S_ISREG(st.st_mode) && st.st_size <= (1 << 20)) {
    text.resize(static_cast<size_t>(st.st_size));
    ssize_t r = ::read(fd, text.data(), text.size());
    text.resize(r < 0 ? 0 : static_cast<size_t>(r));
  }
  ::close(fd);
  if (!S_ISREG(st.st_mode) || st.st_size > (1 << 20))
    return absl::InvalidArgumentError(
        common::StrCat("store credentials ", path, ": not a regular file of at most 1 MiB"));
  // Other users must not read it; a group may (a Secret volume mounted with fsGroup, 0440).
  if ((st.st_mode & 0027) != 0)
    return absl::PermissionDeniedError(common::StrCat(
        "store credentials ", path, ": other users can read it, or its group can write it "
        "(chmod 600, or 640/440 for a group)"));
  return Parse(text, path);
}

std::string CredentialSet::Generate() {
  return common::StrCat(
      "# kvgate-store credentials (docs/store.md, \"Authentication\"). Keep this file 0600.\n"
      "# role   name     secret                                                            scope\n",
      "node     node     ", Hex(RandomBytes(32)), " *\n", "client   default  ", Hex(RandomBytes(32)),
      " *\n");
}

absl::StatusOr<CredentialSet> CredentialSet::LoadOrCreate(const std::string& path) {
  auto loaded = Load(path);
  if (!absl::IsNotFound(loaded.status())) return loaded;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return absl::UnavailableError(
        common::StrCat("store credentials: cannot create ", dir.string(), ": ", std::strerror(errno)));
  struct stat st {};
  if (!dir.empty() && (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
                       st.st_uid != ::geteuid() || (st.st_mode & 022) != 0))
    return absl::PermissionDeniedError(common::StrCat(
        "store credentials: ", dir.string(), " must be a directory of this user that no one "
        "else can write"));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    const std::string text = Generate();
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) return absl::UnavailableError(common::StrCat("store credentials: cannot write ", path));
  } else if (errno != EEXIST) {  // EEXIST: another process created it first; load theirs.
    return absl::UnavailableError(
        common::StrCat("store credentials: cannot create ", path, ": ", std::strerror(errno)));
  }
  return Load(path);
}

const Credential* CredentialSet::Find(std::string_view name) const {
  for (const Credential& c : credentials_)
    if (c.name == name) return &c;
  return nullptr;
}

absl::StatusOr<Credential> CredentialSet::Select(PeerRole role, std::string_view name) const {
  for (const Credential& c : credentials_) {
    if (c.role == role && (name.empty() || c.name == name)) return c;
  }
  return absl::NotFoundError(common::StrCat("store credentials ", source_, ": no ",
                                            PeerRoleName(role), " credential",
                                            name.empty() ? "" : common::StrCat(" named '", name, "'")));
}

std::string DefaultCredentialsPath() {
  if (const char* p = std::getenv("KVGATE_STORE_CREDENTIALS"); p != nullptr && *p != '\0')
    return p;
  if (const char* run = std::getenv("XDG_RUNTIME_DIR"); run != nullptr && *run != '\0')
    return common::StrCat(run, "/kvgate-store/credentials");
  return common::StrCat("/tmp/kvgate-store-", ::geteuid(), "/credentials");
}

absl::StatusOr<PeerAuthPtr> LoadPeerAuth(const std::string& file, PeerRole role,
                                         std::string_view name, bool create) {
  if (file == "none") return PeerAuthPtr();
  const std::string path = file.empty() ? DefaultCredentialsPath() : file;
  auto set = create ? CredentialSet::LoadOrCreate(path) : CredentialSet::Load(path);
  if (!set.ok()) return set.status();
  auto self = set->Select(role, name);
  if (!self.ok()) return self.status();
  auto auth = std::make_shared<PeerAuth>();
  auth->verifier = std::make_shared<const CredentialSet>(std::move(*set));
  auth->self = std::move(*self);
  return PeerAuthPtr(std::move(auth));
}

AuthClientHandshake::AuthClientHandshake(const Credential& self, std::string service)
    : self_(self), service_(std::move(service)), client_nonce_(RandomBytes(kAuthNonceBytes)) {}

std::string AuthClientHandshake::Hello() {
  std::string out(kHelloMagic);
  out.push_back(static_cast<char>(kAuthVersion));
  out.push_back(static_cast<char>(self_.name.size()));
  out += self_.name;
  out += client_nonce_;
  return out;
}

absl::StatusOr<std::string> AuthClientHandshake::Answer(std::string_view challenge) {
  if (challenge.size() != kAuthChallengeBytes)
    return absl::UnauthenticatedError("store authentication: short challenge");
  const std::string_view server_nonce = challenge.substr(0, kAuthNonceBytes);
  const std::string expected =
      Mac(self_.secret, {"server", client_nonce_, server_nonce, self_.name, service_});
  if (!SameMac(expected, challenge.substr(kAuthNonceBytes)))
    return absl::UnauthenticatedError(common::StrCat(
        "store authentication: the peer does not hold credential '", self_.name, "' for '",
        service_, "' (not the store, or another endpoint than the one named)"));
  return Mac(self_.secret, {"client", server_nonce, client_nonce_, self_.name, service_});
}

AuthServerHandshake::AuthServerHandshake(std::shared_ptr<const CredentialSet> set,
                                         std::string service)
    : set_(std::move(set)), service_(std::move(service)) {}

absl::StatusOr<size_t> AuthServerHandshake::HelloRest(std::string_view fixed) {
  if (fixed.size() != kAuthHelloFixed || fixed.substr(0, 4) != kHelloMagic)
    return absl::InvalidArgumentError("not an authentication hello (an old or foreign client?)");
  if (static_cast<uint8_t>(fixed[4]) != kAuthVersion)
    return absl::InvalidArgumentError(
        common::StrCat("authentication version ", static_cast<int>(fixed[4]), " (expected 1)"));
  return static_cast<uint8_t>(fixed[5]) + kAuthNonceBytes;
}

absl::StatusOr<std::string> AuthServerHandshake::Challenge(std::string_view fixed,
                                                           std::string_view rest) {
  auto n = HelloRest(fixed);
  if (!n.ok()) return n.status();
  if (rest.size() != *n) return absl::InvalidArgumentError("truncated authentication hello");
  name_ = std::string(rest.substr(0, rest.size() - kAuthNonceBytes));
  client_nonce_ = std::string(rest.substr(name_.size()));
  server_nonce_ = RandomBytes(kAuthNonceBytes);
  credential_ = set_ == nullptr ? nullptr : set_->Find(name_);
  AuthSecret key{};
  if (credential_ != nullptr) {
    key = credential_->secret;
  } else {
    const std::string r = RandomBytes(key.size());
    std::memcpy(key.data(), r.data(), key.size());
  }
  return server_nonce_ + Mac(key, {"server", client_nonce_, server_nonce_, name_, service_});
}

absl::StatusOr<Principal> AuthServerHandshake::Verify(std::string_view proof) {
  if (credential_ == nullptr || server_nonce_.empty() ||
      !SameMac(proof, Mac(credential_->secret,
                          {"client", server_nonce_, client_nonce_, name_, service_}))) {
    return absl::UnauthenticatedError(common::StrCat(
        "authentication failed for '", absl::CHexEscape(name_), "'"));
  }
  return Principal{credential_->role, credential_->name, credential_->scope};
}

absl::Status AuthenticateToServer(int fd, const Credential& self, std::string_view service) {
  AuthClientHandshake hs(self, std::string(service));
  std::string challenge, verdict;
  if (!SendAll(fd, hs.Hello()) || !RecvAll(fd, &challenge, kAuthChallengeBytes))
    return absl::UnavailableError("store authentication: the connection broke (not a store "
                                  "endpoint, or it refused this client)");
  auto proof = hs.Answer(challenge);
  if (!proof.ok()) return proof.status();
  if (!SendAll(fd, *proof) || !RecvAll(fd, &verdict, 1))
    return absl::UnavailableError("store authentication: the connection broke");
  if (static_cast<uint8_t>(verdict[0]) != kAuthAccepted)
    return absl::UnauthenticatedError(
        common::StrCat("store authentication: refused credential '", self.name, "'"));
  return absl::OkStatus();
}

absl::StatusOr<Principal> AuthenticateClient(int fd, std::shared_ptr<const CredentialSet> set,
                                             std::string_view service) {
  AuthServerHandshake hs(std::move(set), std::string(service));
  std::string fixed, rest, proof;
  if (!RecvAll(fd, &fixed, kAuthHelloFixed))
    return absl::UnauthenticatedError("no authentication hello");
  auto n = hs.HelloRest(fixed);
  if (!n.ok()) return n.status();
  if (!RecvAll(fd, &rest, *n)) return absl::UnauthenticatedError("truncated authentication hello");
  auto challenge = hs.Challenge(fixed, rest);
  if (!challenge.ok()) return challenge.status();
  if (!SendAll(fd, *challenge) || !RecvAll(fd, &proof, kAuthMacBytes))
    return absl::UnauthenticatedError("no authentication proof");
  auto who = hs.Verify(proof);
  const char verdict = static_cast<char>(who.ok() ? kAuthAccepted : kAuthRefused);
  SendAll(fd, std::string_view(&verdict, 1));
  return who;
}

}  // namespace kvgate::transfer
