// File: tests/store/test_credentials.cc
#include "tests/store/test_credentials.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/strings.h"

namespace kvgate::testing {

const std::string& TestCredentialsFile() {
  static const std::string path = [] {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / common::StrCat("kvgate-store-test-", ::getpid());
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    const std::string file = (dir / "credentials").string();
    {
      std::ofstream out(file, std::ios::trunc);
      out << "node     node      " << std::string(64, '1') << " *\n"
          << "client   default   " << std::string(64, '2') << " *\n"
          << "client   tenant-a  " << std::string(64, '3') << " a|*\n"
          << "client   tenant-b  " << std::string(64, '4') << " b|*\n";
    }
    std::filesystem::permissions(
        file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    ::setenv("KVGATE_STORE_CREDENTIALS", file.c_str(), 1);
    // Each test process leaves no directory behind (ctest runs every test in its own process).
    static const std::string owned_dir = dir.string();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(owned_dir, ignored);
    });
    return file;
  }();
  return path;
}

transfer::PeerAuthPtr TestAuth(transfer::PeerRole role, const std::string& name) {
  auto auth = transfer::LoadPeerAuth(TestCredentialsFile(), role, name, /*create=*/false);
  return auth.ok() ? *auth : nullptr;
}

}  // namespace kvgate::testing
