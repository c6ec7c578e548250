// The proxy handler against a fake dispatcher (tests/router/fakes): what it refuses before
// dispatch (a body that is not JSON, an unknown stored response), the plan it hands the
// dispatcher (every available worker, learning off for count_tokens), and the response pins it
// learns from a stored OpenAI response and routes a continuation by. No sockets, no workers.
#include "router/handlers/proxy_handler.h"

#include "gtest/gtest.h"
#include "tests/router/fakes/fake_dispatcher.h"
#include "tests/router/fakes/thread_harness.h"

namespace kvgate::router {
namespace {

using testing::FakeDispatcher;
using testing::ThreadHarness;

class ProxyHandlerTest : public ::testing::Test {
 protected:
  // Serves one POST through the handler; returns the status the client got.
  int Post(std::string path, std::string body) {
    exchanges_.push_back(h_.NewExchange(std::move(path), std::move(body)));
    Exchange& ex = *exchanges_.back();
    h_.Run(HandleProxy(h_.state(), h_.tc(), ex, dispatcher_));
    return ex.response.status();
  }

  ThreadHarness h_{3};
  FakeDispatcher dispatcher_;
  std::vector<std::unique_ptr<Exchange>> exchanges_;  // after h_: destroyed first
};

TEST_F(ProxyHandlerTest, ABodyThatIsNotJsonIsRefusedWithoutDispatch) {
  EXPECT_EQ(Post("/v1/chat/completions", "{not json"), 400);
  EXPECT_TRUE(dispatcher_.seen().empty());
}

TEST_F(ProxyHandlerTest, AValidRequestIsPlannedOverEveryAvailableWorker) {
  EXPECT_EQ(
      Post("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"),
      200);
  ASSERT_EQ(dispatcher_.seen().size(), 1u);
  const auto& seen = dispatcher_.seen()[0];
  EXPECT_EQ(seen.available,
            (std::vector<std::string>{"http://w0:8000", "http://w1:8000", "http://w2:8000"}));
  EXPECT_TRUE(seen.learn);
  EXPECT_EQ(seen.model, "m");
}

TEST_F(ProxyHandlerTest, AWorkerThatIsDownIsNotPlanned) {
  h_.snapshot().workers[1]->MarkUnchecked();  // not healthy until checked
  EXPECT_EQ(Post("/v1/completions", R"({"model":"m","prompt":"hi"})"), 200);
  ASSERT_EQ(dispatcher_.seen().size(), 1u);
  EXPECT_EQ(dispatcher_.seen()[0].available,
            (std::vector<std::string>{"http://w0:8000", "http://w2:8000"}));
}

TEST_F(ProxyHandlerTest, CountTokensDoesNotLearn) {
  EXPECT_EQ(Post("/v1/messages/count_tokens",
                 R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"),
            200);
  ASSERT_EQ(dispatcher_.seen().size(), 1u);
  EXPECT_FALSE(dispatcher_.seen()[0].learn);
}

TEST_F(ProxyHandlerTest, AStoredResponseIsContinuedOnTheWorkerThatHoldsIt) {
  dispatcher_.AnswerWith(200, "resp_1");
  ASSERT_EQ(Post("/v1/responses", R"({"model":"m","input":"hi","store":true})"), 200);
  ASSERT_EQ(dispatcher_.seen().size(), 1u);
  const std::string holder = dispatcher_.seen()[0].available.front();

  dispatcher_.AnswerWith(200, "resp_2");
  ASSERT_EQ(
      Post("/v1/responses", R"({"model":"m","input":"more","previous_response_id":"resp_1"})"),
      200);
  ASSERT_EQ(dispatcher_.seen().size(), 2u);
  EXPECT_EQ(dispatcher_.seen()[1].available, std::vector<std::string>{holder});
  EXPECT_EQ(dispatcher_.seen()[1].pinned_response, "resp_1");
}

TEST_F(ProxyHandlerTest, AnUnknownPreviousResponseIs404WithoutDispatch) {
  EXPECT_EQ(Post("/v1/responses",
                 R"({"model":"m","input":"more","previous_response_id":"resp_unknown"})"),
            404);
  EXPECT_TRUE(dispatcher_.seen().empty());
}

TEST_F(ProxyHandlerTest, AFailedStoredResponseIsNotPinned) {
  dispatcher_.AnswerWith(500, "resp_failed");
  ASSERT_EQ(Post("/v1/responses", R"({"model":"m","input":"hi","store":true})"), 500);
  dispatcher_.AnswerWith(200);
  EXPECT_EQ(
      Post("/v1/responses", R"({"model":"m","input":"more","previous_response_id":"resp_failed"})"),
      404);
  EXPECT_EQ(dispatcher_.seen().size(), 1u);
}

}  // namespace
}  // namespace kvgate::router
