// File: store/store_cli.h
// Command line of kvgate-store. One binary, two roles, both on by default for a one-machine
// store; `--role master` or `--role data --master ...` split them across processes and hosts.
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "store/data_node.h"
#include "store/master_service.h"

namespace kvgate::store {

struct StoreCli {
  bool run_master = true;
  bool run_data = true;
  std::string http_listen;  // HOST:PORT; empty: no HTTP listener.
  std::string log_level = "info";
  /// Credentials file (transfer/peer_auth.h): "" the user's default, made when missing;
  /// "none" (--auth none) turns authentication off.
  std::string credentials_file;
  std::string node_credential;  // The data node's credential; default the file's first node.
  bool kv_events_remote = false;  // Whether the KV-event sockets may bind beyond loopback.
  MasterServiceOptions master;
  DataNodeOptions data;
  bool help = false;
};

/// "256MiB", "8GiB", "1G", "4096": bytes. @return kInvalidArgument naming the text.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

/// @return kInvalidArgument naming the bad flag or value.
absl::StatusOr<StoreCli> ParseStoreCli(int argc, const char* const* argv);

extern const char kStoreUsage[];

}  // namespace kvgate::store
