// Per-range capabilities at a data node's tcp transfer port (issue 27): a tenant holding a valid
// credential, which the port lets in, still cannot read or overwrite another tenant's object
// there, not even with a capability the master gave that tenant. Legitimate gets and puts are
// unaffected, and with authentication off nothing is signed or required.
#include "transfer/capability.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"
#include "store/rpc.h"
#include "store/wire.h"
#include "tests/store/store_harness.h"
#include "tests/store/test_credentials.h"
#include "tests/support/test_util.h"

namespace kvgate::store {
namespace {

using kvgate::testing::TestAuth;
using transfer::PeerRole;
using transfer::TransferOp;

constexpr uint64_t kSize = 96 << 10;

ObjectKey Key(const std::string& model, uint64_t h) { return {MakeNamespace(model, "", "", 0), h}; }

class DeniedCounter : public transfer::MetricsSink {
 public:
  void Counter(std::string_view name, std::string_view, std::string_view transport,
               std::string_view, uint64_t value) override {
    if (name == "kvgate_transfer_capability_denied_total" && transport == "tcp") denied += value;
  }
  uint64_t denied = 0;
};

class StoreCapabilityTest : public ::testing::Test {
 protected:
  // A master and one data node, with authentication on (`auth`) or off.
  void Start(bool auth) {
    auth_ = auth;
    MasterServiceOptions mo = testing::TestMasterOptions();
    if (!auth) mo.verifier = nullptr;
    auto svc = MasterService::Start(mo);
    ASSERT_TRUE(svc.ok()) << svc.status();
    svc_ = std::move(*svc);
    DataNodeOptions d = testing::TestNodeOptions("node-a", svc_->address());
    if (!auth) d.auth = nullptr;
    auto n = testing::StartTestNode(d);
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(*n);
  }

