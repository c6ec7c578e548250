// File: sim/pd_agent.h
// One P/D worker's KV connector (vLLM's NixlConnector / MooncakeConnector / P2pNcclConnector,
// SGLang's bootstrap server, all at once): a side-channel TCP listener on the bootstrap port,
// and a transfer/ engine (tcp transport) whose registered memory holds the prefilled prompts'
// KV at store_bytes_per_token real bytes a token.
//   Prefill: Hold() registers a finished request's KV under its key; its engine blocks stay
//   pinned until a decode frees them or pd_abort_timeout_s passes.
//   Decode: Pull() asks the prefill's side channel for the key (vllm-mooncake and
//   sglang-bootstrap wait up to pd_wait_timeout_s for a prefill that has not finished), reads the
//   bytes with one transfer READ, checks them, and tells the prefill to free. Any failure returns
//   0: recompute.
// Side-channel wire: one JSON object a line each way, on one connection per pull:
//   {"op":"get","key":K,"engine_id":E,"wait_ms":W} ->
//     {"ok":true,"engine_id":E,"segment":"<descriptor JSON>","addr":A,"bytes":N,"tokens":T}
//   {"op":"free","key":K} -> {"ok":true}; errors -> {"ok":false,"error":"..."}.
// Thread-compatible: io thread only (the transfer engine serves peers on its own threads).
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sim/cli.h"
#include "sim/engine_runner.h"
#include "sim/pd_protocol.h"
#include "simdjson.h"
#include "transfer/transfer_engine.h"

namespace kvgate::sim {

struct PdCounters {
  uint64_t prefill_requests = 0;   // Requests that ran as a prefill stage (KV held).
  uint64_t decode_requests = 0;    // Requests that ran as a decode stage (pulled or recomputed).
  uint64_t transfer_bytes = 0;     // Real bytes this decode pulled.
  uint64_t transfer_tokens = 0;    // Prompt tokens whose KV this decode pulled.
  uint64_t pull_failures = 0;      // Decodes that recomputed instead.
  uint64_t released_pulled = 0;    // Prefill KV freed by its decode...
  uint64_t released_timeout = 0;   // ...after pd_abort_timeout_s...
  uint64_t released_replaced = 0;  // ...or by a newer request under the same key.
};

/// Appends the kvgate_sim_pd_* families (zeros for a mixed worker).
void AppendPdMetrics(const PdCounters& c, uint64_t held_blocks, uint64_t held_requests,
                     std::string* out);

class PdAgent {
 public:
  /// Binds worker `worker`'s side channel and starts its transfer engine.
  /// @return kUnavailable when the port cannot be bound or the engine cannot start.
  static absl::StatusOr<std::unique_ptr<PdAgent>> Create(net::io_context& io,
                                                         const SimOptions& options, uint32_t worker,
                                                         const SimClock& clock);
  ~PdAgent();
  PdAgent(const PdAgent&) = delete;
  PdAgent& operator=(const PdAgent&) = delete;

  uint16_t port() const { return port_; }
  /// vLLM's remote_engine_id (the transfer segment's name).
  const std::string& engine_id() const { return engine_id_; }

  struct Held;
  /// Prefill: the finished `hold` request `request` on `runner` now waits under `key`.
  std::shared_ptr<Held> Hold(const std::string& key, EngineRunner& runner, uint64_t request,
                             absl::Span<const uint32_t> prompt);
  /// vLLM NIXL's response kv_transfer_params for `held` (request id `request_id`).
  std::string KvTransferParams(const Held& held, const std::string& request_id) const;
  /// Returns once `held` was pulled or timed out.
  net::awaitable<void> AwaitRelease(std::shared_ptr<Held> held);

  /// Decode: pulls the KV of `prompt` as `r` says. @return the prompt tokens received, 0 when
  /// the decode must recompute (logged).
  net::awaitable<uint32_t> Pull(const PdRequest& r, absl::Span<const uint32_t> prompt);
  /// Decode: waits until the real model's KV for `tokens` would have arrived, counting from
  /// simulated time `arrived`.
  net::awaitable<void> AwaitTransferTime(double arrived, uint32_t tokens);

  const PdCounters& counters() const { return counters_; }
  size_t held_requests() const { return held_.size(); }

 private:
  PdAgent(net::io_context& io, const SimOptions& options, const SimClock& clock);
  net::awaitable<void> AcceptLoop();
  net::awaitable<void> Serve(net::ip::tcp::socket socket);
  net::awaitable<std::string> Answer(std::string line);
  void Release(std::shared_ptr<Held> held, std::string_view reason);
  uint32_t Fail(const PdRequest& r, std::string_view why);

  net::io_context& io_;
  const SimOptions& o_;
  const SimClock& clock_;
  net::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::string engine_id_;
  class PeerMetadata;
  PeerMetadata* metadata_ = nullptr;  // Owned by transfer_.
  std::unique_ptr<transfer::TransferEngine> transfer_;
  absl::flat_hash_map<std::string, std::shared_ptr<Held>> held_;
  // Side-channel gets waiting for a key that is not held yet (cancelled by Hold()).
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<net::steady_timer>>> waiters_;
  simdjson::dom::parser json_;
  PdCounters counters_;
};

}  // namespace kvgate::sim
