#!/usr/bin/python3
"""An independent vLLM KV-event subscriber checked against kvgate-sim.

It shares no code with the simulator: Python's zmq and msgpack only, following
shared/reference/protocols.md section 1. For each encoding (array, map) it starts a simulator
with two data-parallel engines, joins late (so the first batches are only available by replay),
deliberately drops some live batches (gaps, recovered through the ROUTER replay socket), drives
evictions, host-tier stores and a prefix-cache reset, and finally checks that the block set it
rebuilt from the events equals the simulator's own (GET /debug/blocks), for every engine.
Then the same with hybrid profiles (a sliding-window and a Mamba group beside full attention):
every event carries its KV-cache group, and each group's block set is rebuilt on its own.

Usage: subscriber_test.py --sim path/to/kvgate-sim
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

END_SEQ = 2**64 - 1
DEADLINE_S = 60

# Small hybrid profiles: full attention beside one other group, pools small enough to evict.
HYBRID_PROFILES = {
    "sliding_window": """name: tiny-swa
max_num_batched_tokens: 64
num_cpu_blocks: 8
groups:
  - kind: full_attention
    num_gpu_blocks: 20
  - kind: sliding_window
    sliding_window: 33
    num_gpu_blocks: 9
""",
    "mamba": """name: tiny-mamba
max_num_batched_tokens: 64
num_cpu_blocks: 8
groups:
  - kind: full_attention
    num_gpu_blocks: 20
  - kind: mamba
    num_gpu_blocks: 4
