// kvgate-sim's prefill/decode roles (issue 15): for each wire protocol a decode pulls the KV its
// prefill holds (real bytes through transfer/), reports it as cached, and the prefill frees it;
// a decode without a reachable prefill recomputes; unpulled KV is freed after the abort timeout.
// Prefill and decode are SimProcesses in this process on ephemeral ports.
#include <future>
#include <regex>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/cli.h"
#include "sim/engine.h"
#include "sim/pd_protocol.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/sim/sim_test_util.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using testing::Fetch;
using ::testing::HasSubstr;
using testing::Headers;
using testing::WaitFor;

constexpr double kTimeScale = 0.02;

// 600 bytes of chat content: 150+ tokens. `extra` adds top-level fields.
std::string Chat(int max_tokens, const std::string& extra = "", bool stream = false,
                 char fill = 'q') {
  return common::StrCat(R"({"model":"sim-model","messages":[{"role":"user","content":")",
                        std::string(600, fill), R"("}],"max_tokens":)", max_tokens, R"(,"stream":)",
                        stream ? "true" : "false",
                        stream ? R"(,"stream_options":{"include_usage":true})" : "", extra, "}");
}

// One sample of an unlabelled or exactly labelled series; -1 when absent.
int64_t Metric(uint16_t port, const std::string& series) {
  const std::string m = Fetch(port, "GET", "/metrics").body;
  const size_t at = m.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(m.substr(at + series.size() + 2));
}

class PdSimTest : public ::testing::Test {
 protected:
  void Start(PdProtocol protocol, double abort_timeout_s = 480, double wait_timeout_s = 50) {
    auto make = [&](PdRole role) {
      SimOptions o;
      o.base_port = 0;
      o.bootstrap_port = 0;
      o.time_scale = kTimeScale;
      o.profile.num_gpu_blocks = 256;
      o.role = role;
      o.pd_protocol = protocol;
      o.pd_abort_timeout_s = abort_timeout_s;
      o.pd_wait_timeout_s = wait_timeout_s;  // 50 simulated s = 1 real s.
      o.log_level = "warn";
      auto sim = std::make_unique<SimProcess>(o);
      EXPECT_TRUE(sim->Start().ok());
      sim->StartThread();
      return sim;
    };
    prefill_ = make(PdRole::kPrefill);
    decode_ = make(PdRole::kDecode);
    p_ = prefill_->ports()[0];
    d_ = decode_->ports()[0];
    ASSERT_EQ(prefill_->bootstrap_ports().size(), 1u);
    p_boot_ = prefill_->bootstrap_ports()[0];
    d_boot_ = decode_->bootstrap_ports()[0];
    ASSERT_NE(p_boot_, 0);
  }
  void TearDown() override {
    if (decode_) decode_->Stop();
    if (prefill_) prefill_->Stop();
  }

  // The decode did not recompute: all but the last prompt token came from the prefill (vLLM
  // computes the last one again), and the prefill freed what it held.
  void ExpectPulled(const testing::HttpResponse& decoded, int pulls = 1) {
    ASSERT_EQ(decoded.status, 200) << decoded.body << decoded.error;
    const int prompt = Field(decoded.body, "prompt_tokens");
    ASSERT_GT(prompt, 100);
    EXPECT_EQ(Field(decoded.body, "cached_tokens"), prompt - 1) << decoded.body;
    EXPECT_EQ(Metric(d_, "kvgate_sim_pd_transfer_bytes_total"), pulls * prompt * 16);
    EXPECT_EQ(Metric(d_, "kvgate_sim_pd_pull_failures_total"), 0);
    EXPECT_EQ(Metric(d_, "kvgate_sim_pd_requests_total{stage=\"decode\"}"), pulls);
    EXPECT_TRUE(WaitFor([&] { return Metric(p_, "kvgate_sim_pd_held_blocks") == 0; }));
    EXPECT_EQ(Metric(p_, "kvgate_sim_pd_released_total{reason=\"pulled\"}"), pulls);
    EXPECT_EQ(Metric(p_, "kvgate_sim_pd_requests_total{stage=\"prefill\"}"), pulls);
  }

