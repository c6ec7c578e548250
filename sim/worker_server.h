// File: sim/worker_server.h
// One simulated vLLM server (a --workers entry): an HTTP port in front of dp_size engines, with
// its own agent-API state (stored responses) and, on a P/D role, its own PdAgent. It routes each
// request (server.h lists the endpoints), admits it (--crash-after, --slow-start, the injected
// faults), reads its prompt (request_parser.h, or agent_api.h for the agents' APIs), runs it on
// an engine and streams the answer through the API's AnswerWriter. SimProcess (server.h) owns
// the workers; this header is internal to the simulator (it brings Asio and Beast).
// Thread-compatible: everything runs on the io thread.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "kvindex/canonicalize.h"
#include "sim/agent_api.h"
#include "sim/cli.h"
#include "sim/engine_runner.h"
#include "sim/pd_agent.h"
#include "sim/pd_protocol.h"
#include "sim/request_parser.h"
#include "sim/store_cache.h"

namespace kvgate::sim {

class SimServer {
 public:
  /// `store`: the --store client every engine shares, or null. `events_io`: the process's
  /// KV-event thread, where every publisher call of this server's engines runs.
  SimServer(net::io_context& io, net::io_context& events_io, zmq::context_t& zmq_context,
            const SimOptions& options, uint32_t index, const SimClock& clock,
            std::shared_ptr<store::StoreClient> store);
  ~SimServer();
  SimServer(const SimServer&) = delete;
  SimServer& operator=(const SimServer&) = delete;

  /// Creates the engines and their event publishers, binds the HTTP port, starts accepting.
  /// @return kUnavailable when the port cannot be bound, kInvalidArgument for a bad endpoint.
  absl::Status Start();

  uint16_t port() const { return port_; }
  const std::vector<std::unique_ptr<EngineRunner>>& runners() const { return runners_; }
  uint64_t requests() const { return requests_; }
  uint16_t bootstrap_port() const { return pd_ ? pd_->port() : 0; }

 private:
  using tcp = net::ip::tcp;
  using Stream = boost::beast::tcp_stream;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Status = boost::beast::http::status;

  enum class Fault { kNone, kError, kHang, kClose };

  // What every generating request shares before its body is read: its number, --crash-after,
  // its X-Request-Id, --slow-start and the injected faults.
  struct Admission {
    uint64_t n = 0;
    std::string request_id;
    Fault fault = Fault::kNone;
    std::optional<bool> ended;  // Set: the request was answered (or hung); keep the connection?
  };

