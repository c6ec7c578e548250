// File: router/cluster/redis_link.h
// One connection to Redis for the replica sync, through hiredis's blocking API on a thread of
// its own (never a gateway thread): PUBLISH frames in one pipelined round trip, SET/GET the
// snapshots, SCAN their keys, and in subscriber mode wait for the next message with a
// bounded poll so the thread can notice it should stop. Every reply is checked; any error
// leaves the link broken (ok() false) and the owner reconnects. Thread-compatible.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct redisContext;

namespace kvgate::router::cluster {

class RedisLink {
 public:
  /// Connects to host:port within `timeout`, then AUTH with `password` when not empty; the
  /// same timeout bounds every later command.
  static absl::StatusOr<std::unique_ptr<RedisLink>> Connect(const std::string& host, int port,
                                                            const std::string& password,
                                                            std::chrono::milliseconds timeout);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  /// PUBLISHes each of `messages` on `channel`, pipelined.
  absl::Status Publish(std::string_view channel, const std::vector<std::string>& messages);
  /// SET key value PX ttl.
  absl::Status Set(std::string_view key, std::string_view value, std::chrono::milliseconds ttl);
  /// GET key: nullopt when absent.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key);
  /// The keys matching `pattern` (SCAN, at most `max`).
  absl::StatusOr<std::vector<std::string>> Keys(std::string_view pattern, size_t max);

  /// Enters subscriber mode on `channel`.
  absl::Status Subscribe(std::string_view channel);
  /// The next message on the subscribed channel, waiting at most `wait`; nullopt when none
  /// came. Messages over `max_bytes` fail the link (a peer cannot make it hold more).
  absl::StatusOr<std::optional<std::string>> NextMessage(std::chrono::milliseconds wait,
                                                         size_t max_bytes);

 private:
  explicit RedisLink(redisContext* c) : c_(c) {}
  absl::Status Broken(std::string_view what);
  redisContext* c_;
};

}  // namespace kvgate::router::cluster