  void ExpectRecomputed(const testing::HttpResponse& decoded) {
    ASSERT_EQ(decoded.status, 200) << decoded.body << decoded.error;
    EXPECT_EQ(Field(decoded.body, "cached_tokens"), 0) << decoded.body;
    EXPECT_EQ(Field(decoded.body, "completion_tokens"), 4);
    EXPECT_EQ(Metric(d_, "kvgate_sim_pd_pull_failures_total"), 1);
    EXPECT_EQ(Metric(d_, "kvgate_sim_pd_transfer_bytes_total"), 0);
  }

  std::unique_ptr<SimProcess> prefill_, decode_;
  uint16_t p_ = 0, d_ = 0, p_boot_ = 0, d_boot_ = 0;
};

constexpr char kNixlPrefill[] =
    R"(,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
    R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null})";

std::string KvTransferParams(const std::string& body) {
  const size_t at = body.find("\"kv_transfer_params\":{");
  if (at == std::string::npos) return "";
  const size_t start = body.find('{', at);
  return body.substr(start, body.find('}', start) - start + 1);
}

TEST_F(PdSimTest, NixlDecodePullsWhatThePrefillHolds) {
  Start(PdProtocol::kVllmNixl);
  auto p =
      Fetch(p_, "POST", "/v1/chat/completions", Chat(1, kNixlPrefill), {{"x-request-id", "n1"}});
  ASSERT_EQ(p.status, 200) << p.body;
  const std::string params = KvTransferParams(p.body);
  EXPECT_THAT(params, HasSubstr(R"("do_remote_prefill":true,"do_remote_decode":false)"));
  EXPECT_THAT(params, HasSubstr(common::StrCat(R"("remote_port":)", p_boot_)));
  EXPECT_THAT(params, HasSubstr(R"("remote_host":"127.0.0.1")"));
  EXPECT_THAT(params, HasSubstr(R"("tp_size":1,"remote_request_id":"n1")"));
  EXPECT_THAT(params, HasSubstr(R"("remote_block_ids":[0,1,2,3,4,5,6,7,8,9])"));
  EXPECT_GT(Metric(p_, "kvgate_sim_pd_held_blocks"), 0);
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_held_requests"), 1);

  auto d = Fetch(d_, "POST", "/v1/chat/completions", Chat(4, ",\"kv_transfer_params\":" + params),
                 {{"x-request-id", "n1"}});
  ExpectPulled(d);
  EXPECT_EQ(Field(d.body, "completion_tokens"), 4);
  // The received blocks are cached on the decode: the same prompt again hits them locally.
  auto again = Fetch(d_, "POST", "/v1/chat/completions", Chat(2));
  EXPECT_EQ(Field(again.body, "cached_tokens"), Field(d.body, "prompt_tokens") / 16 * 16);
}

TEST_F(PdSimTest, NixlDecodeRecomputesWithoutItsPrefill) {
  Start(PdProtocol::kVllmNixl);
  const std::string params = common::StrCat(
      R"(,"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,)",
      R"("remote_block_ids":[1,2],"remote_engine_id":"gone","remote_host":"127.0.0.1",)",
      R"("remote_port":)", testing::FreePort(), R"(,"tp_size":1})");
  ExpectRecomputed(Fetch(d_, "POST", "/v1/chat/completions", Chat(4, params)));
}

