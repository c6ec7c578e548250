// File: router/http/session.h
// The session stage: serves one client connection until it closes. Reads each request with
// its limits and its deadline (the idle timeout before the first byte, the read timeout from
// then on), answers framing problems itself (400, 408, 413, 431, 501, 505), hands every valid
// request to the route table, and records every request — metrics and access log — whatever
// stage answered it. Thread-compatible (runs on the connection's gateway thread).
#pragma once

#include "net/asio.h"
#include "router/http/client_connection.h"
#include "router/http/exchange.h"

namespace kvgate::router {

class ThreadContext;
class RouteTable;

/// Serves `conn` (a new connection: its TLS handshake first) while requests come back to back;
/// when it idles, parks it (ParkSession) and ends, so an idle connection holds no coroutine.
net::awaitable<void> RunSession(ThreadContext& tc, const RouteTable& routes,
                                ClientConnectionPtr conn);
/// Waits for `conn`'s next bytes with a plain reactor wait (a small handler, no coroutine frame:
/// issue 31 measured 2.3 KB an idle connection, three quarters of it the suspended session's
/// frames), then resumes it with RunSession; closes it when the wait ends otherwise (idle
/// timeout, drain, reaped). Call only right after ReadAvailable said would_block.
void ParkSession(ThreadContext& tc, const RouteTable& routes, ClientConnectionPtr conn);

/// Counts the request in the metrics and writes its access-log line.
void RecordExchange(ThreadContext& tc, const Exchange& ex);

}  // namespace kvgate::router
