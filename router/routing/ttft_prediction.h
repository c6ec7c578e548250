// File: router/routing/ttft_prediction.h
// kvaware's predicted time to first token against the one observed (issue 30): the error that
// kvgate_ttft_prediction_error_ratio records, and the x-kvgate-prediction header that lets a
// replay compare each request's prediction with its client's TTFT. Pure functions.
#pragma once

#include <string>

#include "router/policies/routing_policy.h"

namespace kvgate::router {

/// How far a predicted time to first token was from the observed one.
struct TtftError {
  double relative = 0;      // (predicted - actual) / actual: > 0 predicted too slow
  double abs_relative = 0;  // |relative|
};

/// The error of `predicted_s` against `actual_s` (> 0).
TtftError TtftPredictionError(double predicted_s, double actual_s);

/// x-kvgate-prediction's value:
/// "ttft=T;queue=Q;prefill=P;host=H;store=S;decode=D;kv_wait=K;overhead=O", seconds with four
/// decimals.
std::string PredictionHeader(const TtftParts& parts);

}  // namespace kvgate::router
