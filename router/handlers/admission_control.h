// File: router/handlers/admission_control.h
// The route table's admission stage for inference routes (Route::limited): the caller's rate
// limits (per API key, else per client address; 429 with Retry-After) and then a place under
// the global concurrency cap, waiting in its queue if need be (503 with Retry-After when the
// queue is full or the wait runs out). The place is held in the exchange until the response
// ends. One client (API key, else address) may wait in at most its share of the queue
// (limits.queue_share_per_client; 429 with Retry-After beyond it). Thread-safe (state in
// GatewayState).
#pragma once

#include "router/http/route_table.h"

namespace kvgate::router {

class GatewayState;

PreHandlerPtr MakeAdmissionControl(GatewayState& state);

}  // namespace kvgate::router
