// libFuzzer target for the KV-event decoder (vLLM/SGLang msgpack event batches) and the
// sequence-frame helpers. Built and run by tests/fuzz/run_fuzzers.sh with
// clang++ -fsanitize=fuzzer,address,undefined. The input is copied to a heap buffer of exactly
// its size, so ASan catches any read past the payload.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvevents/event_decoder.h"

namespace {

void Check(bool ok) {
  if (!ok) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::kvevents;
  const std::vector<char> payload(data, data + size);
  const std::string_view view(payload.data(), payload.size());

  absl::StatusOr<EventBatch> batch = DecodeEventBatch(view);
  if (batch.ok()) {
    // Each decoded event took bytes of the payload.
    Check(batch->events.size() + batch->ignored_events <= size);
    for (const KvEvent& event : batch->events) {
      if (const auto* stored = std::get_if<BlockStored>(&event)) {
        Check(stored->block_hashes.size() <= size);
        Check(stored->token_ids.size() <= size);
        Check(stored->block_size == 0 ||
              stored->token_ids.size() == stored->block_hashes.size() * stored->block_size);
      } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
        Check(removed->block_hashes.size() <= size);
      }
    }
  } else {
    Check(batch.status().code() == absl::StatusCode::kInvalidArgument);
    Check(!batch.status().message().empty());
  }

  // Decoding is deterministic.
  absl::StatusOr<EventBatch> again = DecodeEventBatch(view);
  Check(again.ok() == batch.ok());
  if (batch.ok()) {
    Check(again->events.size() == batch->events.size());
    Check(again->ignored_events == batch->ignored_events);
  }

  // Sequence frames: exactly 8 bytes decode, and round-trip.
  const std::optional<uint64_t> seq = DecodeSequence(view);
  Check(seq.has_value() == (size == 8));
  if (seq.has_value()) {
    Check(EncodeSequence(*seq) == view);
  }
  return 0;
}
