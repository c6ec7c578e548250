// kv_transfer_params from a prefill worker are accepted only when they name that worker (issue
// 27): host, port, engine id, every spelling of a host, duplicate keys, missing fields.
#include "router/pd/transfer_params.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router::pd {
namespace {

using ::testing::HasSubstr;

const TransferPeer kPeer{{"10.1.2.3", "Prefill-0.local", "[fd00::7]"}, {5600, 5601}, ""};

std::string Params(std::string_view host, std::string_view port, std::string_view extra = "") {
  return std::string(R"({"do_remote_prefill":true,"remote_block_ids":[1,2],)") +
         R"("remote_engine_id":"eng-1","remote_host":)" + std::string(host) + R"(,"remote_port":)" +
         std::string(port) + std::string(extra) + "}";
}

std::string_view FieldOf(const std::optional<TransferParamsMismatch>& m) {
  return m ? m->field : "ok";
}

TEST(TransferParams, ThePrefillWorkersOwnAreAccepted) {
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "5600"), kPeer)), "ok");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "5601"), kPeer)), "ok");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("prefill-0.LOCAL")", "5600"), kPeer)), "ok");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("fd00::7")", "5600"), kPeer)), "ok");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("[fd00::7]")", "5600"), kPeer)), "ok");
  // Newer and forked fields pass through when they name the same worker.
  EXPECT_EQ(FieldOf(CheckTransferParams(
                Params(R"("10.1.2.3")", "5600",
                       R"(,"remote_hosts":["10.1.2.3"],"remote_request_id":"r","tp_size":1)"),
                kPeer)),
            "ok");
}

TEST(TransferParams, AnotherHostPortOrEngineIsRefused) {
  auto m = CheckTransferParams(Params(R"("203.0.113.9")", "5600"), kPeer);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->field, "remote_host");
  EXPECT_THAT(m->detail, HasSubstr("203.0.113.9"));
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("127.0.0.1")", "5600"), kPeer)), "remote_host");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "8001"), kPeer)), "remote_port");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "-1"), kPeer)), "remote_port");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", R"("5600")"), kPeer)),
            "remote_port");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params("null", "5600"), kPeer)), "remote_host");
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("")", "5600"), kPeer)), "remote_host");
  EXPECT_EQ(
      FieldOf(CheckTransferParams(
          Params(R"("10.1.2.3")", "5600", R"(,"remote_hosts":["10.1.2.3","10.9.9.9"])"), kPeer)),
      "remote_host");
  EXPECT_EQ(FieldOf(CheckTransferParams(
                Params(R"("10.1.2.3")", "5600", R"(,"bootstrap_server_host":"10.9.9.9")"), kPeer)),
            "remote_host");
  // The engine id is checked only where the worker's is configured.
  TransferPeer pinned = kPeer;
  pinned.engine_id = "eng-1";
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "5600"), pinned)), "ok");
  pinned.engine_id = "eng-2";
  EXPECT_EQ(FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "5600"), pinned)),
            "remote_engine_id");
}

TEST(TransferParams, DuplicateMissingAndMalformed) {
  // An engine's JSON reader keeps the last of two keys: both are checked.
  EXPECT_EQ(FieldOf(CheckTransferParams(
                Params(R"("10.1.2.3")", "5600", R"(,"remote_host":"203.0.113.9")"), kPeer)),
            "remote_host");
  EXPECT_EQ(
      FieldOf(CheckTransferParams(Params(R"("10.1.2.3")", "5600", R"(,"remote_port":22)"), kPeer)),
      "remote_port");
  EXPECT_EQ(FieldOf(CheckTransferParams(R"({"remote_port":5600})", kPeer)), "remote_host");
  EXPECT_EQ(FieldOf(CheckTransferParams(R"({"remote_host":"10.1.2.3"})", kPeer)), "remote_port");
  EXPECT_EQ(FieldOf(CheckTransferParams("[1]", kPeer)), "malformed");
  EXPECT_EQ(FieldOf(CheckTransferParams(R"({"remote_host":)", kPeer)), "malformed");
  // An escaped key is the same key.
  EXPECT_EQ(FieldOf(CheckTransferParams(
                Params(R"("10.1.2.3")", "5600", R"(,"remote\u005fhost":"203.0.113.9")"), kPeer)),
            "remote_host");
}

}  // namespace
}  // namespace kvgate::router::pd
