// File: tests/sim/gateway_binary.h
// Where the sim tests find the binaries they start as processes: $KVGATE_GATEWAY_BIN (kvgate
// only), then the build's bin directory, then build/debug/bin of the checkout.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace kvgate::sim {

/// The path of binary `name` ("kvgate", "kvgate-store"); "" when none is built.
inline std::string TestBinary(const std::string& name) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KVGATE_GATEWAY_BIN"); env != nullptr && name == "kvgate") {
    candidates.push_back(env);
  }
  candidates.push_back(std::string(KVGATE_TEST_BIN_DIR) + "/" + name);
  candidates.push_back(std::string(KVGATE_TEST_SOURCE_DIR) + "/build/debug/bin/" + name);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

}  // namespace kvgate::sim
