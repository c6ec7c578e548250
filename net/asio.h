// File: net/asio.h
// Asio vocabulary for the gateway's .cc files that do I/O (server/, http/, dispatch/,
// upstream/, fleet/ control calls). Kept out of public headers so that only they pay for Asio;
// the gateway speaks HTTP/1.1 with its own parser (http/http1.h), so Beast is not used.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <string>

#include "absl/types/span.h"

namespace kvgate::router {

namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

/// Completion token for coroutines: errors come back as values, Asio never throws.
inline constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

/// The bytes of `buffers` after the first `written`, copied: what a write that must wait still
/// owes, kept where the caller's buffers (often a thread's scratch, reused meanwhile) are not.
inline std::string UnwrittenBytes(absl::Span<const net::const_buffer> buffers, size_t written) {
  std::string rest;
  for (const auto& b : buffers) {
    if (written >= b.size()) {
      written -= b.size();
      continue;
    }
    rest.append(static_cast<const char*>(b.data()) + written, b.size() - written);
    written = 0;
  }
  return rest;
}

}  // namespace kvgate::router
