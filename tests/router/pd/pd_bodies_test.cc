// Golden tests of what each P/D protocol sends to prefill and to decode (reference/
// protocols.md §4), member by member: chat and completions, streamed and not, logprobs, DP.
#include "router/pd/pd_bodies.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router::pd {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kStreamedChat =
    R"({"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"you\""}],)"
    R"("stream":true,"stream_options":{"include_usage":true},"max_tokens":256,)"
    R"("min_tokens":8,"temperature":0.70,"logprobs":true,"top_logprobs":2})";

std::string Ok(absl::StatusOr<std::string> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

// A client's own transfer fields: whatever their type, they go; everything else stays as sent.
TEST(PdBodies, ClientTransferFieldsAreDropped) {
  EXPECT_EQ(DropTransferFields(R"({"model":"m","prompt":"a"})"), std::nullopt);
  // Named only inside a value: nothing to drop (the scan passes, the parse decides).
  EXPECT_EQ(DropTransferFields(R"({"prompt":"kv_transfer_params bootstrap_host"})"), std::nullopt);
  EXPECT_EQ(DropTransferFields(R"(["kv_transfer_params"])"), std::nullopt);
  EXPECT_EQ(DropTransferFields(R"({"model":"m","kv_transfer_params":{"do_remote_prefill":true,)"
                               R"("remote_host":"203.0.113.9","remote_port":5600},"prompt":"a"})"),
            R"({"model":"m","prompt":"a"})");
  EXPECT_EQ(DropTransferFields(R"({"text":"a","bootstrap_host":"203.0.113.9","bootstrap_port":)"
                               R"(1,"bootstrap_room":7,"disagg_prefill_dp_rank":0,"stream":true})"),
            R"({"text":"a","stream":true})");
  EXPECT_EQ(DropTransferFields(R"({"kv_transfer_params":null,"kv_transfer_params":1})"), "{}");
}

TEST(PdBodies, ProtocolNames) {
  for (auto p : {PdProtocol::kVllmNixl, PdProtocol::kVllmMooncake, PdProtocol::kVllmP2pNccl,
                 PdProtocol::kSglangBootstrap}) {
    EXPECT_EQ(PdProtocolFromName(PdProtocolName(p)), p);
  }
  EXPECT_EQ(PdProtocolFromName("nixl"), std::nullopt);
}

TEST(PdBodies, NixlPrefillOfAStreamedChat) {
  // Everything kvgate does not change keeps its bytes (the escapes, 0.70); stream_options and
  // min_tokens go; stream, max_tokens and kv_transfer_params are set in place or appended.
  EXPECT_EQ(Ok(VllmPrefillBody(kStreamedChat, kNixlPrefillParams)),
            R"({"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"you\""}],)"
            R"("stream":false,"max_tokens":1,"temperature":0.70,"logprobs":true,)"
            R"("top_logprobs":2,"kv_transfer_params":{"do_remote_decode":true,)"
            R"("do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,)"
            R"("remote_host":null,"remote_port":null}})");
}

TEST(PdBodies, NixlDecodeGetsTheOriginalBodyAndPrefillsParamsVerbatim) {
  const std::string prefill_response =
      R"({"id":"cmpl-1","choices":[{"text":"x"}],"usage":{"prompt_tokens":9},)"
      R"("kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,)"
      R"("remote_block_ids":[1,2,3],"remote_engine_id":"e-1","remote_host":"10.0.0.2",)"
      R"("remote_port":5600,"tp_size":1,"vendor_extra":{"a":[1]}}})";
  const std::string params = Ok(KvTransferParamsOf(prefill_response));
  EXPECT_EQ(params,
            R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],)"
            R"("remote_engine_id":"e-1","remote_host":"10.0.0.2","remote_port":5600,)"
            R"("tp_size":1,"vendor_extra":{"a":[1]}})");
  const std::string decode = Ok(VllmDecodeBody(kStreamedChat, params));
  EXPECT_EQ(decode, std::string(kStreamedChat.substr(0, kStreamedChat.size() - 1)) +
                        R"(,"kv_transfer_params":)" + params + "}");
}