  // Replay requests are otherwise answered only after a publish; poll them while idle too.
  void ArmReplayTimer();
  net::awaitable<void> AcceptLoop();
  net::awaitable<void> Session(tcp::socket socket);
  // Each @return: whether the connection stays open.
  net::awaitable<bool> Send(Stream& stream, const Request& req, Status status,
                            std::string_view type, std::string body,
                            const std::string& request_id = "");
  net::awaitable<bool> SendError(Stream& stream, const Request& req, Status status,
                                 std::string_view message, std::string_view type,
                                 const std::string& request_id = "",
                                 ErrorStyle style = ErrorStyle::kOpenAi);
  net::awaitable<bool> SendAnswer(Stream& stream, const Request& req, const HttpAnswer& answer,
                                  const std::string& request_id);
  // --slow-start: still answering 503.
  bool Starting() const;
  // Routes one request by method and path.
  net::awaitable<bool> Handle(Stream& stream, Request& req);
  // x-sim-fault, else a draw against the fault rates (deterministic per seed, worker, request).
  Fault DrawFault(const Request& req, uint64_t n) const;
  // X-data-parallel-rank's engine (`*status` when out of range), else the least loaded.
  EngineRunner& PickRunner(const Request& req, absl::Status* status);
  net::awaitable<Admission> Admit(Stream& stream, const Request& req, ErrorStyle style);
  // POST /v1/chat/completions and /v1/completions.
  net::awaitable<bool> Completion(Stream& stream, const Request& req, kvindex::ApiKind api);
  // POST /v1/messages and /v1/responses: converted to chat (agent_api.h), then run as a chat
  // completion (served whole on a P/D worker: their P/D fields are not read).
  net::awaitable<bool> Agent(Stream& stream, const Request& req, kvindex::ApiKind api);
  // POST /v1/messages/count_tokens: the prompt's tokens; no generation, no cache change.
  net::awaitable<bool> CountTokens(Stream& stream, const Request& req);
  // The part every API shares once its prompt is known: the model, P/D fields (`pd_fields`),
  // the length limits, the DP rank, the engine, then the answer, which `w` renders.
  net::awaitable<bool> Generate(Stream& stream, const Request& req, const Admission& a,
                                ErrorStyle style, ParsedRequest& parsed, bool pd_fields,
                                AnswerWriter& w);
  // A request in an engine, from its submission to its answer.
  struct Generation {
    std::shared_ptr<Pending> pending;
    EngineRunner* runner = nullptr;
    uint64_t engine_id = 0;
    PdRequest pd;
    bool hold = false;  // a P/D prefill still keeping its prompt's blocks for the decode
    std::vector<uint32_t> held_prompt;
  };
  // The model, the P/D fields (into `*pd`) and the length limits. @return set: the error
  // answered (whether the connection stays open).
  net::awaitable<std::optional<bool>> Reject(Stream& stream, const Request& req,
                                             const std::string& request_id, ErrorStyle style,
                                             ParsedRequest& parsed, bool pd_fields, PdRequest* pd);
  // Submits the prompt to `runner` (a P/D decode first pulls the prefill's KV).
  net::awaitable<void> Submit(EngineRunner& runner, uint64_t engine_id, ParsedRequest& parsed,
                              Generation* g);
  // The answer as one body once the engine finished (none on an injected close).
  net::awaitable<bool> AnswerWhole(Stream& stream, const Request& req, const Admission& a,
                                   Generation& g, AnswerWriter& w);
  // The answer as server-sent events, each batch of tokens as they come (cut halfway on an
  // injected close).
  net::awaitable<bool> AnswerStream(Stream& stream, const Request& req, const Admission& a,
                                    uint32_t max_tokens, Generation& g, AnswerWriter& w);
  // A request that ends before its KV is handed to the agent must not keep its blocks.
  void Drop(const Generation& g);
  UsageCounts Usage(const Generation& g) const;
  // Hands a finished prefill's KV to the agent; @return the response's kv_transfer_params.
  // sglang-bootstrap answers only once the decode took the KV (or it timed out).
  net::awaitable<std::string> FinishPrefill(const PdRequest& pd, EngineRunner& runner,
                                            uint64_t engine_id,
                                            const std::vector<uint32_t>& prompt);
  std::string ModelsJson() const;
  // GET /debug/blocks: each rank's cached block hashes, per medium (group 0), and with a hybrid
  // profile each group's GPU hashes.
  std::string BlocksJson() const;
  // The usage's kv_store_tokens: only with a store.
  std::optional<uint32_t> StoreTokens(const Pending& p) const;

  net::io_context& io_;
  net::io_context& events_io_;
  zmq::context_t& zmq_;
  const SimOptions& o_;
  const uint32_t index_;
  const SimClock& clock_;
  std::shared_ptr<store::StoreClient> store_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<StoreKvCache>> caches_;  // Before runners_: outlive the engines.
  std::vector<std::unique_ptr<EngineRunner>> runners_;
  std::unique_ptr<PdAgent> pd_;  // P/D roles only; after runners_: it frees their held blocks.
  std::optional<net::steady_timer> replay_timer_;  // on events_io_
  RequestParser parser_{o_};
  AgentApi agents_{o_};  // Its store of responses is this worker's own.
  uint64_t requests_ = 0;
};

}  // namespace kvgate::sim
