#include "common/build_info.h"

#include <cstdio>

#include "common/build_commit.h"  // generated: KVGATE_GIT_COMMIT

#ifndef KVGATE_VERSION
#error "KVGATE_VERSION is set by common/CMakeLists.txt"
#endif

namespace kvgate::common {

std::string_view BuildVersion() { return KVGATE_VERSION; }
std::string_view BuildCommit() { return KVGATE_GIT_COMMIT; }

std::string VersionLine(std::string_view program) {
  std::string out(program);
  out.append(" ").append(BuildVersion()).append(" (commit ").append(BuildCommit()).append(")");
  return out;
}

std::string VersionJson() {
  // Both values are [0-9A-Za-z._-] (the commit is filtered where it is generated).
  std::string out = R"({"version":")";
  out.append(BuildVersion()).append(R"(","commit":")").append(BuildCommit()).append("\"}");
  return out;
}

bool PrintVersionIfAsked(int argc, const char* const* argv, std::string_view program) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--version") {
      std::printf("%s\n", VersionLine(program).c_str());
      return true;
    }
  }
  return false;
}

}  // namespace kvgate::common