TEST_F(PdSimTest, NixlDecodeRefusesAnotherEnginesKv) {
  Start(PdProtocol::kVllmNixl);
  auto p =
      Fetch(p_, "POST", "/v1/chat/completions", Chat(1, kNixlPrefill), {{"x-request-id", "e1"}});
  std::string params = KvTransferParams(p.body);
  params = std::regex_replace(params, std::regex(R"("remote_engine_id":"[^"]*")"),
                              R"("remote_engine_id":"someone-else")");
  ExpectRecomputed(Fetch(d_, "POST", "/v1/chat/completions",
                         Chat(4, ",\"kv_transfer_params\":" + params), {{"x-request-id", "e1"}}));
}

TEST_F(PdSimTest, MooncakeDecodeMayArriveBeforeItsPrefill) {
  Start(PdProtocol::kVllmMooncake);
  const std::string to_d = common::StrCat(
      R"(,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,)",
      R"("bootstrap_server_host":"127.0.0.1","bootstrap_server_port":)", p_boot_, "}");
  // Streamed, as a client would ask; the decode waits for the prefill's KV.
  auto d = std::async(std::launch::async, [&] {
    return Fetch(d_, "POST", "/v1/chat/completions", Chat(4, to_d, /*stream=*/true),
                 {{"x-request-id", "m1"}});
  });
  ASSERT_TRUE(
      WaitFor([&] { return Metric(d_, "kvgate_sim_pd_requests_total{stage=\"decode\"}") == 1; }));
  auto p =
      Fetch(p_, "POST", "/v1/chat/completions",
            Chat(1, R"(,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false})"),
            {{"x-request-id", "m1"}});
  ASSERT_EQ(p.status, 200) << p.body;
  const auto decoded = d.get();
  EXPECT_THAT(decoded.body, HasSubstr("data: [DONE]"));
  ExpectPulled(decoded);
}

TEST_F(PdSimTest, MooncakeDecodeGivesUpOnAnUnknownRequest) {
  Start(PdProtocol::kVllmMooncake);
  const std::string to_d = common::StrCat(
      R"(,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,)",
      R"("bootstrap_server_host":"127.0.0.1","bootstrap_server_port":)", p_boot_, "}");
  ExpectRecomputed(Fetch(d_, "POST", "/v1/chat/completions", Chat(4, to_d),
                         {{"x-request-id", "never-prefilled"}}));
}

TEST_F(PdSimTest, P2pNcclDecodeFindsItsPrefillInTheRequestId) {
  Start(PdProtocol::kVllmP2pNccl);
  const std::string id = common::StrCat("___prefill_addr_127.0.0.1:", p_boot_,
                                        "___decode_addr_127.0.0.1:", d_boot_, "_0123abcd");
  auto p = Fetch(p_, "POST", "/v1/chat/completions", Chat(1), {{"x-request-id", id}});
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_held_requests"), 1);
  ExpectPulled(Fetch(d_, "POST", "/v1/chat/completions", Chat(4), {{"x-request-id", id}}));

  // A prefill address nobody serves: recompute.
  const std::string dead = common::StrCat("___prefill_addr_127.0.0.1:", testing::FreePort(),
                                          "___decode_addr_127.0.0.1:", d_boot_, "_ff");
  auto r =
      Fetch(d_, "POST", "/v1/chat/completions", Chat(4, "", false, 'r'), {{"x-request-id", dead}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Field(r.body, "cached_tokens"), 0);
  EXPECT_EQ(Metric(d_, "kvgate_sim_pd_pull_failures_total"), 1);
}

TEST_F(PdSimTest, SglangBootstrapPairRendezvousOnTheRoom) {
  Start(PdProtocol::kSglangBootstrap);
  const std::string fields = common::StrCat(R"(,"bootstrap_host":"127.0.0.1","bootstrap_port":)",
                                            p_boot_, R"(,"bootstrap_room":8070450532247928832)");
  // The router sends the same body to both at once; the prefill answers once the KV is gone.
  auto p = std::async(std::launch::async,
                      [&] { return Fetch(p_, "POST", "/v1/chat/completions", Chat(4, fields)); });
  auto d = Fetch(d_, "POST", "/v1/chat/completions", Chat(4, fields));
  const auto prefilled = p.get();
  ASSERT_EQ(prefilled.status, 200) << prefilled.body;
  EXPECT_EQ(Field(prefilled.body, "completion_tokens"), 1);  // SGLang's prefill only prefills.
  ExpectPulled(d);
}

TEST_F(PdSimTest, SglangDecodeGivesUpOnAnEmptyRoom) {
  Start(PdProtocol::kSglangBootstrap);
  const std::string fields = common::StrCat(R"(,"bootstrap_host":"127.0.0.1","bootstrap_port":)",
                                            p_boot_, R"(,"bootstrap_room":12345)");
  ExpectRecomputed(Fetch(d_, "POST", "/v1/chat/completions", Chat(4, fields)));
  auto bad = Fetch(d_, "POST", "/v1/chat/completions", Chat(4, R"(,"bootstrap_room":[1,2])"));
  EXPECT_EQ(bad.status, 400);
}

TEST_F(PdSimTest, UnpulledKvIsFreedAfterTheAbortTimeout) {
  Start(PdProtocol::kVllmNixl, /*abort_timeout_s=*/20);  // 0.4 real seconds.
  auto p =
      Fetch(p_, "POST", "/v1/chat/completions", Chat(1, kNixlPrefill), {{"x-request-id", "t1"}});
  ASSERT_EQ(p.status, 200);
  const std::string params = KvTransferParams(p.body);
  ASSERT_TRUE(WaitFor([&] { return Metric(p_, "kvgate_sim_pd_held_blocks") == 0; }));
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_released_total{reason=\"timeout\"}"), 1);
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_released_total{reason=\"pulled\"}"), 0);
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_held_requests"), 0);
  // A decode that comes too late recomputes.
  ExpectRecomputed(Fetch(d_, "POST", "/v1/chat/completions",
                         Chat(4, ",\"kv_transfer_params\":" + params), {{"x-request-id", "t1"}}));
}