TEST(PdBodies, PrefillOfANonStreamedCompletionWithMaxCompletionTokens) {
  const std::string body =
      R"({"model":"m","prompt":[1,2,3],"max_completion_tokens":64,"min_completion_tokens":2,)"
      R"("echo":false,"logprobs":5,"prompt_logprobs":1})";
  EXPECT_EQ(Ok(VllmPrefillBody(body, kMooncakePrefillParams)),
            R"({"model":"m","prompt":[1,2,3],"max_completion_tokens":1,"echo":false,)"
            R"("logprobs":5,"prompt_logprobs":1,"stream":false,"max_tokens":1,)"
            R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}})");
}

TEST(PdBodies, MooncakeDecodeParamsPointAtPrefillsBootstrapServer) {
  EXPECT_EQ(MooncakeDecodeParams("10.0.0.2", 8998),
            R"({"do_remote_decode":false,"do_remote_prefill":true,)"
            R"("bootstrap_server_host":"10.0.0.2","bootstrap_server_port":8998})");
  EXPECT_THAT(MooncakeDecodeParams("fd00::2", 8999), HasSubstr(R"("[fd00::2]")"));
  const std::string decode = Ok(VllmDecodeBody(R"({"model":"m","prompt":"p","stream":true})",
                                               MooncakeDecodeParams("h", 8998)));
  EXPECT_EQ(decode, R"({"model":"m","prompt":"p","stream":true,"kv_transfer_params":)"
                    R"({"do_remote_decode":false,"do_remote_prefill":true,)"
                    R"("bootstrap_server_host":"h","bootstrap_server_port":8998}})");
}

TEST(PdBodies, P2pNcclRequestIdHasTheShapeTheConnectorParses) {
  EXPECT_EQ(P2pNcclRequestId("10.0.1.2:21001", "10.0.1.3:22001", "0123abcd"),
            "___prefill_addr_10.0.1.2:21001___decode_addr_10.0.1.3:22001_0123abcd");
}

TEST(PdBodies, SglangBootstrapFieldsGoToBothStages) {
  EXPECT_EQ(Ok(SglangBody(kStreamedChat, "10.0.0.2", 8998, 12345)),
            std::string(kStreamedChat.substr(0, kStreamedChat.size() - 1)) +
                R"(,"bootstrap_host":"10.0.0.2","bootstrap_port":8998,"bootstrap_room":12345})");
  // 63 bits, IPv6 bracketed; with DP, decode names its own rank and prefill's.
  const std::string dp =
      Ok(SglangBody(R"({"model":"m","text":"t"})", "fd00::1", 9000, ~uint64_t{0}, 3, 1));
  EXPECT_EQ(dp, R"({"model":"m","text":"t","bootstrap_host":"[fd00::1]","bootstrap_port":9000,)"
                R"("bootstrap_room":9223372036854775807,"routed_dp_rank":3,)"
                R"("disagg_prefill_dp_rank":1})");
  EXPECT_EQ(Ok(SglangBody(R"({"model":"m"})", "h", 1, 2, 0)),
            R"({"model":"m","bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":2,)"
            R"("routed_dp_rank":0})");
  // A batch would need a room per prompt: refused, with the reason.
  EXPECT_THAT(std::string(SglangBody(R"({"text":["a","b"]})", "h", 1, 2).status().message()),
              ::testing::HasSubstr("batch"));
  EXPECT_FALSE(SglangBody(R"({"input_ids":[ [1,2],[3]]})", "h", 1, 2).ok());
  EXPECT_TRUE(SglangBody(R"({"input_ids":[1,2]})", "h", 1, 2).ok());
  // A client's own bootstrap fields are replaced, not duplicated.
  EXPECT_EQ(Ok(SglangBody(R"({"bootstrap_room":1,"model":"m"})", "h", 1, 2)),
            R"({"bootstrap_room":2,"model":"m","bootstrap_host":"h","bootstrap_port":1})");
}

