// Per-range capabilities (transfer/capability.h): the record's MAC, expiry, mode, range and
// client binding, and a tcp owner that requires them serving only what a capability allows.
#include "transfer/capability.h"

#include <cstring>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"
#include "transfer/transfer_engine.h"

namespace kvgate::transfer {
namespace {

AuthSecret Secret(uint8_t seed) {
  AuthSecret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + i);
  return s;
}

constexpr uint64_t kNow = 1'900'000'000;
constexpr uint64_t kBase = 0x10000;
constexpr uint64_t kLength = 0x4000;

class CapabilityTest : public ::testing::Test {
 protected:
  RangeCapability Cap(uint8_t modes = kCapabilityRead, const std::string& client = "tenant-b",
                      const std::string& segment = "node-a", uint64_t expires = kNow + 10,
                      const AuthSecret& key = CapabilityKey(Secret(1))) {
    return EncodeCapability(SignCapability(key, segment, client, modes, kBase, kLength, expires));
  }
  absl::Status Check(const RangeCapability& c, const std::string& client = "tenant-b",
                     TransferOp op = TransferOp::kRead, uint64_t addr = kBase + 0x100,
                     uint64_t length = 0x100, uint64_t now = kNow) {
    return verifier_.Verify(c, client, op, addr, length, now);
  }

  CapabilityVerifier verifier_{CapabilityKey(Secret(1)), "node-a"};
};

TEST_F(CapabilityTest, ASignedCapabilityRoundTripsAndVerifies) {
  const RangeCapability rec = Cap(kCapabilityRead | kCapabilityWrite);
  auto c = DecodeCapability(rec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->modes, kCapabilityRead | kCapabilityWrite);
  EXPECT_EQ(c->base, kBase);
  EXPECT_EQ(c->length, kLength);
  EXPECT_EQ(c->expires, kNow + 10);
  EXPECT_EQ(EncodeCapability(*c), rec);
  EXPECT_TRUE(Check(rec).ok()) << Check(rec);
  EXPECT_TRUE(Check(rec, "tenant-b", TransferOp::kWrite).ok());
  // The whole range, up to the second of expiry.
  EXPECT_TRUE(Check(rec, "tenant-b", TransferOp::kRead, kBase, kLength, kNow + 10).ok());
  // The derived key is not the node's secret.
  EXPECT_NE(CapabilityKey(Secret(1)), Secret(1));
}

TEST_F(CapabilityTest, ForgedExpiredOrTooNarrowCapabilitiesAreRefused) {
  const RangeCapability good = Cap();
  RangeCapability tampered = good;
  tampered.record[40] ^= 1;  // The MAC.
  RangeCapability widened = good;
  widened.record[16] = 0xff;  // length: the signed part changed, the MAC did not.
  struct Case {
    const char* what;
    absl::Status status;
  };
  const Case cases[] = {
      {"missing", Check(RangeCapability{})},
      {"tampered MAC", Check(tampered)},
      {"widened range", Check(widened, "tenant-b", TransferOp::kRead, kBase, 0x8000)},
      {"another node's key",
       Check(Cap(kCapabilityRead, "tenant-b", "node-a", kNow + 10, CapabilityKey(Secret(2))))},
      {"the node's raw secret as key",
       Check(Cap(kCapabilityRead, "tenant-b", "node-a", kNow + 10, Secret(1)))},
      {"another segment", Check(Cap(kCapabilityRead, "tenant-b", "node-b"))},
      {"another client", Check(good, "tenant-a")},
      {"expired", Check(good, "tenant-b", TransferOp::kRead, kBase, 16, kNow + 11)},
      {"wrong mode", Check(good, "tenant-b", TransferOp::kWrite)},
      {"write-only read", Check(Cap(kCapabilityWrite))},
      {"before the range", Check(good, "tenant-b", TransferOp::kRead, kBase - 1, 16)},
      {"past the range", Check(good, "tenant-b", TransferOp::kRead, kBase + kLength - 8, 16)},
      {"wrapping request", Check(good, "tenant-b", TransferOp::kRead, kBase + 16, ~uint64_t{0})},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kPermissionDenied) << c.what << ": " << c.status;
  }
  EXPECT_TRUE(Check(good).ok()) << "the good one, after all of them";
}