TEST_F(PdSimTest, RequestsWithoutProtocolFieldsAreServedAsOnAMixedWorker) {
  Start(PdProtocol::kVllmNixl);
  auto p = Fetch(p_, "POST", "/v1/chat/completions", Chat(3));
  ASSERT_EQ(p.status, 200);
  EXPECT_EQ(Field(p.body, "completion_tokens"), 3);
  EXPECT_THAT(p.body, HasSubstr(R"("kv_transfer_params":null)"));
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_held_blocks"), 0);
  EXPECT_EQ(Metric(p_, "kvgate_sim_pd_requests_total{stage=\"prefill\"}"), 0);
  auto d = Fetch(d_, "POST", "/v1/chat/completions", Chat(3));
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(Metric(d_, "kvgate_sim_pd_requests_total{stage=\"decode\"}"), 0);
}

// The engine side, without I/O: a held prefill keeps its blocks until released; a decode's
// received tokens count as computed, all but the last.
TEST(PdEngineTest, HeldBlocksAndRemoteTokens) {
  Profile prof;
  prof.num_gpu_blocks = 64;
  Engine prefill(prof, "m", 0);
  EngineRequest r;
  r.id = 1;
  r.prompt = Prompt(100, 7);
  r.max_tokens = 1;
  r.hold = true;
  prefill.AddRequest(r);
  StepResult s = prefill.Step(0);
  ASSERT_TRUE(s.outputs.at(0).finished);
  EXPECT_EQ(prefill.num_held_blocks(), 7u);  // ceil(100 / 16)
  ASSERT_NE(prefill.HeldBlocks(1), nullptr);
  EXPECT_EQ(prefill.pool().NumFreeBlocks(), 64u - 7u);
  prefill.ReleaseHeld(1);
  EXPECT_EQ(prefill.num_held_blocks(), 0u);
  EXPECT_EQ(prefill.pool().NumFreeBlocks(), 64u);

  Engine decode(prof, "m", 0);
  EngineRequest d = r;
  d.hold = false;
  d.max_tokens = 3;
  d.remote_tokens = 100;
  decode.AddRequest(d);
  StepResult first = decode.Step(0);
  EXPECT_EQ(first.num_prefill_tokens, 1u);  // Only the last prompt token is computed.
  EXPECT_EQ(first.outputs.at(0).cached_tokens, 99u);
  EXPECT_EQ(decode.counters().remote_prefill_tokens, 99u);
  EXPECT_EQ(decode.counters().prefix_cache_hits, 0u);
  // The received blocks are cached like computed ones.
  EXPECT_EQ(decode.pool().CachedHashes(Medium::kGpu).size(), 6u);
}