  std::unique_ptr<StoreClient> Client(const std::string& credential) {
    StoreClientOptions o = testing::TestClientOptions(svc_->address(), auth_ ? credential : "");
    o.timeout = std::chrono::seconds(3);
    if (!auth_) o.credentials_file = "none";
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A raw call as `credential`; the reply decoded into `R`.
  template <typename R>
  absl::StatusOr<R> CallAs(const std::string& credential, const Request& req) {
    std::optional<transfer::Credential> self;
    if (auth_) self = TestAuth(PeerRole::kClient, credential)->self;
    RpcConnection conn("127.0.0.1", svc_->port(), self);
    auto body = conn.Call(RequestOp(req), EncodeRequest(req), std::chrono::seconds(3));
    if (!body.ok()) return body.status();
    R r;
    if (auto st = Decode(*body, &r); !st.ok()) return st;
    return r;
  }

  // Puts `key` as `client` from `buf`, filled with `fill`.
  void Put(StoreClient& client, const ObjectKey& key, uint8_t* buf, int fill) {
    std::memset(buf, fill, kSize);
    std::vector<PutEntry> e = {{key, {{buf, kSize}}, std::nullopt, {}}};
    auto r = client.BatchPutFrom(e);
    ASSERT_EQ(r[0].code, PutCode::kStored) << r[0].error;
  }

  // Gets `key` as `client` into `buf` and checks every byte is `fill`.
  void ExpectIntact(StoreClient& client, const ObjectKey& key, uint8_t* buf, int fill) {
    std::memset(buf, 0, kSize);
    std::vector<GetEntry> g = {{key, {{buf, kSize}}}};
    auto got = client.BatchGetInto(g);
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(buf[i], fill) << "byte " << i;
  }

  // One request through `client`'s own engine (its credential) to node-a.
  absl::Status Raw(StoreClient& client, TransferOp op, void* local, uint64_t addr,
                   transfer::RangeCapability cap = {}) {
    transfer::TransferEngine& e = client.engine();
    auto seg = e.OpenSegment("node-a");
    if (!seg.ok()) return seg.status();
    auto batch = e.AllocateBatch(1);
    if (!batch.ok()) return batch.status();
    transfer::TransferRequest r{op, local, *seg, addr, kSize, cap};
    if (auto st = e.Submit(*batch, {r}); !st.ok()) return st;
    auto status = e.Wait(*batch, transfer::Clock::now() + std::chrono::seconds(5));
    // Not freed: the engine's destructor, on this thread, drops the batch's last reference. Freed
    // here, an io thread may drop it after this thread copied its error, and TSan cannot see the
    // reference count of absl::Status (Debian's absl is not instrumented): a false race.
    if (!status.ok()) return status.status();
    if (!status->finished()) return absl::DeadlineExceededError("transfer did not finish");
    return status->first_error;
  }

  uint64_t DeniedAtNode() {
    DeniedCounter sink;
    node_->engine().CollectMetrics(sink);
    return sink.denied;
  }

  bool auth_ = true;
  std::unique_ptr<MasterService> svc_;
  std::unique_ptr<DataNode> node_;
};

void ExpectDenied(const absl::Status& st, const char* what) {
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << what << ": " << st;
  EXPECT_NE(st.message().find("segment 'node-a'"), std::string::npos) << what << ": " << st;
}

TEST_F(StoreCapabilityTest, ATenantCannotReadOrOverwriteAnotherTenantsRange) {
  Start(/*auth=*/true);
  auto a = Client("tenant-a");
  auto b = Client("tenant-b");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto* a_buf = static_cast<uint8_t*>(*a->AllocateBuffer(2 * kSize));
  auto* b_buf = static_cast<uint8_t*>(*b->AllocateBuffer(kSize));
  Put(*b, Key("b", 1), b_buf, 0x5b);
  Put(*a, Key("a", 1), a_buf, 0x5a);
  // Where b's object lives, and the read capability the master gave b for it.
  auto b_get = CallAs<GetResponse>("tenant-b", GetRequest{{Key("b", 1)}, 0, ""});
  ASSERT_TRUE(b_get.ok()) << b_get.status();
  ASSERT_EQ(b_get->items.size(), 1u);
  ASSERT_EQ(b_get->items[0].replicas.size(), 1u);
  const Replica b_rep = b_get->items[0].replicas[0];
  ASSERT_TRUE(b_rep.capability.present);
  // A capability a holds legitimately, for its own object.
  auto a_get = CallAs<GetResponse>("tenant-a", GetRequest{{Key("a", 1)}, 0, ""});
  ASSERT_TRUE(a_get.ok()) << a_get.status();
  const Replica a_rep = a_get->items[0].replicas[0];
  // And a write capability b got for a new object.
  auto b_start = CallAs<PutStartResponse>(
      "tenant-b", PutStartRequest{{PutItem{Key("b", 2), {kSize}, std::nullopt, {}}}, "", 1});
  ASSERT_TRUE(b_start.ok()) << b_start.status();
  ASSERT_EQ(b_start->items[0].code, KeyCode::kOk);
  const Replica b_new = b_start->items[0].replicas[0];
  ASSERT_TRUE(b_new.capability.present);

  const uint64_t denied_before = DeniedAtNode();
  uint8_t* evil = a_buf + kSize;
  std::memset(evil, 0xee, kSize);
  // Tenant a, authenticated at the port, reads and writes b's range: without a capability,
  // with b's own (replayed: bound to b's name), with its own for another range.
  ExpectDenied(Raw(*a, TransferOp::kRead, evil, b_rep.addr), "read, no capability");
  ExpectDenied(Raw(*a, TransferOp::kWrite, evil, b_rep.addr), "write, no capability");
  ExpectDenied(Raw(*a, TransferOp::kRead, evil, b_rep.addr, b_rep.capability),
               "read with b's replayed capability");
  ExpectDenied(Raw(*a, TransferOp::kWrite, evil, b_rep.addr, b_rep.capability),
               "write with b's replayed capability");
  ExpectDenied(Raw(*a, TransferOp::kWrite, evil, b_new.addr, b_new.capability),
               "write with b's replayed put capability");
  ExpectDenied(Raw(*a, TransferOp::kRead, evil, b_rep.addr, a_rep.capability),
               "read with a's capability for its own object");
  ExpectDenied(Raw(*a, TransferOp::kWrite, evil, a_rep.addr, a_rep.capability),
               "write with a read capability");
  EXPECT_EQ(DeniedAtNode() - denied_before, 7u);
  // A refused READ lands padding (zeros), never b's bytes.
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_NE(evil[i], 0x5b) << "read leaked, byte " << i;

  // b's object is byte-exact, and both tenants go on as before.
  ExpectIntact(*b, Key("b", 1), b_buf, 0x5b);
  ExpectIntact(*a, Key("a", 1), a_buf, 0x5a);
  Put(*a, Key("a", 2), a_buf, 0x6a);
  ExpectIntact(*a, Key("a", 2), a_buf, 0x6a);
  // Through a's own engine, a's own capability works for its own range.
  EXPECT_TRUE(Raw(*a, TransferOp::kRead, evil, a_rep.addr, a_rep.capability).ok());
  EXPECT_EQ(evil[0], 0x5a);
  auto revoked = CallAs<KeyCodesResponse>(
      "tenant-b", PutEndRequest{{PutEndItem{Key("b", 2), b_start->items[0].put_id, false, 0}}});
  EXPECT_TRUE(revoked.ok()) << revoked.status();
}

TEST_F(StoreCapabilityTest, WithAuthenticationOffNothingIsSignedOrRequired) {
  Start(/*auth=*/false);
  auto c = Client("");
  ASSERT_NE(c, nullptr);
  auto* buf = static_cast<uint8_t*>(*c->AllocateBuffer(kSize));
  Put(*c, Key("a", 1), buf, 0x11);
  ExpectIntact(*c, Key("a", 1), buf, 0x11);
  auto got = CallAs<GetResponse>("", GetRequest{{Key("a", 1)}, 0, ""});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->items[0].replicas[0].capability.present);
  EXPECT_EQ(DeniedAtNode(), 0u);
}

// Only clients with the tcp transport ask for (and make the master sign) capabilities.
TEST_F(StoreCapabilityTest, CapabilitiesAreSignedOnlyWhenAsked) {
  Start(/*auth=*/true);
  auto c = Client("tenant-a");
  ASSERT_NE(c, nullptr);
  auto* buf = static_cast<uint8_t*>(*c->AllocateBuffer(kSize));
  Put(*c, Key("a", 1), buf, 0x22);
  GetRequest asked{{Key("a", 1)}, 0, ""};
  auto got = CallAs<GetResponse>("tenant-a", asked);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->items[0].replicas[0].capability.present);
  GetRequest not_asked = asked;
  not_asked.want_capabilities = false;
  got = CallAs<GetResponse>("tenant-a", not_asked);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->items[0].replicas[0].capability.present);
}

TEST(StoreCapabilityWireTest, RepliesCarryCapabilitiesAndCheckTheirLength) {
  GetResponse r;
  GetItemResult& it = r.items.emplace_back();
  it.slices = {kSize};
  it.replicas.push_back({"node-a", 0x1000, {}});
  it.replicas.push_back({"node-b", 0x2000,
                         transfer::EncodeCapability(transfer::SignCapability(
                             transfer::CapabilityKey({}), "node-b", "t", transfer::kCapabilityRead,
                             0x2000, kSize, 1))});
  const std::string body = Encode(r);
  GetResponse back;
  ASSERT_TRUE(Decode(body, &back).ok());
  EXPECT_EQ(back.items[0].replicas, r.items[0].replicas);
  // The byte before node-b's record says how long it is: only 0 or a whole record.
  const size_t len_at = body.size() - transfer::kCapabilityBytes - 1;
  ASSERT_EQ(static_cast<uint8_t>(body[len_at]), transfer::kCapabilityBytes);
  std::string bad = body;
  bad[len_at] = 47;
  EXPECT_EQ(Decode(bad, &back).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(body.substr(0, body.size() - 1), &back).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgate::store