TEST_F(CapabilityTest, ARememberedRecordIsStillCheckedPerRequest) {
  const RangeCapability good = Cap();
  ASSERT_TRUE(Check(good).ok());  // Now remembered.
  EXPECT_EQ(Check(good, "tenant-a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check(good, "tenant-b", TransferOp::kRead, kBase, 16, kNow + 60).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check(good, "tenant-b", TransferOp::kWrite).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Check(good, "tenant-b", TransferOp::kRead, kBase + kLength, 1).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CapabilityTest, MalformedRecordsAreRefused) {
  auto with = [&](size_t at, uint8_t v) {
    RangeCapability r = Cap();
    r.record[at] = v;
    return r;
  };
  for (const RangeCapability& r : {with(0, 2), with(1, 0), with(1, 4), with(3, 1), with(7, 1)}) {
    EXPECT_EQ(DecodeCapability(r).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Check(r).code(), absl::StatusCode::kPermissionDenied);
  }
  Capability empty{kCapabilityRead, kBase, 0, kNow, {}};
  EXPECT_FALSE(DecodeCapability(EncodeCapability(empty)).ok());
  Capability wraps{kCapabilityRead, ~uint64_t{0} - 4, 16, kNow, {}};
  EXPECT_FALSE(DecodeCapability(EncodeCapability(wraps)).ok());
}

// Keeps the samples CollectMetrics gives, by name.
class MapSink : public MetricsSink {
 public:
  void Counter(std::string_view name, std::string_view, std::string_view transport,
               std::string_view op, uint64_t value) override {
    if (transport == "tcp" && op.empty()) values[std::string(name)] = value;
  }
  std::map<std::string, uint64_t> values;
};

// A tcp owner that requires capabilities, and a peer with a client credential.
class TcpCapabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string text = "node node " + std::string(64, '1') + " *\nclient alice " +
                             std::string(64, '2') + " *\nclient bob " + std::string(64, '3') +
                             " *\n";
    auto set = CredentialSet::Parse(text, "test");
    ASSERT_TRUE(set.ok()) << set.status();
    set_ = std::make_shared<const CredentialSet>(*set);
    auto owner_auth = std::make_shared<PeerAuth>();
    owner_auth->verifier = set_;
    owner_auth->self = *set_->Find("node");
    key_ = CapabilityKey(set_->Find("node")->secret);
    TransferEngineOptions o = testing::TestEngineOptions("owner", Uri(), {"tcp"});
    o.auth = owner_auth;
    o.tcp.require_capabilities = true;
    auto owner = TransferEngine::Create(std::move(o));
    ASSERT_TRUE(owner.ok()) << owner.status();
    owner_ = std::move(*owner);
    pool_ = static_cast<uint8_t*>(*owner_->AllocateManagedMemory(kPool));
    testing::FillPattern(pool_, kPool, 7);
    auto alice_auth = std::make_shared<PeerAuth>();
    alice_auth->self = *set_->Find("alice");
    o = testing::TestEngineOptions("alice", Uri(), {"tcp"});
    o.auth = alice_auth;
    auto alice = TransferEngine::Create(std::move(o));
    ASSERT_TRUE(alice.ok()) << alice.status();
    alice_ = std::move(*alice);
    local_.assign(kPool, 0);
    ASSERT_TRUE(alice_->RegisterMemory(local_.data(), local_.size()).ok());
    auto seg = alice_->OpenSegment("owner");
    ASSERT_TRUE(seg.ok()) << seg.status();
    seg_ = *seg;
  }

  std::string Uri() const { return "file:" + dir_.path() + "/segments"; }
  uint64_t Addr(uint64_t off) const { return reinterpret_cast<uint64_t>(pool_) + off; }
  RangeCapability Cap(uint8_t modes, uint64_t off, uint64_t length,
                      const std::string& client = "alice") {
    return EncodeCapability(
        SignCapability(key_, "owner", client, modes, Addr(off), length, UnixSeconds() + 60));
  }
  // One request as alice; its final status.
  absl::Status Run(TransferOp op, uint64_t off, uint64_t length, RangeCapability cap) {
    auto batch = alice_->AllocateBatch(1);
    if (!batch.ok()) return batch.status();
    TransferRequest r{op, local_.data(), seg_, Addr(off), length, cap};
    if (auto st = alice_->Submit(*batch, {r}); !st.ok()) return st;
    auto status = alice_->Wait(*batch, Clock::now() + std::chrono::seconds(10));
    // Not freed: the engine's destructor, on this thread, drops the batch's last reference. Freed
    // here, an io thread may drop it after this thread copied its error, and TSan cannot see the
    // reference count of absl::Status (Debian's absl is not instrumented): a false race.
    if (!status.ok()) return status.status();
    if (!status->finished()) return absl::DeadlineExceededError("not finished");
    return status->first_error;
  }
  uint64_t Denied() const {
    MapSink sink;
    owner_->CollectMetrics(sink);
    return sink.values["kvgate_transfer_capability_denied_total"];
  }

  static constexpr uint64_t kPool = 1 << 20;
  testing::TempDir dir_;
  std::shared_ptr<const CredentialSet> set_;
  AuthSecret key_{};
  std::unique_ptr<TransferEngine> owner_;
  std::unique_ptr<TransferEngine> alice_;
  uint8_t* pool_ = nullptr;
  std::vector<uint8_t> local_;
  SegmentId seg_{};
};

