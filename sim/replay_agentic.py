#!/usr/bin/python3
"""Replays the agentic coding traces (bench/data/agentic) against kvgate-sim workers.

Closed loop, as the traces were recorded: each conversation sends its next turn only after the
previous answer arrived plus its think time; sub-agents run concurrently from their start time.
Prompts are synthetic text built from the traces' hash ids (64 tokens = 256 bytes per id, 4 bytes
per token), so shared prefixes in the trace are shared prefixes for the simulator. The first
(tool_tokens + system_tokens) / 64 blocks are shared across all conversations, as they would be
for one agent. Sent to /v1/completions (raw prompt, exact token mapping), non-streamed.

Usage: replay_agentic.py (--base-port P --workers N | --ports P1,P2,...)
                         [--conversations-per-worker C]
                         [--time-scale S] [--duration 60] [--traces 'bench/data/agentic/*.json']
At the end it prints requests, tokens and each worker's kvgate_sim_max_lag_seconds (how far the
simulator ran behind simulated time, in real seconds).
"""

import argparse
import asyncio
import glob
import json
import os
import re
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK_TOKENS = 64
BYTES_PER_TOKEN = 4


def block_text(scope, hid):
    head = "%s-%d " % (scope, hid)
    n = BLOCK_TOKENS * BYTES_PER_TOKEN
    return (head * (n // len(head) + 1))[:n]


class Http:
    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def post(self, path, body):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = json.dumps(body).encode()
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (path.encode(), len(data)) + data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        payload = await self.reader.readexactly(length)
        return status, json.loads(payload) if payload else None


class Stats:
    def __init__(self):
        self.requests = self.errors = self.prompt_tokens = self.cached_tokens = 0
        self.completion_tokens = 0
        self.latencies = []


async def conversation(reqs, port, scope, shared_blocks, scale, stop_at, stats, max_len):
    http = Http(port)
    start = time.monotonic()
    tasks = []
    for r in reqs:
        if time.monotonic() >= stop_at:
            break
        if r.get("type") == "subagent":
            async def sub(r=r):
                await asyncio.sleep(min(max(0.0, start + r["t"] * scale - time.monotonic()),
                                        max(0.0, stop_at - time.monotonic())))
                await conversation(r["requests"], port, scope, shared_blocks, scale, stop_at,
                                   stats, max_len)
            tasks.append(asyncio.create_task(sub()))
            continue
        ids = r["hash_ids"]
        tokens = min(r["in"], max_len - r["out"] - 1)
        parts = [block_text("shared" if i < shared_blocks else scope, hid)
                 for i, hid in enumerate(ids)]
        prompt = "".join(parts)[:tokens * BYTES_PER_TOKEN]
        t0 = time.monotonic()
        try:
            status, resp = await http.post("/v1/completions", {
                "model": "sim-model", "prompt": prompt, "max_tokens": max(1, r["out"]),
                "ignore_eos": True})
        except (OSError, asyncio.IncompleteReadError):
            stats.errors += 1
            http = Http(port)
            continue
        if status != 200:
            stats.errors += 1
            continue
        stats.requests += 1
        stats.latencies.append((time.monotonic() - t0) / scale)
        u = resp["usage"]
        stats.prompt_tokens += u["prompt_tokens"]
        stats.completion_tokens += u["completion_tokens"]
        stats.cached_tokens += u["prompt_tokens_details"]["cached_tokens"]
        await asyncio.sleep(min(r.get("think_time", 0.0) * scale,
                                max(0.0, stop_at - time.monotonic())))
    for t in tasks:
        await t


async def metric(port, name):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n")
    text = (await reader.read()).decode()
    writer.close()
    return max(float(v) for v in re.findall(r"^%s\{[^}]*\} (\S+)" % re.escape(name), text, re.M))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-port", type=int, help="worker i at base-port + i")
    ap.add_argument("--ports", help="comma-separated worker ports (instead of --base-port)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--conversations-per-worker", type=int, default=4)
    ap.add_argument("--time-scale", type=float, default=0.05)
    ap.add_argument("--duration", type=float, default=60.0, help="real seconds")
    ap.add_argument("--max-model-len", type=int, default=131072)
    ap.add_argument("--traces", default=os.path.join(ROOT, "bench", "data", "agentic", "*.json"),
                    help="glob of agentic trace files (default: the repository's bench/data/agentic)")
    a = ap.parse_args()
    ports = ([int(p) for p in a.ports.split(",")] if a.ports else
             [a.base_port + w for w in range(a.workers)])
    a.workers = len(ports)
    traces = [json.load(open(p)) for p in sorted(glob.glob(a.traces))]
    if not traces:
        ap.error("no traces match --traces %s" % a.traces)
    stats = Stats()
    stop_at = time.monotonic() + a.duration
    t0 = time.monotonic()
    convs = []
    for w in range(a.workers):
        for c in range(a.conversations_per_worker):
            tr = traces[(w * a.conversations_per_worker + c) % len(traces)]
            shared = (tr.get("tool_tokens", 0) + tr.get("system_tokens", 0)) // BLOCK_TOKENS
            convs.append(conversation(tr["requests"], ports[w], "w%dc%d" % (w, c), shared,
                                      a.time_scale, stop_at, stats, a.max_model_len))
    await asyncio.gather(*convs)
    real = time.monotonic() - t0
    lags = [await metric(ports[w], "kvgate_sim_max_lag_seconds") for w in range(a.workers)]
    lat = sorted(stats.latencies) or [0]
    print("workers=%d conversations=%d time_scale=%g real_s=%.1f sim_s=%.0f" % (
        a.workers, a.workers * a.conversations_per_worker, a.time_scale, real, real / a.time_scale))
    print("requests=%d errors=%d prompt_tokens=%d cached_tokens=%d (%.1f%%) completion_tokens=%d"
          % (stats.requests, stats.errors, stats.prompt_tokens, stats.cached_tokens,
             100.0 * stats.cached_tokens / max(1, stats.prompt_tokens), stats.completion_tokens))
    print("sim prompt tokens/s (simulated)=%.0f  request latency sim-s p50=%.2f p99=%.2f" % (
        stats.prompt_tokens / (real / a.time_scale), lat[len(lat) // 2],
        lat[min(len(lat) - 1, int(len(lat) * 0.99))]))
    print("max lag per worker (real s): %s" % " ".join("%.3f" % x for x in lags))


if __name__ == "__main__":
    asyncio.run(main())
