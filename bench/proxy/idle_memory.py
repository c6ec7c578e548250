#!/usr/bin/python3
"""Memory a proxy holds per idle keep-alive client connection.

Opens N connections to 127.0.0.1:PORT, sends one `GET /health` on each and reads the answer,
then leaves them open and idle, and reports the growth of the proxy's resident memory (VmRSS,
summed over PIDS) divided by N.

Usage: bench/proxy/idle_memory.py PORT N PID[,PID...]
"""
import selectors
import socket
import sys


def rss(pids):
    total = 0
    for pid in pids:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def main():
    port, n, pids = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
    before = rss(pids)
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, bytearray())
        socks.append(s)
    pending = n
    while pending:
        for key, _ in sel.select(timeout=30):
            data = key.data
            chunk = key.fileobj.recv(65536)
            if not chunk:
                raise SystemExit("connection closed by the proxy")
            data += chunk
            head, sep, body = bytes(data).partition(b"\r\n\r\n")
            if sep:
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if len(body) >= length:
                    sel.unregister(key.fileobj)
                    pending -= 1
    after = rss(pids)
    print("%d idle connections: RSS %d -> %d KiB, %.0f bytes each"
          % (n, before // 1024, after // 1024, (after - before) / n))
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