TEST(PdBodies, SglangInputLogprobsOfPrefillComeFirst) {
  EXPECT_TRUE(WantsInputLogprobs(R"({"text":"hi","return_logprob":true})"));
  EXPECT_FALSE(WantsInputLogprobs(R"({"text":"hi","return_logprob":true,"stream":true})"));
  EXPECT_FALSE(WantsInputLogprobs(R"({"text":"hi"})"));
  EXPECT_FALSE(WantsInputLogprobs("nope"));
  const std::string prefill =
      R"({"text":"x","meta_info":{"id":"p","input_token_logprobs":[[-1.5,11,null],[-0.2,12,null]]}})";
  const std::string decode =
      R"({"text":"hello","meta_info":{"id":"d","input_token_logprobs":[ [-0.1,13,null] ],)"
      R"("output_token_logprobs":[[-0.3,99,null]]}})";
  EXPECT_EQ(Ok(MergeInputLogprobs(prefill, decode)),
            R"({"text":"hello","meta_info":{"id":"d","input_token_logprobs":)"
            R"([[-1.5,11,null],[-0.2,12,null],[-0.1,13,null]],)"
            R"("output_token_logprobs":[[-0.3,99,null]]}})");
  // Decode's list empty: prefill's alone; either without the list: decode's answer as it is.
  EXPECT_EQ(Ok(MergeInputLogprobs(prefill, R"({"meta_info":{"input_token_logprobs":[]}})")),
            R"({"meta_info":{"input_token_logprobs":[[-1.5,11,null],[-0.2,12,null]]}})");
  EXPECT_EQ(Ok(MergeInputLogprobs(R"({"meta_info":{}})", decode)), decode);
  EXPECT_FALSE(MergeInputLogprobs("[1]", decode).ok());
}

TEST(PdBodies, RewriteKeepsWhitespaceInsideValuesAndDropsDuplicatesOfSetMembers) {
  constexpr std::string_view kBody = R"( { "a" : [ 1 , 2 ] , "b":true , "a":3 , "c" : null } )";
  const JsonMember b[] = {{"b", "false"}};
  EXPECT_EQ(Ok(RewriteTopLevel(kBody, {}, b)), R"({"a":[ 1 , 2 ],"b":false,"a":3,"c":null})");
  const JsonMember a[] = {{"a", "0"}};
  constexpr std::string_view kRemoveC[] = {"c"};
  EXPECT_EQ(Ok(RewriteTopLevel(kBody, kRemoveC, a)), R"({"a":0,"b":true})");
}

TEST(PdBodies, MalformedBodiesAreClearErrors) {
  // Nested values are validated too (the fuzzer found a body with an invalid nested value
  // passing: kvgate must not forward a body it could not parse again).
  for (std::string_view bad :
       {"", "[1]", "{", R"({"a":})", R"({"a":1} x)", R"({"a":tru})", R"({"a":"\x"})", "\"s\"",
        R"({"m":{%x},"n":1})", R"({"m":[1,tru]})"}) {
    auto r = VllmPrefillBody(bad, kNixlPrefillParams);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("request body")) << bad;
    }
  }
  EXPECT_TRUE(absl::IsNotFound(KvTransferParamsOf(R"({"kv_transfer_params":null})").status()));
  EXPECT_TRUE(absl::IsNotFound(KvTransferParamsOf(R"({"choices":[]})").status()));
}

// Anthropic /v1/messages through vLLM's P/D: stream off, one token, an enabled thinking budget
// dropped (it must stay below max_tokens), a disabled one kept (it changes the prompt).
TEST(PdBodies, VllmMessagesPrefill) {
  constexpr std::string_view kMessages =
      R"({"model":"m","system":[{"type":"text","text":"s"}],"max_tokens":4096,"stream":true,)"
      R"("thinking":{"budget_tokens":2048,"type":"enabled"},)"
      R"("messages":[{"role":"user","content":"q"}],"metadata":{"user_id":"u"}})";
  EXPECT_EQ(Ok(VllmMessagesPrefillBody(kMessages, kNixlPrefillParams)),
            R"({"model":"m","system":[{"type":"text","text":"s"}],"max_tokens":1,"stream":false,)"
            R"("messages":[{"role":"user","content":"q"}],"metadata":{"user_id":"u"},)"
            R"("kv_transfer_params":)" +
                std::string(kNixlPrefillParams) + "}");
  constexpr std::string_view kDisabled =
      R"({"model":"m","max_tokens":9,"thinking":{"type":"disabled"},"messages":[]})";
  EXPECT_EQ(Ok(VllmMessagesPrefillBody(kDisabled, "")),
            R"({"model":"m","max_tokens":1,"thinking":{"type":"disabled"},"messages":[],)"
            R"("stream":false})");
  EXPECT_FALSE(VllmMessagesPrefillBody("[1]", "").ok());
}

}  // namespace
}  // namespace kvgate::router::pd
