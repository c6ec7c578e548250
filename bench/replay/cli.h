// File: bench/replay/cli.h
// Command-line parsing of kvgate-replay. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/replayer.h"

namespace kvgate::replay {

struct CliOptions {
  ReplayOptions replay;
  std::string report_path;          // --report; empty = no JSON file.
  std::string records_path;         // --records; empty = no per-request JSONL file.
  std::string request_sample_path;  // --request-sample; empty = no sample of sent requests.
  bool table = true;                // Human table on stdout (--no-table turns it off).
  bool help = false;
};

/// Parses `args` (without argv[0]). Flags take "--flag value" or "--flag=value".
/// kInvalidArgument names the offending flag.
absl::StatusOr<CliOptions> ParseCommandLine(const std::vector<std::string>& args);

/// The --help text.
std::string Usage();

}  // namespace kvgate::replay
