#include "router/routing/ttft_prediction.h"

#include <cmath>

#include "fmt/format.h"

namespace kvgate::router {

TtftError TtftPredictionError(double predicted_s, double actual_s) {
  TtftError e;
  e.relative = (predicted_s - actual_s) / actual_s;
  e.abs_relative = std::abs(e.relative);
  return e;
}

std::string PredictionHeader(const TtftParts& p) {
  return fmt::format(
      "ttft={:.4f};queue={:.4f};prefill={:.4f};host={:.4f};store={:.4f};"
      "decode={:.4f};kv_wait={:.4f};overhead={:.4f}",
      p.total(), p.queue, p.prefill, p.host_load, p.store_load, p.decode_interference, p.kv_wait,
      p.overhead);
}

}  // namespace kvgate::router
