// File: router/internal/asio.h
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

namespace kvgate::router {

namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

/// Completion token for coroutines: errors come back as values, Asio never throws.
inline constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

}  // namespace kvgate::router
