// File: router/http/exchange.h
// One request and its response while the gateway serves it, split by who writes what:
//  - the request, as the session stage read it (head, body, id, endpoint label, timing);
//  - the response state (`ResponseState`), which only the response writer
//    (http/response_writer.h) can change: status, whether the connection stays open, bytes
//    sent; every other stage reads it, and says what happened through the writer's functions;
//  - the access record, filled by the stages that know each field (model, worker, attempts,
//    time to first byte, cached tokens), and recorded by the session for every request,
//    including the ones refused at the header stage.
// Thread-compatible: lives on its connection's gateway thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/http1.h"
#include "router/http/client_connection.h"
#include "router/runtime/admission.h"
#include "router/runtime/snapshot_lease.h"

namespace kvgate::router {

/// Bounded label values: known OpenAI paths keep their name, everything else is grouped.
enum class EndpointLabel : uint8_t {
  kChatCompletions,
  kCompletions,
  kEmbeddings,
  kModels,
  kTokenize,
  kDetokenize,
  kResponses,
  kMessages,
  kCountTokens,
  kHealth,
  kReady,
  kMetrics,
  kV1Other,
  kOther,
};
inline constexpr int kNumEndpointLabels = 14;
EndpointLabel EndpointLabelOf(std::string_view path);
std::string_view EndpointLabelName(EndpointLabel label);
/// The API family of an endpoint label (the `api` metric label): chat, completions, messages,
/// responses, other.
std::string_view EndpointLabelApi(EndpointLabel label);

/// The response as the client gets it. Its setters are private, and only the response writer
/// (ResponseStateWriter, in http/response_writer.cc) holds the key: a stage that wants a
/// different status or a closed connection asks the writer, which keeps the rules (draining,
/// framing, a 499 for a client that left) in one place.
class ResponseState {
 public:
  int status() const { return status_; }
  /// The connection stays open after this response.
  bool keep_alive() const { return keep_alive_; }
  /// Bytes went to the client: no other response can follow.
  bool started() const { return started_; }
  /// Response body bytes sent.
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  friend struct ResponseStateWriter;
  int status_ = 0;
  bool keep_alive_ = false;
  bool started_ = false;
  uint64_t bytes_sent_ = 0;
};

struct Exchange {
  explicit Exchange(ClientConnection& conn) : conn(conn) {}

  ClientConnection& conn;
  SnapshotLease snapshot;  // config, workers and policies this request is served with

  // The request.
  http1::RequestHead head;   // views into conn.in (or head_copy)
  std::string_view body;     // in conn.in, or in body_storage for a chunked body
  std::string body_storage;  // a de-chunked body, with simdjson's padding reserved
  size_t body_capacity = 0;  // readable bytes from body.data(): body and padding
  // A body kvgate rewrote before any worker saw it (P/D: the client's own transfer fields
  // dropped); `body` then points here. The original stays where it was: the canonical
  // request's views into it remain valid.
  std::string rewritten_body;
  size_t request_bytes = 0;  // bytes of conn.in this request occupies
  std::string request_id;
  std::string api_key;      // the name of the API key it came with (auth.api_keys), else empty
  AdmissionSlot admission;  // its place under limits.max_concurrent_requests, while it runs
  EndpointLabel endpoint = EndpointLabel::kOther;
  SteadyClock::time_point read_done{};

  // The response: read here, written through the response writer only.
  ResponseState response;

  // The access record.
  std::string model;
  std::string_view worker;  // the worker that answered (its name, kept alive by `snapshot`)
  int64_t worker_id = -1;
  uint32_t attempts = 0;
  double ttfb_seconds = -1;
  // x-kvgate-prediction for the attempt being relayed ("" none: routing.kvaware.
  // prediction_header off, or a policy that predicts nothing).
  std::string prediction;
  // x-kvgate-predicted-cached-tokens: the prompt tokens the decision expected the engine to find
  // cached (GPU, host or store), -1 none (same switch; policies that ignore the cache).
  int64_t predicted_cached_tokens = -1;
  int64_t cached_tokens = -1;
  int64_t prompt_tokens = -1;
  std::string response_id;         // POST /v1/responses: the id the worker gave the response
  std::string cors_origin;         // an allowed Origin (config `cors`), named back on the answer
  bool overhead_recorded = false;  // router overhead is measured at the first upstream write
};

}  // namespace kvgate::router
