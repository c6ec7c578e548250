// libFuzzer target: the replica sync's frame decoder (router/cluster/cluster_message.h), what
// every replica runs on each message from the Redis channel and on each peer's snapshot. The
// magic and version are forced so the fuzzer spends its time in the records. A decoded frame
// must re-encode to bytes that decode to the same frame (unknown records aside, which are
// dropped), and nothing decoded may exceed the limits.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "router/cluster/cluster_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::router::cluster;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= 5) {
    const uint32_t magic = kFrameMagic;
    bytes.replace(0, 4, reinterpret_cast<const char*>(&magic), 4);
    bytes[4] = static_cast<char>(kFrameVersion);
  }
  DecodeLimits limits;
  limits.max_blocks = 1024;
  limits.max_records = 4096;
  auto f = DecodeFrame(bytes, limits);
  if (!f.ok()) return 0;
  for (const Record& r : f->records) {
    if (r.blocks.size() > limits.max_blocks) std::abort();
    if (r.text.size() > kMaxNameBytes || r.worker.size() > kMaxNameBytes) std::abort();
    for (const WorkerLoad& w : r.loads) {
      if (w.load.in_flight < 0 || w.load.pending_prefill_tokens < 0) std::abort();
    }
  }
  auto again = DecodeFrame(EncodeFrame(*f), limits);
  if (!again.ok() || again->records != f->records || again->seq != f->seq) std::abort();
  return 0;
}
