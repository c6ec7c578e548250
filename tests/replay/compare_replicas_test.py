#!/usr/bin/python3
"""Tests of bench/compare_replicas.py, the replicated gateway of `bench/compare --replicas N`,
without kvgate: HAProxy (as started there) must spread connections over its backends round
robin, the redis-server it starts must answer, and what it reads from the replicas (cluster
metrics, /admin/cluster, /admin/explain) must come out as the numbers the tables print. The
replicas here are small HTTP servers that answer as kvgate's endpoints do. Needs haproxy and
redis-server (scripts/setup installs both)."""
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compare_replicas as cr  # noqa: E402


def start(cmd, log_path):
    with open(log_path, "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


METRICS = """# TYPE kvgate_cluster_messages_sent_total counter
kvgate_cluster_messages_sent_total{kind="load"} 30
kvgate_cluster_messages_sent_total{kind="learn"} 10
kvgate_cluster_bytes_sent_total 4000
kvgate_cluster_messages_lost_total 1
kvgate_cluster_connected 1
kvgate_http_requests_total{endpoint="chat",api="chat",code="200",worker="http://w1"} 7
kvgate_http_requests_total{endpoint="chat",api="chat",code="200",worker="http://w2"} 4
kvgate_http_requests_total{endpoint="chat",api="chat",code="429",worker=""} 5
kvgate_cluster_visibility_lag_seconds_bucket{le="0.001"} 10
kvgate_cluster_visibility_lag_seconds_bucket{le="0.005"} 95
kvgate_cluster_visibility_lag_seconds_bucket{le="0.025"} 100
kvgate_cluster_visibility_lag_seconds_bucket{le="+Inf"} 100
"""


class FakeReplica:
    """Answers /ready, /metrics, /admin/cluster (after `peers_after` calls; 404 when None) and
    POST /admin/explain (chosen = choose(body)), and records what explain was sent."""

    def __init__(self, name, choose, cluster=True, peers_after=0, metrics=METRICS, workers=None):
        self.name, self.explained, self.calls = name, [], 0
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, code, body, kind="application/json"):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/ready":
                    self.reply(200, '{"status":"ready"}')
                elif self.path == "/metrics":
                    self.reply(200, metrics, "text/plain")
                elif self.path == "/admin/workers?blocks=1" and workers is not None:
                    self.reply(200, json.dumps({"workers": workers}))
                elif self.path == "/admin/cluster" and cluster:
                    fake.calls += 1
                    peers = [{"replica": "other", "last_heard_ms": 1, "seq": 1, "lost": 0}] \
                        if fake.calls > peers_after else []
                    self.reply(200, json.dumps({"enabled": True, "connected": True,
                                                "replica": fake.name, "peers": peers,
                                                "messages_lost": 2}))
                else:
                    self.reply(404, "{}")

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                fake.explained.append((self.headers, body))  # names: any case
                self.reply(200, json.dumps({"chosen": choose(body)}))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def http_get_new_connection(port):
    """GET / on a connection of its own, as kvgate-replay --connection-per-request does."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1].decode()


class CompareReplicasTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.owned, self.fakes = [], []

    def tearDown(self):
        for p in reversed(self.owned):
            stop(p)
        for f in self.fakes:
            f.close()
        self.tmp.cleanup()

    def fake(self, *a, **k):
        f = FakeReplica(*a, **k)
        self.fakes.append(f)
        return f

    def test_labels(self):
        self.assertEqual(cr.label_suffix(1, True), "")
        self.assertEqual(cr.label_suffix(3, True), " x3")
        self.assertEqual(cr.label_suffix(3, False), " x3 no-sync")
        self.assertEqual(cr.strip_suffix("kvaware@pd-skip256 x3 no-sync"), "kvaware@pd-skip256")
        self.assertEqual(cr.strip_suffix("kvaware+store x2"), "kvaware+store")

    def test_haproxy_spreads_connections_round_robin(self):
        class Named(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                name = str(self.server.server_address[1]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(name)))
                self.end_headers()
                self.wfile.write(name)
        servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Named) for _ in range(3)]
        for s in servers:
            threading.Thread(target=s.serve_forever, daemon=True).start()
        try:
            ports = [s.server_address[1] for s in servers]
            proc, port = cr.start_haproxy(self.tmp.name, "t", ports, start, wait_for, stop)
            self.owned.append(proc)
            seen = [int(http_get_new_connection(port)) for _ in range(9)]
            # Each new connection goes to the next backend: every one gets a third.
            self.assertEqual(sorted(seen), sorted(ports * 3))
            self.assertEqual(seen[:3], seen[3:6])
        finally:
            for s in servers:
                s.shutdown()
                s.server_close()

    def test_redis_answers(self):
        proc, port = cr.start_redis(self.tmp.name, "t", start, wait_for, stop)
        self.owned.append(proc)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"PING\r\n")
            self.assertEqual(s.recv(64), b"+PONG\r\n")

    def test_replica_config_adds_the_cluster_section_only_with_sync(self):
        base = os.path.join(self.tmp.name, "base.yaml")
        with open(base, "w") as f:
            f.write('listen: "127.0.0.1:0"\n')
        synced, alone = (os.path.join(self.tmp.name, n) for n in ("a.yaml", "b.yaml"))
        cr.replica_config(base, synced, 6399, "compare-1-2", "r1")
        cr.replica_config(base, alone, None, "compare-1-2", "r1")
        with open(synced) as a, open(alone) as b:
            self.assertIn('cluster: {redis: "redis://127.0.0.1:6399", name: "compare-1-2", '
                          'replica: "r1"}', a.read())
            self.assertEqual(b.read(), 'listen: "127.0.0.1:0"\nadmin: {listen: "127.0.0.1:0"}\n')

    def test_wait_ready_waits_for_the_peers(self):
        a = self.fake("r0", len, peers_after=3)
        b = self.fake("r1", len)
        cr.wait_ready([a.port, b.port], [a.port, b.port], True, wait_for)
        self.assertGreater(a.calls, 3)  # it asked until r0 listed its peer
        with self.assertRaises(AssertionError):
            lonely = self.fake("r2", len, peers_after=10**9)
            cr.wait_ready([lonely.port, b.port], [lonely.port, b.port], True,
                          lambda p, t, w: wait_for(p, min(t, 0.5), w))
        # Without the cluster module (404) it goes on at once.
        old = [self.fake("r0", len, cluster=False), self.fake("r1", len, cluster=False)]
        cr.wait_ready([f.port for f in old], [f.port for f in old], True, wait_for)

    def test_collect_reads_metrics_and_decision_agreement(self):
        sample = os.path.join(self.tmp.name, "sample.jsonl")
        with open(sample, "w") as f:
            for i in range(10):
                f.write(json.dumps({"path": "/v1/messages", "body": '{"n":%d}' % i,
                                    "headers": {"User-Agent": "kvgate-replay",
                                                "anthropic-version": "2023-06-01"}}) + "\n")
        # r0 and r1 agree on 7 of the 10 bodies (those whose digit is below 7).
        a = self.fake("r0", lambda body: "w1")
        b = self.fake("r1", lambda body: "w1" if int(body[5]) < 7 else "w2")
        rep = cr.collect([a.port, b.port], True, sample, requests=20)
        self.assertEqual(rep["agreement"]["compared"], 10)
        self.assertEqual(rep["agreement"]["agreed"], 7)
        self.assertAlmostEqual(rep["agreement"]["share"], 0.7)
        hdrs, body = a.explained[0]
        self.assertEqual(hdrs["x-kvgate-endpoint"], "/v1/messages")
        self.assertEqual(hdrs["anthropic-version"], "2023-06-01")
        self.assertEqual(body, '{"n":0}')
        # Two replicas of 40 messages and 4000 bytes each over 20 requests.
        self.assertEqual(rep["messages_sent_per_request"], 4.0)
        self.assertEqual(rep["bytes_sent_per_request"], 400.0)
        self.assertEqual(rep["totals"]["messages_lost"], 2.0)
        self.assertEqual(rep["lag_p50_le"], 0.005)
        self.assertEqual(rep["lag_p99_le"], 0.025)
        self.assertEqual(rep["min_peers_seen"], 1)
        self.assertEqual(rep["messages_lost"], 4)
        self.assertEqual(rep["requests_per_replica"], [11, 11])  # the 429s reached no worker
        line = cr.table([{"policy": "kvaware x2", "replicas": rep}]).splitlines()[-1]
        self.assertEqual(line, "| kvaware x2 | 2 | 11 / 11 | 1 | 4.00 | 400 | 2 | ≤ 5 ms "
                               "| ≤ 25 ms | 70.0% of 10 | n/a |")
        self.assertIn("r0/r1 agree on 7/10", cr.summary(rep))

    def test_index_agreement_compares_every_replica_with_the_first(self):
        def worker(url, approx, engine):
            return {"url": url, "index": {"gpu_block_hashes": approx},
                    "precise": {"ranks": [{"engine_block_ids": {"gpu": engine, "host": []}}]}}
        a = self.fake("r0", len, workers=[worker("w1", [1, 2], [7, 8]), worker("w2", [3], [9])])
        b = self.fake("r1", len, workers=[worker("w1", [1, 2], [8, 7]), worker("w2", [3], [9])])
        c = self.fake("r2", len, workers=[worker("w1", [1, 2], [7, 8]), worker("w2", [], [9])])
        same = cr.index_agreement([a.port, b.port])
        self.assertEqual(same["approx"], {"equal": True, "differing_workers": [], "blocks": 3})
        self.assertEqual(same["precise"], {"equal": True, "differing_workers": [], "blocks": 3})
        differ = cr.index_agreement([a.port, b.port, c.port])
        self.assertEqual(differ["approx"]["differing_workers"], ["w2"])
        self.assertTrue(differ["precise"]["equal"])
        self.assertIsNone(cr.index_agreement([a.port, self.fake("r3", len).port]))

    def test_collect_without_the_cluster_module(self):
        a = self.fake("r0", len, cluster=False, metrics="kvgate_requests_total 3\n")
        b = self.fake("r1", len, cluster=False, metrics="kvgate_requests_total 3\n")
        rep = cr.collect([a.port, b.port], False, None, requests=20)
        self.assertNotIn("totals", rep)
        self.assertNotIn("agreement", rep)
        self.assertEqual(rep["per_replica"][0],
                         {"admin_cluster": None, "requests": 0, "metrics": None})
        line = cr.table([{"policy": "kvaware x2 no-sync", "replicas": rep}]).splitlines()[-1]
        self.assertEqual(line, "| kvaware x2 no-sync | 2 (no sync) | 0 / 0 | n/a | n/a | n/a "
                               "| n/a | n/a | n/a | n/a | n/a |")
        self.assertEqual(cr.table([{"policy": "kvaware", "replicas": None}]), "")
        self.assertIn("no cluster section", cr.summary(rep))


if __name__ == "__main__":
    unittest.main()
