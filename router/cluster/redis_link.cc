// File: router/cluster/redis_link.cc
// hiredis behind RedisLink (redis_link.h).
#include "router/cluster/redis_link.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include "common/strings.h"

namespace kvgate::router::cluster {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string_view Str(const redisReply* r) {
  return r->str != nullptr ? std::string_view(r->str, r->len) : std::string_view();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisLink>> RedisLink::Connect(const std::string& host, int port,
                                                              const std::string& password,
                                                              std::chrono::milliseconds timeout) {
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, ToTimeval(timeout));
  if (c == nullptr) return absl::UnavailableError("redis: out of memory");
  std::unique_ptr<RedisLink> link(new RedisLink(c));
  if (c->err != 0) {
    return absl::UnavailableError(common::StrCat("redis ", host, ":", port, ": ", c->errstr));
  }
  if (redisSetTimeout(c, ToTimeval(timeout)) != REDIS_OK) {
    return link->Broken("setting the timeout");
  }
  if (!password.empty()) {
    Reply r(static_cast<redisReply*>(
        redisCommand(c, "AUTH %b", password.data(), static_cast<size_t>(password.size()))));
    if (r == nullptr) return link->Broken("AUTH");
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::PermissionDeniedError(common::StrCat("redis AUTH: ", Str(r.get())));
    }
  }
  return link;
}

RedisLink::~RedisLink() { redisFree(c_); }

absl::Status RedisLink::Broken(std::string_view what) {
  return absl::UnavailableError(
      common::StrCat("redis ", what, ": ", c_->err != 0 ? c_->errstr : "no reply"));
}

absl::Status RedisLink::Publish(std::string_view channel,
                                const std::vector<std::string>& messages) {
  for (const std::string& m : messages) {
    if (redisAppendCommand(c_, "PUBLISH %b %b", channel.data(), channel.size(), m.data(),
                           m.size()) != REDIS_OK) {
      return Broken("PUBLISH");
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c_, &raw) != REDIS_OK) return Broken("PUBLISH");
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::UnavailableError(common::StrCat("redis PUBLISH: ", Str(r.get())));
    }
  }
  return absl::OkStatus();
}

absl::Status RedisLink::Set(std::string_view key, std::string_view value,
                            std::chrono::milliseconds ttl) {
  const std::string px = std::to_string(ttl.count());
  Reply r(static_cast<redisReply*>(redisCommand(c_, "SET %b %b PX %s", key.data(), key.size(),
                                                value.data(), value.size(), px.c_str())));
  if (r == nullptr) return Broken("SET");
  if (r->type == REDIS_REPLY_ERROR) {
    return absl::UnavailableError(common::StrCat("redis SET: ", Str(r.get())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> RedisLink::Get(std::string_view key) {
  Reply r(static_cast<redisReply*>(redisCommand(c_, "GET %b", key.data(), key.size())));
  if (r == nullptr) return Broken("GET");
  if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if (r->type != REDIS_REPLY_STRING) {
    return absl::UnavailableError(common::StrCat("redis GET: ", Str(r.get())));
  }
  return std::optional<std::string>(std::string(Str(r.get())));
}

absl::StatusOr<std::vector<std::string>> RedisLink::Keys(std::string_view pattern, size_t max) {
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    Reply r(static_cast<redisReply*>(redisCommand(c_, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(),
                                                  pattern.data(), pattern.size())));
    if (r == nullptr) return Broken("SCAN");
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
      return absl::UnavailableError("redis SCAN: unexpected reply");
    }
    cursor = std::string(Str(r->element[0]));
    const redisReply* found = r->element[1];
    for (size_t i = 0; i < found->elements && keys.size() < max; ++i) {
      if (found->element[i]->type == REDIS_REPLY_STRING) keys.emplace_back(Str(found->element[i]));
    }
  } while (cursor != "0" && keys.size() < max);
  return keys;
}

absl::Status RedisLink::Subscribe(std::string_view channel) {
  Reply r(
      static_cast<redisReply*>(redisCommand(c_, "SUBSCRIBE %b", channel.data(), channel.size())));
  if (r == nullptr) return Broken("SUBSCRIBE");
  if (r->type != REDIS_REPLY_ARRAY) {
    return absl::UnavailableError(common::StrCat("redis SUBSCRIBE: ", Str(r.get())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> RedisLink::NextMessage(std::chrono::milliseconds wait,
                                                                  size_t max_bytes) {
  for (;;) {
    void* raw = nullptr;
    // A reply already read into hiredis's buffer comes first.
    if (redisGetReplyFromReader(c_, &raw) != REDIS_OK) return Broken("reading");
    if (raw == nullptr) {
      pollfd p{c_->fd, POLLIN, 0};
      const int n = poll(&p, 1, static_cast<int>(wait.count()));
      if (n == 0) return std::optional<std::string>();
      if (n < 0) return absl::UnavailableError("redis: poll failed");
      if (redisBufferRead(c_) != REDIS_OK) return Broken("reading");
      wait = std::chrono::milliseconds(0);  // read what came, then return to the caller
      if (redisGetReplyFromReader(c_, &raw) != REDIS_OK) return Broken("reading");
      if (raw == nullptr) continue;
    }
    Reply r(static_cast<redisReply*>(raw));
    // ["message", channel, payload]; anything else (a subscribe confirmation) is skipped.
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || Str(r->element[0]) != "message" ||
        r->element[2]->type != REDIS_REPLY_STRING) {
      continue;
    }
    if (r->element[2]->len > max_bytes) {
      return absl::ResourceExhaustedError(
          common::StrCat("redis: a message of ", r->element[2]->len, " bytes, over ", max_bytes));
    }
    return std::optional<std::string>(std::string(Str(r->element[2])));
  }
}

}  // namespace kvgate::router::cluster
