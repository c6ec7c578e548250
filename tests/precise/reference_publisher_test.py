#!/usr/bin/python3
"""An independent vLLM KV-event publisher checked against kvgate's precise mode.

It shares no code with kvgate: Python's zmq and msgpack only, following
shared/reference/protocols.md section 1 (framing 1.3, payload 1.4, replay 1.5). The publisher
keeps its own model of what the "engine" holds per tier and, after every step, polls kvgate's
GET /admin/workers?blocks=1 until the worker's engine block ids equal that model exactly.

Scenarios, in order, against one kvgate with one worker (topic "kv", block_size 4):
  cold start  batches published before kvgate runs are recovered from the replay socket;
  encodings   legacy array and map events, an outer map batch, uint64 hashes >= 2^63, negative
              int64 hashes, bin hashes, unknown keys, unknown trailing array elements, unknown
              event types, an unknown medium, CPU medium -> host tier, BlockRemoved,
              AllBlocksCleared (both forms), LoRA namespaces, a message on another topic;
              /admin/explain matches chains of the stored token ids;
  gap         seq N+2 published live without N+1 (which only the replay buffer has): kvgate
              must replay it, losing nothing and applying nothing twice;
  restart     the sequence restarts at 0 with a new block set: everything else is dropped;
  metrics     GET /metrics agrees with the counters.

Bin hashes are folded by kvgate into 64-bit ids (XXH3-64 of the bytes), which Debian's Python
cannot compute; the model treats a bin hash's id as unknown until the comparison pins it down
(exactly one unknown id left in a tier), and from then on checks it exactly.

Usage: reference_publisher_test.py --kvgate path/to/kvgate [--keep-logs]
"""

import argparse
import ctypes
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import zmq

U64 = 2**64 - 1
END_SEQ = 2**64 - 1
TOPIC = b"kv"
MODEL = "ref-model"
BLOCK_SIZE = 4
WAIT_S = 5.0  # Deadline for kvgate to reflect one step.
ADMIN_TOKEN = "kvgate-test-admin"  # admin endpoints are off the API listener without one


class TestFailure(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Events: one Python dict per event (the map form's field names), encoded in either form.

STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                 "kv_cache_spec_sliding_window"]
FIELDS = {"BlockStored": STORED_FIELDS,
          "BlockRemoved": ["block_hashes", "medium", "group_idx"],
          "AllBlocksCleared": []}


def stored(hashes, parent, tokens, medium="GPU", lora_name=None, **more):
    ev = {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent,
          "token_ids": list(tokens), "block_size": BLOCK_SIZE, "lora_id": None,
          "medium": medium, "lora_name": lora_name}
    ev.update(more)
    return ev


def removed(hashes, medium="GPU"):
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium}


def cleared():
    return {"type": "AllBlocksCleared"}


def as_array(ev, tail=()):
    """Legacy positional form: [tag, field...], trailing defaults omitted (msgspec
    omit_defaults), then `tail`: elements of fields a newer engine might add."""
    names = FIELDS[ev["type"]]
    values = [ev.get(k) for k in names]
    if not tail:
        while values and values[-1] is None:
            values.pop()
    return [ev["type"]] + values + list(tail)


def as_map(ev, omit=(), **unknown):
    """Map form: the tag under "type", absent keys for omitted fields, plus unknown keys."""
    out = {k: v for k, v in ev.items() if k not in omit}
    out.update(unknown)
    return out


def batch_array(events, rank=0):
    return msgpack.packb([time.time(), events, rank])


def batch_map(events, rank=0):
    return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": rank})


# ----------------------------------------------------------------------------------------------
# The engine side: a PUB socket, a ROUTER replay socket and the replay buffer.

