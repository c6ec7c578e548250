#!/usr/bin/python3
"""Token cadence through a proxy: STREAMS streamed chat requests, one after the other, to
kvgate-fake-upstream behind the proxy on PORT, each asking for EVENTS events paced DELAY_MS
apart (x-fake-* headers). Prints the gaps between consecutive events as the client received
them: through a proxy that forwards each event at once they stay at DELAY_MS; a proxy that
holds pieces back delivers bursts (gaps of 0 and of many DELAY_MS).
Usage: cadence.py PORT [STREAMS=5] [EVENTS=40] [DELAY_MS=10]"""
import json
import socket
import sys
import time


def one_stream(port, events, delay_ms):
    body = json.dumps({"model": "fake-model", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
            "Content-Type: application/json\r\nx-fake-chunks: %d\r\nx-fake-delay-ms: %d\r\n"
            "Content-Length: %d\r\n\r\n" % (events, delay_ms, len(body)))
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((head + body).encode())
    gaps, seen, last, tail = [], 0, None, b""
    while True:
        data = s.recv(65536)
        if not data:
            break
        now = time.monotonic()
        # an event's marker may straddle two reads: count it in the read that completes it
        joined = tail + data
        k = joined.count(b"data: ") - tail.count(b"data: ")
        tail = joined[-5:]
        if k:
            if last is not None:
                gaps.append((now - last) * 1000)
            gaps.extend([0.0] * (k - 1))
            last, seen = now, seen + k
        if joined.endswith(b"0\r\n\r\n"):
            break
    s.close()
    if seen < events:
        sys.exit("only %d of %d events arrived (is the target in front of kvgate-fake-upstream?)"
                 % (seen, events))
    return gaps


def main():
    port = int(sys.argv[1])
    given = [int(a) for a in sys.argv[2:5]]
    streams, events, delay_ms = given + [5, 40, 10][len(given):]
    gaps = []
    for _ in range(streams):
        gaps += one_stream(port, events, delay_ms)
    gaps.sort()
    q = lambda p: gaps[min(len(gaps) - 1, int(p * len(gaps)))]
    # The usage event and [DONE] follow the last token at once: two bursts a stream anyway.
    bursts = sum(1 for g in gaps if g < delay_ms / 2)
    print("gap ms p10 %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f; %d of %d gaps under %g ms"
          % (q(0.1), q(0.5), q(0.9), q(0.99), gaps[-1], bursts, len(gaps), delay_ms / 2))


if __name__ == "__main__":
    main()
