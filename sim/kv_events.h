// File: sim/kv_events.h
// The simulator publishes vLLM's KV events with kvevents/publisher.h; these are its names here.
#pragma once

#include "kvevents/endpoints.h"
#include "kvevents/publisher.h"
#include "sim/block_pool.h"  // KvEvent, Medium

namespace kvgate::sim {

using kvevents::EncodeEventBatch;
using kvevents::EventEncoding;
using kvevents::KvEventPublisher;
using kvevents::OffsetEndpoint;
using kvevents::PublisherOptions;
using kvevents::ShouldBind;

}  // namespace kvgate::sim
