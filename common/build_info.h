// File: common/build_info.h
// What every kvgate binary says about itself: its version (CMake's PROJECT_VERSION) and the git
// commit it was built from (cmake/build_commit.cmake), for `--version`, `GET /version` and the
// `kvgate_build_info` metric.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::common {

std::string_view BuildVersion();
std::string_view BuildCommit();

/// "kvgate-sim 0.1.0 (commit 1a2b3c4d5e6f)", the line `--version` prints.
std::string VersionLine(std::string_view program);

/// {"version": "...", "commit": "..."}, the body of `GET /version`.
std::string VersionJson();

/// Prints VersionLine(program) and returns true when argv holds `--version`: every binary's
/// main() calls it before parsing its own flags.
bool PrintVersionIfAsked(int argc, const char* const* argv, std::string_view program);

}  // namespace kvgate::common
