// The transfer tests' main: the binary is also the peer process the two-process tests spawn
// (argv[1] == "--transfer-peer"); otherwise it runs the tests.
#include <cstring>

#include "gtest/gtest.h"
#include "tests/transfer/test_support.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--transfer-peer") == 0) {
    return kvgate::transfer::testing::RunPeer(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
