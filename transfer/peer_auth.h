// File: transfer/peer_auth.h
// Who may talk to the store's master, data nodes and transfer servers (docs/store.md,
// "Authentication"): a keyed challenge over any byte stream, before its first frame. Each side
// proves it holds the credential's secret without sending it:
//
//   client -> server  hello:     "KVAU" ver=1 len name  client_nonce[32]
//   server -> client  challenge: server_nonce[32]  HMAC(secret, "server"|cn|sn|name|service)
//   client -> server  proof:     HMAC(secret, "client"|sn|cn|name|service)
//   server -> client  verdict:   1 byte (0 accepted)
//
// `service` names what the client meant to reach ("master", or the segment of a data node), so
// an answer from another endpoint fails the client's check. Fresh nonces on both sides make a
// recorded exchange useless. No encryption: bytes that follow travel in clear (run the fleet's
// network encryption for that). Pure and thread-safe except the per-connection state machines.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvgate::transfer {

using AuthSecret = std::array<uint8_t, 32>;

/// kNode: a data node (registers, heartbeats, publishes its segment); kClient: an engine's
/// connector or a tool, which reads and writes objects of the namespaces it is granted.
enum class PeerRole : uint8_t { kNode, kClient };
std::string_view PeerRoleName(PeerRole role);

/// One line of a credentials file: `node|client NAME SECRET_HEX SCOPE[,SCOPE...]`. The scope is
/// the node names a node credential may register, or the namespaces a client may touch; each is
/// exact, "*" (all) or a prefix ending in '*'.
struct Credential {
  PeerRole role = PeerRole::kClient;
  std::string name;
  AuthSecret secret{};
  std::vector<std::string> scope;

  bool InScope(std::string_view value) const;
};

/// The peer a connection authenticated as.
struct Principal {
  PeerRole role = PeerRole::kClient;
  std::string name;
  std::vector<std::string> scope;
  bool unrestricted = false;  // Authentication is off (--auth none): every operation allowed.

  bool InScope(std::string_view value) const;
};

/// A credentials file. Servers hold every credential; a client or node uses its own line.
class CredentialSet {
 public:
  /// Parses the file's text; '#' starts a comment. @return kInvalidArgument naming the line.
  static absl::StatusOr<CredentialSet> Parse(std::string_view text, std::string_view source);
  /// Reads `path`, which must be a regular file that other users cannot read (its group may:
  /// a Kubernetes Secret mounted with fsGroup) and only its owner may write.
  static absl::StatusOr<CredentialSet> Load(const std::string& path);
  /// A fresh file's text: a node credential ("node", any node name) and a client credential
  /// ("default", every namespace), with random secrets.
  static std::string Generate();
  /// Loads `path`, or creates it with Generate() (mode 0600, its directory 0700) when missing.
  static absl::StatusOr<CredentialSet> LoadOrCreate(const std::string& path);

  const Credential* Find(std::string_view name) const;
  /// `name` when given, else the first credential of `role`. @return kNotFound naming the file.
  absl::StatusOr<Credential> Select(PeerRole role, std::string_view name) const;
  const std::string& source() const { return source_; }
  size_t size() const { return credentials_.size(); }

 private:
  std::string source_;
  std::vector<Credential> credentials_;
};

/// Where a user's credentials file lives when none is named: $KVGATE_STORE_CREDENTIALS, else
/// $XDG_RUNTIME_DIR/kvgate-store/credentials, else /tmp/kvgate-store-<uid>/credentials.
std::string DefaultCredentialsPath();

/// What one process brings to authentication: the set it checks peers against (servers) and its
/// own credential (what it presents as a client). Shared by every connection.
struct PeerAuth {
  std::shared_ptr<const CredentialSet> verifier;  // Null: accepts no one (a pure client).
  std::optional<Credential> self;                 // Empty: cannot connect out.
};
using PeerAuthPtr = std::shared_ptr<const PeerAuth>;

/// A process's PeerAuth from its credentials file: `file` "none" gives null (authentication off),
/// "" the DefaultCredentialsPath(). `create` makes a missing file (the store's one-machine
/// default); `role` and `name` pick its own credential (name empty: the first of the role).
absl::StatusOr<PeerAuthPtr> LoadPeerAuth(const std::string& file, PeerRole role,
                                         std::string_view name, bool create);

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthMacBytes = 32;
inline constexpr size_t kAuthHelloFixed = 6;  // "KVAU", version, name length.
inline constexpr size_t kAuthChallengeBytes = kAuthNonceBytes + kAuthMacBytes;
inline constexpr size_t kAuthMaxName = 255;

/// The client's half of one handshake.
class AuthClientHandshake {
 public:
  AuthClientHandshake(const Credential& self, std::string service);
  /// The hello to send first.
  std::string Hello();
  /// Checks the server's challenge (kAuthChallengeBytes); @return the proof to send, or
  /// kUnauthenticated when the server does not hold this credential for `service`.
  absl::StatusOr<std::string> Answer(std::string_view challenge);

 private:
  const Credential self_;
  const std::string service_;
  std::string client_nonce_;
};

/// The server's half of one handshake.
class AuthServerHandshake {
 public:
  AuthServerHandshake(std::shared_ptr<const CredentialSet> set, std::string service);
  /// From the hello's first kAuthHelloFixed bytes: how many more to read (name and nonce).
  /// @return kInvalidArgument when it is not a hello (another protocol, another version).
  absl::StatusOr<size_t> HelloRest(std::string_view fixed);
  /// The whole hello; @return the challenge to send. An unknown name gets a challenge too (from
  /// a random key), so a prober learns nothing before its proof fails.
  absl::StatusOr<std::string> Challenge(std::string_view fixed, std::string_view rest);
  /// The client's proof; @return who it is, or kUnauthenticated.
  absl::StatusOr<Principal> Verify(std::string_view proof);

 private:
  std::shared_ptr<const CredentialSet> set_;
  const std::string service_;
  std::string name_;
  std::string client_nonce_;
  std::string server_nonce_;
  const Credential* credential_ = nullptr;
};

inline constexpr uint8_t kAuthAccepted = 0;
inline constexpr uint8_t kAuthRefused = 1;

/// Runs the client side over a connected blocking socket (its timeouts set by the caller).
absl::Status AuthenticateToServer(int fd, const Credential& self, std::string_view service);
/// Runs the server side over a connected blocking socket; sends the verdict.
absl::StatusOr<Principal> AuthenticateClient(int fd, std::shared_ptr<const CredentialSet> set,
                                             std::string_view service);

}  // namespace kvgate::transfer