TEST_F(TcpCapabilityTest, TheOwnerServesOnlyWhatACapabilityAllows) {
  constexpr uint64_t kObj = 300 << 10;  // Several 64 KiB slices, one capability.
  // No capability, someone else's, a read capability for a write, a range too short: refused,
  // each with PERMISSION_DENIED naming the segment, and the pool untouched.
  std::memset(local_.data(), 0xee, kPool);
  const absl::Status refused[] = {
      Run(TransferOp::kRead, 0, kObj, {}),
      Run(TransferOp::kRead, 0, kObj, Cap(kCapabilityRead, 0, kObj, "bob")),
      Run(TransferOp::kWrite, 0, kObj, Cap(kCapabilityRead, 0, kObj)),
      Run(TransferOp::kRead, 0, kObj, Cap(kCapabilityRead, 0, kObj - 1)),
  };
  for (const absl::Status& st : refused) {
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
    EXPECT_NE(st.message().find("segment 'owner'"), std::string::npos) << st;
  }
  EXPECT_EQ(testing::FindPatternMismatch(pool_, kPool, 7), -1) << "a denied WRITE landed";
  EXPECT_GE(Denied(), 4u);
  // The same connections then serve what the capabilities allow.
  ASSERT_TRUE(Run(TransferOp::kRead, 4096, kObj, Cap(kCapabilityRead, 4096, kObj)).ok());
  EXPECT_EQ(testing::FindPatternMismatch(local_.data(), kObj, 7, 4096), -1);
  testing::FillPattern(local_.data(), kObj, 9);
  ASSERT_TRUE(Run(TransferOp::kWrite, 8192, kObj, Cap(kCapabilityWrite, 8192, kObj)).ok());
  EXPECT_EQ(testing::FindPatternMismatch(pool_ + 8192, kObj, 9), -1);
}

TEST_F(TcpCapabilityTest, RequiringCapabilitiesNeedsTheEnginesOwnCredential) {
  TransferEngineOptions o = testing::TestEngineOptions("keyless", Uri(), {"tcp"});
  auto auth = std::make_shared<PeerAuth>();
  auth->verifier = set_;
  o.auth = auth;
  o.tcp.require_capabilities = true;
  auto e = TransferEngine::Create(std::move(o));
  EXPECT_FALSE(e.ok());
}

}  // namespace
}  // namespace kvgate::transfer
