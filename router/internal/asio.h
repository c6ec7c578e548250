// File: router/internal/asio.h
// Asio/Beast vocabulary for the gateway's .cc files. Kept out of public headers so that only
// the few translation units doing I/O pay for Beast.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace kvgate::router {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

/// Completion token for coroutines: errors come back as values, Asio never throws.
inline constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

}  // namespace kvgate::router