class Publisher:
    """One engine's event publisher (vLLM's ZmqEventPublisher, section 1.2-1.5).

    Its PUB is an XPUB: identical on the wire, but it also tells us when kvgate's subscription
    arrived, so no live message is lost to ZeroMQ's slow-joiner race. The ROUTER is serviced
    by a background thread (service_replay); the main thread publishes.
    """

    def __init__(self, ctx, topic=TOPIC):
        self.topic = topic
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind("tcp://127.0.0.1:*")
        self.replay_endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.lock = threading.Lock()
        self.buffer = []  # (seq, payload), what the engine can replay.
        self.next_seq = 0
        self.replay_requests = []  # Start sequences requested, in order.
        self.invalid_requests = 0
        self.subscribed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="replay", daemon=True)
        self._thread.start()

    def publish(self, payload, live=True, buffered=True):
        """Sends the next batch: live on the PUB socket and/or kept for replay."""
        with self.lock:
            seq = self.next_seq
            self.next_seq += 1
            if buffered:
                self.buffer.append((seq, payload))
        if live:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def publish_other_topic(self, topic, payload):
        """A message on another topic, numbered as if it were the stream's next batch."""
        self.pub.send_multipart([topic, self.next_seq.to_bytes(8, "big"), payload])

    def restart(self):
        """The engine process restarts: the sequence starts again at 0, the buffer is empty."""
        with self.lock:
            self.next_seq = 0
            self.buffer = []

    def wait_subscribed(self, timeout_s):
        deadline = time.time() + timeout_s
        while not self.subscribed:
            left = deadline - time.time()
            if left <= 0 or not self.pub.poll(int(left * 1000)):
                raise TestFailure("kvgate never subscribed to %s" % self.endpoint)
            msg = self.pub.recv()
            if msg == b"\x01" + self.topic:
                self.subscribed = True
            elif not msg.startswith(b"\x00"):
                raise TestFailure("unexpected subscription %r (expected topic %r)"
                                  % (msg, self.topic))

    def service_replay(self, timeout_ms):
        """Answers one replay request, if one arrives within timeout_ms (vLLM _service_replay)."""
        if not self.router.poll(timeout_ms):
            return
        frames = self.router.recv_multipart()
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            self.invalid_requests += 1
            return
        client, start = frames[0], int.from_bytes(frames[2], "big")
        with self.lock:
            self.replay_requests.append(start)
            replies = [(s, p) for s, p in self.buffer if s >= start]
        for seq, payload in replies:
            self.router.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
        self.router.send_multipart([client, b"", END_SEQ.to_bytes(8, "big"), b""])

    def _serve(self):
        while not self._stop.is_set():
            self.service_replay(20)

    def close(self):
        self._stop.set()
        self._thread.join()
        self.router.close()
        self.pub.close()


# ----------------------------------------------------------------------------------------------
# The publisher's model of what the engine holds, in kvgate's terms.

TIERS = ("gpu", "host", "store")


def tier_of(medium):
    if medium is None or medium.lower() == "gpu":
        return "gpu"
    if medium.lower() in ("cpu", "cpu_pinned", "host"):
        return "host"
    if medium.lower() in ("disk", "external", "remote", "store"):
        return "store"  # kvgate's built-in names (SGLang HiCache L3, LMCache)
    return None  # Unknown media are ignored (none configured).


