// libFuzzer target: the store's keyed challenge (transfer/peer_auth.h), what the master, data
// nodes and transfer ports run on the first bytes of every connection, and the credentials-file
// parser, and the per-range capability records a data node's tcp port checks on every request
// (transfer/capability.h). Input: [selector byte][bytes]. Whatever arrives, the server side never
// accepts a peer that did not compute the proof with a secret of the set, nor a record not signed
// with the node's key.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "transfer/capability.h"
#include "transfer/peer_auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::transfer;
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  static const auto set = std::make_shared<const CredentialSet>(*CredentialSet::Parse(
      "node n " + std::string(64, 'a') + " *\nclient c " + std::string(64, 'b') + " x|*\n", "f"));
  switch (data[0] % 4) {
    case 0: {  // A credentials file.
      auto parsed = CredentialSet::Parse(in, "fuzz");
      if (parsed.ok() && parsed->size() == 0) std::abort();
      break;
    }
    case 1: {  // A peer's hello and proof, as the server reads them.
      AuthServerHandshake hs(set, "master");
      if (in.size() < kAuthHelloFixed) break;
      auto rest = hs.HelloRest(in.substr(0, kAuthHelloFixed));
      if (!rest.ok()) break;
      const std::string_view after = in.substr(kAuthHelloFixed);
      if (after.size() < *rest) break;
      auto challenge = hs.Challenge(in.substr(0, kAuthHelloFixed), after.substr(0, *rest));
      if (!challenge.ok()) break;
      if (challenge->size() != kAuthChallengeBytes) std::abort();
      // The proof is fuzzer bytes chosen before the server's nonce existed: it must not pass.
      if (hs.Verify(after.substr(*rest)).ok()) std::abort();
      break;
    }
    case 3: {  // A capability record, then the request it comes with.
      RangeCapability rec;
      rec.present = true;
      const size_t n = std::min(in.size(), rec.record.size());
      std::memcpy(rec.record.data(), in.data(), n);
      uint64_t req[2] = {};  // addr, length
      if (in.size() > n) std::memcpy(req, in.data() + n, std::min(in.size() - n, sizeof(req)));
      auto decoded = DecodeCapability(rec);
      if (decoded.ok() && EncodeCapability(*decoded) != rec) std::abort();
      static const AuthSecret key = CapabilityKey(set->Find("n")->secret);
      CapabilityVerifier v(key, "node");
      const auto op = (data[0] & 4) ? TransferOp::kWrite : TransferOp::kRead;
      if (v.Verify(rec, "c", op, req[0], req[1], 0).ok()) std::abort();  // Forged: never.
      break;
    }
    default: {  // A server's challenge, as the client reads it.
      AuthClientHandshake hs(*set->Find("c"), "node");
      (void)hs.Hello();
      if (hs.Answer(in).ok()) std::abort();  // Nothing forged without the secret.
      break;
    }
  }
  return 0;
}
