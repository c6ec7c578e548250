// File: bench/replay/trace.h
// The two trace formats kvgate-replay reads (see shared/data/README.md): Mooncake JSONL
// (open-loop, 512-token hash_id blocks, global ids) and agentic session JSON (closed-loop,
// 64-token blocks scoped to one conversation, nested sub-agents). Plain value types and pure
// parsing functions; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvgate::replay {

inline constexpr uint32_t kMooncakeBlockTokens = 512;
inline constexpr uint32_t kAgenticBlockTokens = 64;

/// One line of a Mooncake trace.
struct MooncakeRequest {
  double timestamp_ms = 0;  // Arrival time from the start of the trace.
  uint64_t input_length = 0;
  uint64_t output_length = 0;
  std::vector<uint64_t> hash_ids;  // One per 512-token block; the last block may be partial.
  int line = 0;                    // 1-based line in the file.
};

/// One model call of an agentic conversation.
struct AgentRequest {
  double t = 0;           // Seconds since the (sub-)conversation started.
  uint64_t in = 0;        // Input tokens.
  uint64_t out = 0;       // Output tokens.
  double think_time = 0;  // Client-side delay between the previous answer and this request.
  double api_time = 0;    // How long the original server took (used only for estimates).
  std::vector<uint64_t> hash_ids;  // One per full 64-token block.
};

/// A conversation (the root session of a file, or a sub-agent of it). Sub-agents share the
/// root's hash-id space and start at `t` seconds after their parent started.
struct AgentSession {
  std::string id;  // File id for the root; "<root id>/<agent_id>" for sub-agents.
  double t = 0;    // Start offset within the parent (0 for the root).
  uint64_t tool_tokens = 0;
  uint64_t system_tokens = 0;
  std::vector<AgentRequest> requests;   // Closed-loop turns, in order.
  std::vector<AgentSession> subagents;  // Each runs concurrently with the parent from `t`.

  /// Number of leading blocks holding tool definitions + system prompt.
  uint64_t PrefixBlocks() const { return (tool_tokens + system_tokens) / kAgenticBlockTokens; }
  /// Requests of this session and all its sub-agents.
  uint64_t TotalRequests() const;
};

/// Parses a Mooncake JSONL document. Blank lines are skipped. A malformed line fails the whole
/// parse with kInvalidArgument "<name>:<line>: <reason>" (all bad lines are listed, up to 10).
absl::StatusOr<std::vector<MooncakeRequest>> ParseMooncakeJsonl(std::string_view content,
                                                                std::string_view name);

/// Parses one agentic session JSON document. Errors are kInvalidArgument naming `name` and the
/// JSON path of the offending field (e.g. "requests[3].hash_ids").
absl::StatusOr<AgentSession> ParseAgentSession(std::string_view content, std::string_view name);

/// Reads a whole file; kNotFound if it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

absl::StatusOr<std::vector<MooncakeRequest>> LoadMooncakeFile(const std::string& path);

/// Loads one agentic .json file, or every *.json file of a directory (sorted by name).
absl::StatusOr<std::vector<AgentSession>> LoadAgentSessions(const std::string& path);

/// True when `path` names a Mooncake trace (a *.jsonl file) rather than agentic session(s).
bool IsMooncakePath(const std::string& path);

}  // namespace kvgate::replay