""",
}


class Subscriber:
    """Rebuilds one engine's cached block set from its event stream."""

    def __init__(self, ctx, endpoint, replay_endpoint, rank, drop_every, kinds=None):
        self.ctx = ctx
        self.rank = rank
        self.replay_endpoint = replay_endpoint
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(endpoint)
        self.drop_every = drop_every
        self.received = 0
        self.last_seq = -1
        # Block copies by (group_idx, medium): {hash: count}; a non-hybrid engine sends no group:
        # group 0. vLLM does not deduplicate its GPU cache (a block computed again beside a
        # cached copy is announced and later removed again), so a GPU hash is held until its
        # last copy's BlockRemoved; the host tier stores a hash once.
        # kinds: the group kinds of a hybrid profile ({group_idx: (kind, window)}), else None.
        self.kinds = kinds
        self.blocks = {}
        self.stats = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0, "gaps": 0,
                      "replayed": 0, "dropped": 0, "big_hashes": 0, "cpu_stored": 0,
                      "group1_removed": 0}

    def copies(self, group, medium):
        return self.blocks.setdefault((group, medium), {})

    def group_set(self, group, medium):
        return set(self.copies(group, medium))

    def check_group(self, tag, field, n_blocks):
        """A hybrid engine tags every event with its group; a plain one tags none."""
        group = field("group_idx")
        if self.kinds is None:
            assert group is None and field("kv_cache_spec_kind") is None, (tag, group)
            return 0
        assert group in self.kinds, (tag, group)
        if tag == "BlockStored":
            kind, window = self.kinds[group]
            assert field("kv_cache_spec_kind") == kind, (group, field("kv_cache_spec_kind"))
            assert field("kv_cache_spec_sliding_window") == window, group
            assert field("extra_keys") == [None] * n_blocks, field("extra_keys")
        return group

    def apply(self, payload):
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if isinstance(batch, dict):
            events, rank = batch["events"], batch.get("data_parallel_rank")
        else:
            events = batch[1]
            rank = batch[2] if len(batch) > 2 else None
        assert isinstance(batch[0] if isinstance(batch, list) else batch["ts"], float)
        assert rank == self.rank, (rank, self.rank)
        for ev in events:
            if isinstance(ev, dict):
                tag = ev["type"]
                field = ev.get
            else:
                tag = ev[0]
                names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids",
                                         "block_size", "lora_id", "medium", "lora_name",
                                         "extra_keys", "group_idx", "kv_cache_spec_kind",
                                         "kv_cache_spec_sliding_window"],
                         "BlockRemoved": ["block_hashes", "medium", "group_idx"],
                         "AllBlocksCleared": []}[tag]
                assert len(ev) <= len(names) + 1, ev
                values = dict(zip(names, ev[1:]))
                field = lambda k, d=None, v=values: v.get(k, d)  # noqa: E731
            self.stats[tag] += 1
            if tag == "BlockStored":
                hashes = field("block_hashes")
                assert len(field("token_ids")) == len(hashes) * field("block_size"), ev
                group = self.check_group(tag, field, len(hashes))
                medium = field("medium") or "GPU"
                if medium == "CPU":
                    assert group == 0, ev  # The host tier backs full attention only.
                    self.stats["cpu_stored"] += 1
                for h in hashes:
                    assert isinstance(h, int) and 0 <= h < 2**64, h
                    if h >= 2**63:
                        self.stats["big_hashes"] += 1
                    held = self.copies(group, medium)
                    held[h] = held.get(h, 0) + 1 if medium == "GPU" else 1
            elif tag == "BlockRemoved":
                group = self.check_group(tag, field, 0)
                medium = field("medium") or "GPU"
                if group == 1:
                    self.stats["group1_removed"] += 1
                held = self.copies(group, medium)
                for h in field("block_hashes"):
                    if held.get(h, 0) > 1:
                        held[h] -= 1
                    else:
                        held.pop(h, None)
            elif tag == "AllBlocksCleared":
                for s in self.blocks.values():
                    s.clear()

    def replay_from(self, start):
        """Asks the ROUTER for every batch from `start` on (DEALER: ["", seq8])."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        try:
            while True:
                if not dealer.poll(5000):
                    raise AssertionError("replay timed out")
                empty, seq8, payload = dealer.recv_multipart()
                assert empty == b""
                seq = int.from_bytes(seq8, "big")
                if seq == END_SEQ:
                    assert payload == b""
                    return
                if seq > self.last_seq:
                    assert seq == self.last_seq + 1, ("replay gap", seq, self.last_seq)
                    self.apply(payload)
                    self.last_seq = seq
                    self.stats["replayed"] += 1
        finally:
            dealer.close()

    def pump(self, timeout_ms):
        """Handles live messages until none arrives for timeout_ms; True if any did."""
        got = False
        while self.sub.poll(timeout_ms):
            topic, seq8, payload = self.sub.recv_multipart()
            assert len(seq8) == 8
            seq = int.from_bytes(seq8, "big")
            got = True
            self.received += 1
            if self.drop_every and self.received % self.drop_every == 0:
                self.stats["dropped"] += 1  # Simulated loss: the next message shows a gap.
                continue
            if seq <= self.last_seq:
                continue  # Already applied through a replay.
            if seq > self.last_seq + 1:
                self.stats["gaps"] += 1
                self.replay_from(self.last_seq + 1)
                if seq <= self.last_seq:
                    continue
            self.apply(payload)
            self.last_seq = seq
            timeout_ms = min(timeout_ms, 50)
        return got


def http_json(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.status == 200, (resp.status, data)
    return json.loads(data) if data else None


def start_sim(sim, encoding, ranks, profile=None):
    pools = ["--profile", profile] if profile else ["--num-gpu-blocks", "20",
                                                    "--num-cpu-blocks", "8"]
    args = [sim, "--port", "0", "--time-scale", "0.01", "--dp-size", str(ranks), "--seed", "1",
            *pools,
            "--kv-events-endpoint", "tcp://127.0.0.1:*",
            "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
            "--kv-events-encoding", encoding, "--log-level", "warn"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    port, endpoints = None, {}
    try:
        # Blocking reads: the simulator prints these lines at once (ctest's TIMEOUT bounds it).
        for line in proc.stdout:
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if line.startswith("port="):
                port = int(fields["port"])
            elif line.startswith("kv_events"):
                endpoints[int(fields["rank"])] = (fields["endpoint"], fields["replay"])
            elif line.strip() == "ready":
                return proc, port, endpoints
        raise AssertionError("kvgate-sim exited early")
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def prompt(i):
    # Shared system prefixes (3 kinds) plus a per-request tail: hits, misses and evictions.
    system = ["You are a helpful assistant. " * 4, "You write C++ code. " * 5,
              "Answer briefly. " * 6][i % 3]
    return system + ("question %d " % i) * (3 + i % 7)


def run(sim, encoding, ranks=2, hybrid=None):
    """hybrid: None, or the kind of the group beside full attention (HYBRID_PROFILES)."""
    profile, kinds = None, None
    if hybrid:
        fd, profile = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(HYBRID_PROFILES[hybrid])
        kinds = {0: ("full_attention", None), 1: (hybrid, 33 if hybrid == "sliding_window" else None)}
    try:
        proc, port, endpoints = start_sim(sim, encoding, ranks, profile)
    finally:
        if profile:
            os.unlink(profile)
    ctx = zmq.Context()
    try:
        assert sorted(endpoints) == list(range(ranks)), endpoints
        n = 0

        def send(count):
            nonlocal n
            for _ in range(count):
                body = {"model": "sim-model", "max_tokens": 4 + n % 5,
                        "messages": [{"role": "user", "content": prompt(n)}]}
                http_json(port, "POST", "/v1/chat/completions", body,
                          {"X-data-parallel-rank": str(n % ranks)})
                n += 1

        send(6)  # Published before anyone listens: only the replay socket has them.
        subs = [Subscriber(ctx, endpoints[r][0], endpoints[r][1], r, drop_every=5, kinds=kinds)
                for r in range(ranks)]
        for phase in range(4):
            send(12)
            if phase == 1:
                http_json(port, "POST", "/reset_prefix_cache")
            for s in subs:
                s.pump(100)
        # Converge: the last batch may have been dropped on purpose; a final replay covers it.
        deadline = time.time() + 20
        while True:
            for s in subs:
                s.pump(100)
                s.replay_from(s.last_seq + 1)
            truth = http_json(port, "GET", "/debug/blocks")["ranks"]
            ok = all(differences(truth[r], subs[r], hybrid) == [] for r in range(ranks))
            if ok or time.time() > deadline:
                break
        for r, s in enumerate(subs):
            assert differences(truth[r], s, hybrid) == [], (differences(truth[r], s, hybrid), r)
            st = s.stats
            assert s.group_set(0, "GPU"), "no blocks cached at the end"
            if hybrid:
                assert s.group_set(1, "GPU"), "no blocks cached in group 1 at the end"
                assert st["group1_removed"] > 0, st  # Group 1's own pool evicts.
            assert st["gaps"] > 0 and st["replayed"] > 0, st
            assert st["BlockRemoved"] > 0 and st["cpu_stored"] > 0, st
            assert st["AllBlocksCleared"] == 1, st
            assert st["big_hashes"] > 0, st  # uint64 >= 2^63 decoded as such
            print("%s%s rank %d: gpu=%d cpu=%d %s" % (
                encoding, " " + hybrid if hybrid else "", r, len(s.group_set(0, "GPU")),
                len(s.group_set(0, "CPU")), st))
    finally:
        ctx.destroy(linger=0)
        proc.kill()
        proc.wait()


def differences(truth, sub, hybrid):
    """Where the subscriber's sets differ from one rank's GET /debug/blocks."""
    want = {(0, "GPU"): truth["GPU"], (0, "CPU"): truth["CPU"]}
    if hybrid:
        for g in truth["groups"]:
            want[(g["group_idx"], "GPU")] = g["GPU"]
    return [key for key, hashes in want.items() if set(hashes) != sub.group_set(*key)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True)
    args = parser.parse_args()
    start = time.time()
    for encoding in ("array", "map"):
        run(args.sim, encoding)
        for hybrid in HYBRID_PROFILES:
            run(args.sim, encoding, hybrid=hybrid)
        assert time.time() - start < DEADLINE_S, "too slow"
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