TEST(PdProtocolTest, ClassifiesEachProtocolsFields) {
  auto nixl = ParsePdRequest(
      PdRole::kDecode, PdProtocol::kVllmNixl,
      R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"[::1]","remote_port":5600,"remote_engine_id":"e","remote_request_id":"pre"}})",
      "x");
  ASSERT_TRUE(nixl.ok());
  EXPECT_EQ(nixl->stage, PdStage::kDecode);
  EXPECT_EQ(nixl->remote_host, "::1");
  EXPECT_EQ(nixl->remote_port, 5600);
  EXPECT_EQ(nixl->remote_engine_id, "e");
  EXPECT_EQ(nixl->key, "pre");
  // A prefill-stage body on a decode worker, and a mixed worker, serve it normally.
  EXPECT_EQ(ParsePdRequest(PdRole::kDecode, PdProtocol::kVllmNixl,
                           R"({"kv_transfer_params":{"do_remote_decode":true}})", "x")
                ->stage,
            PdStage::kNone);
  EXPECT_EQ(ParsePdRequest(PdRole::kMixed, PdProtocol::kVllmNixl,
                           R"({"kv_transfer_params":{"do_remote_prefill":true}})", "x")
                ->stage,
            PdStage::kNone);
  auto moon = ParsePdRequest(
      PdRole::kDecode, PdProtocol::kVllmMooncake,
      R"({"kv_transfer_params":{"do_remote_prefill":true,"bootstrap_server_host":"h","bootstrap_server_port":"8998"}})",
      "rid");
  EXPECT_EQ(moon->key, "rid");
  EXPECT_EQ(moon->remote_host, "h");
  EXPECT_EQ(moon->remote_port, 8998);
  auto room = ParsePdRequest(PdRole::kPrefill, PdProtocol::kSglangBootstrap,
                             R"({"bootstrap_room":9223372036854775807})", "x");
  EXPECT_EQ(room->key, "room-9223372036854775807");
  EXPECT_TRUE(room->prefill_only);
  EXPECT_FALSE(ParsePdRequest(PdRole::kPrefill, PdProtocol::kSglangBootstrap,
                              R"({"bootstrap_room":-1})", "x")
                   .ok());
  EXPECT_EQ(P2pPrefillAddress("___prefill_addr_10.0.1.2:21001___decode_addr_10.0.1.3:22001_ab"),
            "10.0.1.2:21001");
  EXPECT_EQ(P2pPrefillAddress("plain-id"), "");
  auto p2p = ParsePdRequest(PdRole::kDecode, PdProtocol::kVllmP2pNccl, "{}",
                            "___prefill_addr_10.0.1.2:21001___decode_addr_10.0.1.3:22001_ab");
  EXPECT_EQ(p2p->remote_host, "10.0.1.2");
  EXPECT_EQ(p2p->remote_port, 21001);
}

TEST(PdProtocolTest, CliFlags) {
  std::vector<const char*> args = {"kvgate-sim",
                                   "--role",
                                   "prefill",
                                   "--pd-protocol",
                                   "sglang-bootstrap",
                                   "--bootstrap-port",
                                   "8998",
                                   "--pd-abort-timeout-s",
                                   "30"};
  auto o = ParseSimCli(static_cast<int>(args.size()), args.data());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->role, PdRole::kPrefill);
  EXPECT_EQ(o->pd_protocol, PdProtocol::kSglangBootstrap);
  EXPECT_EQ(o->bootstrap_port, 8998);
  EXPECT_DOUBLE_EQ(o->pd_abort_timeout_s, 30);
  std::vector<const char*> bad = {"kvgate-sim", "--role", "both"};
  EXPECT_FALSE(ParseSimCli(3, bad.data()).ok());
  std::vector<const char*> none = {"kvgate-sim"};
  auto d = ParseSimCli(1, none.data());
  EXPECT_EQ(d->role, PdRole::kMixed);
  EXPECT_EQ(d->pd_protocol, PdProtocol::kVllmNixl);
  EXPECT_DOUBLE_EQ(d->pd_abort_timeout_s, 480);
}

}  // namespace
}  // namespace kvgate::sim
