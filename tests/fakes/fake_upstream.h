// File: tests/fakes/fake_upstream.h
// A fake OpenAI-compatible inference worker for tests, the demo and proxy benchmarks. It
// streams SSE tokens with delays and can fail in every way a real worker does. Behaviour per
// request comes from headers (so one fake serves many test cases at once), defaults from
// Options:
//   x-fake-status: 503        answer with that status and an OpenAI error body
//   x-fake-chunks: N          stream N content events (default Options::chunks)
//   x-fake-delay-ms: D        wait D ms before each event (default Options::delay_ms)
//   x-fake-chunk-bytes: B     pad each event's content to B bytes
//   x-fake-cached-tokens: N   usage.prompt_tokens_details.cached_tokens (default 64)
//   x-fake-mode: hang         read the request, never answer
//   x-fake-mode: close-mid    stream half the events, then close the connection
//   x-fake-mode: lockstep     send event i only after ReleaseChunk() was called i times
// Streaming is chosen by the body's "stream": true, as with vLLM. GET /health, /v1/models and
// /metrics (a few vllm:* gauges) answer like a worker and are not counted as requests.
// Thread-safe: all public methods may be called from any thread while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvgate::testing {

class FakeUpstream {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    uint32_t threads = 1;
    uint32_t chunks = 8;
    uint32_t delay_ms = 0;
    std::string model = "fake-model";
    int force_status = 0;  // non-zero: every completion request gets this status
    bool healthy = true;   // false: GET /health answers 503
  };

  explicit FakeUpstream(Options options);
  ~FakeUpstream();

  /// Binds and starts serving; port() is valid afterwards.
  void Start();
  void Stop();

  uint16_t port() const;
  std::string url() const;

  void set_force_status(int status);
  void set_healthy(bool healthy);

  /// Lets the next event of every lockstep stream go out.
  void ReleaseChunk();

  uint64_t requests() const;       // completion requests received
  uint64_t connections() const;    // TCP connections accepted
  uint64_t health_checks() const;  // GET /health received
  uint64_t cancelled() const;      // streams whose client (the gateway) went away early
  uint64_t completed_streams() const;
  uint64_t streamed_bytes() const;  // bytes of SSE events written so far
  int64_t active() const;           // requests being answered now
  std::string last_request_id() const;
  std::string last_body() const;
  std::string last_header(const std::string& name) const;

  /// The exact SSE body a non-faulty stream of `chunks` events produces (for byte checks).
  static std::string ExpectedStream(uint32_t chunks, uint32_t chunk_bytes, const std::string& model,
                                    const std::string& request_id);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::testing
