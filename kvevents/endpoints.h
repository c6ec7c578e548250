// File: kvevents/endpoints.h
// vLLM's ZeroMQ endpoint rules, shared by the subscriber and kvgate-sim's publisher: where DP
// rank r publishes, and whether an endpoint is bound or connected. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::kvevents {

/// vLLM's offset_endpoint_port(): tcp://HOST:PORT -> tcp://HOST:(PORT+offset); ipc:// and
/// inproc:// get "_dp<offset>" appended (offset > 0). A wildcard or zero port is unchanged.
std::string OffsetEndpoint(std::string_view endpoint, uint32_t offset);

/// vLLM's rule: bind if the endpoint has '*' or "::" or is ipc:// or inproc://, else connect.
bool ShouldBind(std::string_view endpoint);

/// Whether only this host can reach the endpoint: tcp:// on 127.x, [::1] or localhost, ipc://,
/// inproc://. KV events carry token ids (decodable to prompt text), so publishers bind beyond
/// loopback only when told to.
bool IsLoopbackEndpoint(std::string_view endpoint);

}  // namespace kvgate::kvevents