class EngineModel:
    """Blocks per tier, keyed by the engine's hash (int or bytes), each with its token prefix
    (namespace, tokens from the root) so that expected /admin/explain matches can be computed."""

    def __init__(self, model):
        self.model = model
        self.tiers = {t: {} for t in TIERS}
        self.learned = {}  # bin hash -> kvgate's 64-bit id, once pinned down.

    def prefix_of(self, key):
        for blocks in self.tiers.values():
            if key in blocks:
                return blocks[key]
        return None

    def apply(self, ev):
        kind = ev.get("type")
        if kind == "BlockStored":
            tier = tier_of(ev.get("medium"))
            if tier is None or ev.get("group_idx") not in (None, 0):
                return
            parent = ev.get("parent_block_hash")
            if parent is None:
                ns, tokens = ev.get("lora_name") or self.model, ()
            else:
                found = self.prefix_of(parent)
                assert found is not None, "test bug: parent %r is not held" % (parent,)
                ns, tokens = found
            ids = ev["token_ids"]
            assert len(ids) == len(ev["block_hashes"]) * BLOCK_SIZE, "test bug: token count"
            for i, h in enumerate(ev["block_hashes"]):
                tokens = tokens + tuple(ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
                self.tiers[tier][h] = (ns, tokens)
        elif kind == "BlockRemoved":
            tier = tier_of(ev.get("medium"))
            if tier is not None:
                for h in ev["block_hashes"]:
                    self.tiers[tier].pop(h, None)
        elif kind == "AllBlocksCleared":
            for blocks in self.tiers.values():
                blocks.clear()
        # Anything else is an unknown event type: ignored.

    def clear(self):
        for blocks in self.tiers.values():
            blocks.clear()

    def kvgate_id(self, key):
        """The id kvgate reports for an engine hash; None for a bin hash not pinned down yet."""
        if isinstance(key, int):
            return key & U64
        return self.learned.get(key)

    def expected(self, tier):
        known = {self.kvgate_id(k) for k in self.tiers[tier] if self.kvgate_id(k) is not None}
        unknown = [k for k in self.tiers[tier] if self.kvgate_id(k) is None]
        return known, unknown

    def match(self, reported):
        """Whether kvgate's {tier: set(ids)} fits the model; learns bin ids it pins down."""
        learn = {}
        for tier in TIERS:
            known, unknown = self.expected(tier)
            got = reported.get(tier, set())
            extra = got - known
            if not known <= got or len(extra) != len(unknown):
                return False
            if extra & {v for v in self.learned.values()}:
                return False  # A learned id where the model says it is not.
            if len(unknown) == 1:
                learn[unknown[0]] = next(iter(extra))
        if len(set(learn.values())) != len(learn):
            return False
        self.learned.update(learn)
        return True

    def precise_blocks(self, prompt, model=None):
        """Leading full blocks of `prompt` held in any tier (what /admin/explain should say)."""
        held = {p for blocks in self.tiers.values() for p in blocks.values()}
        ns, n = model or self.model, 0
        while (n + 1) * BLOCK_SIZE <= len(prompt) and \
                (ns, tuple(prompt[:(n + 1) * BLOCK_SIZE])) in held:
            n += 1
        return n

    def describe(self, tier):
        return sorted("%#x" % self.kvgate_id(k) if self.kvgate_id(k) is not None
                      else "bin:%s" % k.hex()[:12] for k in self.tiers[tier])


# ----------------------------------------------------------------------------------------------
# The worker's HTTP side (kvgate scrapes it; nothing here is checked).

class FakeWorkerHandler(http.server.BaseHTTPRequestHandler):
    def _reply(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            self._reply(200, json.dumps({"object": "list",
                                         "data": [{"id": MODEL, "object": "model"}]}))
        elif self.path.startswith("/health"):
            self._reply(200, "")
        elif self.path.startswith("/metrics"):
            self._reply(200, "", "text/plain")
        else:
            self._reply(404, "{}")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/v1/completions"):
            self._reply(200, json.dumps({
                "id": "cmpl-ref", "object": "text_completion", "created": int(time.time()),
                "model": MODEL, "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
        else:
            self._reply(404, "{}")

    def log_message(self, *args):
        pass


# ----------------------------------------------------------------------------------------------
# kvgate as a child process.

def _die_with_parent():
    # PR_SET_PDEATHSIG: kvgate is killed even if this test is (ctest's TIMEOUT sends SIGKILL).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class Gateway:
    def __init__(self, binary, workdir, worker_url, publisher):
        self.log_path = os.path.join(workdir, "kvgate.log")
        config = os.path.join(workdir, "kvgate.yaml")
        with open(config, "w") as f:
            f.write("""listen: "127.0.0.1:0"
threads: 1
health_check: {enabled: false}
admin: {token: %s}
routing:
  policy: kvaware
  precise: {probe: false}
workers:
  - url: %s
    models: [%s]
    kv_events: {endpoint: "%s", replay_endpoint: "%s", topic: "%s", block_size: %d}
""" % (ADMIN_TOKEN, worker_url, MODEL, publisher.endpoint, publisher.replay_endpoint, TOPIC.decode(),
                BLOCK_SIZE))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([binary, "--config", config], stdout=log,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self.port = None
        deadline = time.time() + 15
        while self.port is None:
            m = re.search(r"kvgate listening on [^ ]+:([0-9]+) ", self.log())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise TestFailure("kvgate exited (%s) at startup:\n%s"
                                  % (self.proc.returncode, self.log()))
            elif time.time() > deadline:
                raise TestFailure("kvgate did not log its port:\n%s" % self.log())
            else:
                time.sleep(0.02)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = dict(headers or {})
        if path.startswith("/admin/"):
            headers["Authorization"] = "Bearer " + ADMIN_TOKEN
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get_json(self, path):
        status, data = self.request("GET", path)
        if status != 200:
            raise TestFailure("GET %s: HTTP %d %s" % (path, status, data[:500]))
        return json.loads(data)

    def worker(self):
        """The one worker's /admin/workers entry (with engine block ids)."""
        workers = self.get_json("/admin/workers?blocks=1")["workers"]
        if len(workers) != 1:
            raise TestFailure("expected one worker, got %s" % json.dumps(workers)[:1000])
        return workers[0]

    def explain(self, prompt):
        body = {"model": MODEL, "prompt": list(prompt), "max_tokens": 1}
        status, data = self.request("POST", "/admin/explain", body,
                                    {"Content-Type": "application/json",
                                     "x-kvgate-endpoint": "/v1/completions"})
        if status != 200:
            raise TestFailure("POST /admin/explain: HTTP %d %s" % (status, data[:500]))
        return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# ----------------------------------------------------------------------------------------------
# Checks.

def reported_ids(rank):
    ids = rank.get("engine_block_ids") or {}
    return {t: set(ids.get(t, [])) for t in TIERS}


class Checker:
    def __init__(self, gateway, model):
        self.gw = gateway
        self.model = model
        self.failures = 0
        # Counters kvgate should show, maintained by the scenarios.
        self.counters = {"gaps": 0, "replays": 0, "lost_batches": 0, "restarts": 0,
                         "bad_messages": 0, "orphan_blocks": 0, "batches": 0}

    def result(self, name, ok=True, detail=""):
        print("%s %s%s" % ("PASS" if ok else "FAIL", name,
                           (": " + detail) if detail and not ok else ""))
        sys.stdout.flush()
        if not ok:
            self.failures += 1
        return ok

    def _rank_ok(self, w, extra):
        precise = w.get("precise") or {}
        ranks = precise.get("ranks") or []
        if len(ranks) != 1 or not ranks[0].get("subscribed"):
            return False, "rank 0 not subscribed"
        rank = ranks[0]
        problems = []
        if rank.get("replaying"):
            problems.append("replaying")
        if not rank.get("view_complete"):
            problems.append("view_complete is false")
        if rank.get("error"):
            problems.append("error %r" % rank["error"])
        for key, want in dict(self.counters, **extra).items():
            if callable(want):  # A predicate, e.g. at_least(2).
                if not want(rank.get(key)):
                    problems.append("%s=%r, expected %s" % (key, rank.get(key), want.__doc__))
            elif rank.get(key) != want:
                problems.append("%s=%r, expected %r" % (key, rank.get(key), want))
        blocks = precise.get("blocks") or {}
        for tier in TIERS:
            if blocks.get(tier) != len(self.model.tiers[tier]):
                problems.append("blocks.%s=%r, expected %d" % (tier, blocks.get(tier),
                                                               len(self.model.tiers[tier])))
        if not self.model.match(reported_ids(rank)):
            problems.append("engine_block_ids differ from the publisher's model")
        return not problems, "; ".join(problems)

    def step(self, name, **extra):
        """Polls /admin/workers until rank 0 shows exactly the model's blocks and the expected
        counters; prints a diff on timeout."""
        deadline = time.time() + WAIT_S
        while True:
            w = self.gw.worker()
            ok, why = self._rank_ok(w, extra)
            if ok:
                return self.result(name)
            if time.time() > deadline:
                break
            time.sleep(0.02)
        rank = ((w.get("precise") or {}).get("ranks") or [{}])[0]
        got = reported_ids(rank)
        lines = [why]
        for tier in TIERS:
            known, unknown = self.model.expected(tier)
            missing = sorted(known - got[tier])
            unexpected = sorted(got[tier] - known)
            lines.append("  %s: model %s" % (tier, self.model.describe(tier)))
            lines.append("  %s: missing %s, unexpected %s (%d unpinned bin hashes in the model)"
                         % (tier, ["%#x" % i for i in missing], ["%#x" % i for i in unexpected],
                            len(unknown)))
        status = {k: v for k, v in rank.items() if k != "engine_block_ids"}
        lines.append("  rank status: %s" % json.dumps(status, sort_keys=True))
        lines.append("  precise: state=%r reason=%r" % ((w.get("precise") or {}).get("state"),
                                                         (w.get("precise") or {}).get("reason")))
        self.result(name, False, "\n".join(lines))
        raise TestFailure("step %r failed" % name)

    def wait_verified(self):
        deadline = time.time() + WAIT_S
        while True:
            precise = self.gw.worker().get("precise") or {}
            if precise.get("state") == "verified":
                return
            if time.time() > deadline:
                raise TestFailure("worker never verified: state=%r reason=%r"
                                  % (precise.get("state"), precise.get("reason")))
            time.sleep(0.02)

    def explain(self, name, prompt, want=None):
        """/admin/explain must match `prompt` against the events to `want` leading blocks (by
        default what the model says)."""
        model_says = self.model.precise_blocks(prompt)
        if want is None:
            want = model_says
        assert want == model_says, "test bug: %s expects %d, the model says %d" % (
            name, want, model_says)
        self.wait_verified()
        out = self.gw.explain(prompt)
        cands = out.get("candidates") or []
        c = cands[0] if len(cands) == 1 else {}
        ok = (c.get("match_source") == "events" and c.get("precise_blocks") == want
              and c.get("dp_rank") == 0)
        return self.result("explain %s (%d blocks)" % (name, want), ok,
                           "" if ok else "prompt %s -> %s" % (list(prompt), json.dumps(out)))


def at_least(n):
    def pred(v):
        return isinstance(v, int) and v >= n
    pred.__doc__ = ">= %d" % n
    return pred


def parse_metrics(text):
    """{(name, frozenset(labels)): value} from Prometheus text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+)", line)
        if not m:
            continue
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


# ----------------------------------------------------------------------------------------------
# Scenarios.

# Engine hashes (ints are reported as uint64 bit patterns).
A1, A2 = 0xdab89baa7b5857c0, 2**64 - 1  # uint64, the first >= 2^63, the second the maximum.
N1, N2 = -12345, -(2**63)                # negative int64 (the old Python hash()).
B1, B2, B3 = b"\x01" * 32, b"\x02" * 31 + b"\x03", bytes(range(32))  # bin (sha256 digests).


def run(args, workdir):
    ctx = zmq.Context()
    pub = Publisher(ctx)
    model = EngineModel(MODEL)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeWorkerHandler)
    threading.Thread(target=httpd.serve_forever, name="worker-http", daemon=True).start()
    gw = None

    def send(payload_fn, events, live=True):
        """Publishes one batch of (dict event, encoded event) pairs and applies it to the model."""
        seq = pub.publish(payload_fn([enc for _, enc in events]), live=live)
        for ev, _ in events:
            model.apply(ev)
        return seq

    try:
        # -- cold start: three batches before kvgate exists (nobody receives them live).
        e = stored([A1, A2], None, range(1, 9))
        send(batch_array, [(e, as_array(e))])
        e = stored([1001], None, range(100, 104), medium=None)
        send(batch_array, [(e, as_map(e, omit=("medium",)))])
        r, e = removed([1001]), stored([1002], None, range(104, 108))
        send(batch_array, [(r, as_array(r)), (e, as_map(e))])

        gw = Gateway(args.kvgate, workdir, "http://127.0.0.1:%d" % httpd.server_address[1], pub)
        check = Checker(gw, model)
        check.counters.update(replays=1, batches=3)
        check.step("cold start: 3 batches published before kvgate started, recovered by replay",
                   replayed_batches=3, next_seq=3)
        check.result("cold start: kvgate asked to replay from 0", pub.replay_requests == [0],
                     "replay requests %s" % pub.replay_requests)
        check.explain("chain [1..8] for prompt [1..9]", range(1, 10), 2)
        check.explain("first block only for [1,2,3,4,9,...]", [1, 2, 3, 4, 9, 9, 9, 9, 9], 1)
        pub.wait_subscribed(WAIT_S)

        # -- encodings.
        # Outer map batch, map events with unknown keys, an unknown event type, negative int64
        # hashes chained to a uint64 parent, lower-case medium, newer optional fields.
        e1 = stored([N1], A2, range(9, 13), medium="gpu")
        e2 = stored([N2], N1, range(13, 17), extra_keys=[None], group_idx=0,
                    kv_cache_spec_kind="full_attention")
        unknown = {"type": "BlockPinned", "block_hashes": [5], "medium": "GPU"}
        send(batch_map, [(e1, as_map(e1, cache_salt="salt", session_id="s-1",
                                     metadata={"k": [1, 2]})),
                         (unknown, unknown),
                         (e2, as_map(e2, session_id=None))])
        check.counters["batches"] += 1
        check.step("map batch: map events, unknown keys and event type, negative int64 hashes")
        check.explain("chain across 3 events for [1..16,99]", list(range(1, 17)) + [99], 4)

        # Legacy arrays with unknown trailing elements, an unknown array event, a LoRA block
        # (namespace "X", same tokens as A1), an unknown medium ("nvme-of": ignored).
        u = stored([2**63 + 7], None, range(200, 204))
        lora = dict(stored([77], None, range(1, 5), lora_name="X"), lora_id=3)
        disk = stored([555], None, range(400, 404), medium="nvme-of")
        send(batch_array, [(u, as_array(dict(u, extra_keys=[None], group_idx=0,
                                              kv_cache_spec_kind="full_attention"),
                                         tail=["a-field-from-the-future", {"x": 1}])),
                           ({"type": "FutureEvent"}, ["FutureEvent", 1, "x", [2, 3]]),
                           (lora, as_array(lora)),
                           (disk, as_array(disk))])
        check.counters["batches"] += 1
        check.step("array batch: trailing unknown elements, unknown event, LoRA, unknown medium")

        # Bin hashes (map event without a medium key): ids pinned down after the next step.
        e = stored([B1, B2], None, range(20, 28), medium=None)
        send(batch_array, [(e, as_map(e, omit=("medium", "lora_id", "lora_name")))])
        check.counters["batches"] += 1
        check.step("bin hashes: 2 blocks stored (count only, ids not yet known)")
        check.explain("bin-hash chain for [20..27,1]", list(range(20, 28)) + [1], 2)
        r = removed([B1])
        send(batch_array, [(r, as_map(r))])
        check.counters["batches"] += 1
        check.step("bin hashes: one removed by its bytes, the other's id pinned down")
        check.result("bin hashes: B2's id is known", B2 in model.learned,
                     "model could not pin down B2's id")

        # CPU medium -> host tier: an int block also on GPU, a bin block chained to B2 (parent
        # lookup by bin hash), a CPU-only block.
        c1 = stored([A1], None, range(1, 5), medium="CPU")
        c2 = stored([B3], B2, range(28, 32), medium="cpu")
        c3 = stored([3], None, range(500, 504), medium="CPU")
        send(batch_array, [(c1, as_array(c1)), (c2, as_map(c2)), (c3, as_array(c3))])
        check.counters["batches"] += 1
        check.step("CPU medium: host tier (int and bin hashes, chained to a bin parent)")
        check.result("bin hashes: B3's id is known", B3 in model.learned,
                     "model could not pin down B3's id")

        # BlockRemoved: a GPU block in the middle of the chain, a CPU copy, an unknown id.
        r1, r2, r3 = removed([A2]), removed([A1], "CPU"), removed([999999])
        send(batch_array, [(r1, as_array(r1)), (r2, as_array(r2)), (r3, as_array(r3))])
        check.counters["batches"] += 1
        check.step("BlockRemoved (GPU and CPU tiers, an id never stored)")
        check.explain("[1..9] after its second block was removed", range(1, 10), 1)

        # A message on another topic, numbered as the next batch: must not be applied (if it
        # were, the real batch with that sequence would be dropped as a duplicate).
        bad = stored([0xBAD], None, range(600, 604))
        pub.publish_other_topic(b"other", batch_array([as_array(bad)]))
        # AllBlocksCleared (map form), then new blocks in the same batch.
        f1 = stored([11, 12], None, range(1, 9))
        f2 = stored([13], 12, range(9, 13), medium="CPU")
        send(batch_map, [(cleared(), as_map(cleared())), (f1, as_map(f1)), (f2, as_map(f2))])
        check.counters["batches"] += 1
        check.step("other topic ignored; AllBlocksCleared (map) then stores in the same batch")
        check.explain("[1..12,1] across gpu and host tiers", list(range(1, 13)) + [1], 3)

        # AllBlocksCleared (array form).
        f = stored([21], None, range(700, 704))
        send(batch_array, [(cleared(), as_array(cleared())), (f, as_array(f))])
        check.counters["batches"] += 1
        check.step("AllBlocksCleared (array) then a store")

        # -- gap: N+1 only in the replay buffer, N+2 live (and buffered).
        g1 = stored([31], 21, range(704, 708))
        g2 = stored([32], 31, range(708, 712))
        before = dict(gw.worker()["precise"]["ranks"][0])
        n1 = send(batch_array, [(g1, as_array(g1))], live=False)
        n2 = send(batch_array, [(g2, as_array(g2))])
        check.counters["gaps"] += 1
        check.counters["replays"] += 1
        check.counters["batches"] += 2  # Each applied once (the held live copy is a duplicate).
        check.step("gap: seq %d published only to the replay buffer, %d live" % (n1, n2),
                   replayed_batches=before["replayed_batches"] + 2, next_seq=n2 + 1)
        check.result("gap: kvgate asked to replay from %d" % n1, pub.replay_requests == [0, n1],
                     "replay requests %s" % pub.replay_requests)
        check.explain("chain completed by the replayed batch", list(range(700, 712)) + [1], 3)
        published = pub.next_seq

        # -- restart: the sequence starts again at 0 with a new block set.
        pub.restart()
        model.clear()
        s1 = stored([41, 42], None, range(800, 808))
        s2 = stored([43], None, range(900, 904), medium="CPU")
        s3 = stored([44], None, range(950, 954), lora_name="X")
        send(batch_array, [(s1, as_array(s1))])
        send(batch_map, [(s2, as_map(s2)), (s3, as_map(s3))])
        check.counters["restarts"] += 1
        check.counters["batches"] += 2
        # Whether kvgate also asks for a replay from 0 after a restart is its own business.
        check.counters["replays"] = at_least(check.counters["replays"])
        check.step("restart: seq back to 0 after %d batches, only the new blocks remain"
                   % published, next_seq=2)
        check.explain("new chain after the restart", list(range(800, 808)) + [1], 2)
        check.explain("old chain gone after the restart", list(range(700, 712)) + [1], 0)
        check.explain("a LoRA X block does not match a ref-model prompt", [950, 951, 952, 953, 1],
                      0)
        check.result("no malformed replay requests", pub.invalid_requests == 0,
                     "%d invalid requests" % pub.invalid_requests)

        # -- metrics (refreshed about once a second).
        w = gw.worker()
        name, rank = w["url"], w["precise"]["ranks"][0]
        want = {("kvgate_precise_mode_verified", ()): 1,
                ("kvgate_kv_events_batches_total", ()): check.counters["batches"],
                ("kvgate_kv_events_gaps_total", ()): 1,
                ("kvgate_kv_events_replays_total", ()): rank["replays"],
                ("kvgate_kv_events_restarts_total", ()): 1,
                ("kvgate_kv_events_lost_batches_total", ()): 0,
                ("kvgate_kv_blocks", (("tier", "gpu"),)): 3,
                ("kvgate_kv_blocks", (("tier", "host"),)): 1,
                ("kvgate_kv_blocks", (("tier", "store"),)): 0}
        deadline = time.time() + WAIT_S
        while True:
            status, text = gw.request("GET", "/metrics")
            metrics = parse_metrics(text.decode())
            got = {k: metrics.get((k[0], frozenset((("worker", name),) + k[1])))
                   for k in want}
            if status == 200 and got == want:
                break
            if time.time() > deadline:
                diff = ["%s%s: %r, expected %r" % (k[0], dict(k[1]), got[k], v)
                        for k, v in want.items() if got[k] != v]
                check.result("metrics", False, "HTTP %d; %s" % (status, "; ".join(diff)))
                raise TestFailure("metrics differ")
            time.sleep(0.1)
        check.result("metrics agree with /admin/workers", True)
        return check.failures
    except BaseException:
        if gw is not None:
            sys.stderr.write("---- kvgate log (tail) ----\n%s\n" % gw.log()[-6000:])
        raise
    finally:
        if gw is not None:
            gw.stop()
        httpd.shutdown()
        httpd.server_close()
        pub.close()
        ctx.destroy(linger=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvgate", required=True, help="path to the kvgate binary")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    # Turn SIGTERM (e.g. from a runner) into an exception so that cleanup runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = tempfile.mkdtemp(prefix="kvgate-refpub-")
    start = time.time()
    try:
        failures = run(args, workdir)
    except TestFailure as e:
        print("FAIL %s" % e)
        failures = 1
    finally:
        if args.keep_logs:
            print("logs in %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("%s in %.1f s" % ("OK" if failures == 0 else "FAILED (%d)" % failures,
                            time.time() - start))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
