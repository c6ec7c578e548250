#!/usr/bin/python3
"""The agents' official SDKs (npm @anthropic-ai/sdk and openai) through kvgate to kvgate-sim.

Starts `kvgate-sim --workers 2` and a kvgate in front of both (kvaware routing, an admin token),
waits for GET /ready, then runs sdk_test.mjs under node with the gateway's base URL; its exit
code is this test's. Hermetic: ephemeral ports, a temporary directory, and every child killed on
every exit path (they also die with this process: PR_SET_PDEATHSIG). The SDKs come from
$KVGATE_NPM_DIR (default /var/cache/kvgate/npm), where scripts/setup always installs them: a
missing one fails the test, with the reason.

Usage: sdk_test.py --kvgate BIN --sim BIN --node-script sdk_test.mjs
"""

import argparse
import ctypes
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NPM_DIR = os.environ.get("KVGATE_NPM_DIR", "/var/cache/kvgate/npm")
NPM_PACKAGES = ("@anthropic-ai/sdk", "openai")
ADMIN_TOKEN = "sdk-test-admin"
START_DEADLINE_S = 30
NODE_DEADLINE_S = 90


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def die_with_parent():
    # Runs in the child before exec: SIGKILL it when this driver dies, however it dies.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Child:
    """A child process whose stdout and stderr go to a file in `tmp`."""

    def __init__(self, name, args, tmp):
        self.name = name
        self.path = os.path.join(tmp, f"{name}.log")
        self.log_file = open(self.path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)

    def log(self):
        with open(self.path, errors="replace") as f:
            return f.read()

    def wait_for(self, pattern, what):
        """Polls the log for `pattern` until the deadline; fails when the child exits first."""
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            m = re.search(pattern, self.log(), re.M)
            if m:
                return m
            if self.proc.poll() is not None:
                fail(f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.log()}")
            if time.monotonic() > deadline:
                fail(f"{self.name}: no {what} within {START_DEADLINE_S}s:\n{self.log()}")
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log_file.close()


def ready(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/ready")
        status = conn.getresponse().status
        conn.close()
        return status == 200
    except OSError:
        return False


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # Unwinds through the finally blocks that stop the children.


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvgate", required=True)
    parser.add_argument("--sim", required=True)
    parser.add_argument("--node-script", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    node = shutil.which("node")
    if not node:
        fail("node not found (scripts/setup installs Node 20)")
    for pkg in NPM_PACKAGES:
        if not os.path.isdir(os.path.join(NPM_DIR, "node_modules", pkg)):
            fail(f"npm package {pkg} not under {NPM_DIR}/node_modules (scripts/setup installs it; "
                 "set KVGATE_NPM_DIR if it installed them elsewhere)")
    for b in (args.kvgate, args.sim):
        if not os.access(b, os.X_OK):
            fail(f"{b} is not built")

    tmp = tempfile.mkdtemp(prefix="kvgate-agent-sdk-")
    children = []
    node_proc = None
    try:
        sim = Child("kvgate-sim", [args.sim, "--workers", "2", "--port", "0", "--time-scale",
                                   "0.02", "--log-level", "warn"], tmp)
        children.append(sim)
        sim.wait_for(r"^ready$", "ready line")
        ports = re.findall(r"^port=(\d+) worker=\d+$", sim.log(), re.M)
        if len(ports) != 2:
            fail(f"expected two port= lines:\n{sim.log()}")
        workers = [f"http://127.0.0.1:{p}" for p in ports]

        config = os.path.join(tmp, "kvgate.yaml")
        with open(config, "w") as f:
            f.write('listen: "127.0.0.1:0"\nthreads: 1\n'
                    f"admin: {{token: {ADMIN_TOKEN}}}\n"
                    "routing: {policy: kvaware}\nworkers:\n" +
                    "".join(f"  - url: {w}\n" for w in workers))
        gateway = Child("kvgate", [args.kvgate, "--config", config], tmp)
        children.append(gateway)
        port = int(gateway.wait_for(r"kvgate listening on 127\.0\.0\.1:(\d+)",
                                    "listening line").group(1))
        deadline = time.monotonic() + START_DEADLINE_S
        while not ready(port):
            if gateway.proc.poll() is not None:
                fail(f"kvgate exited ({gateway.proc.returncode}):\n{gateway.log()}")
            if time.monotonic() > deadline:
                fail(f"GET /ready not 200 within {START_DEADLINE_S}s:\n{gateway.log()}")
            time.sleep(0.05)

        env = dict(os.environ, KVGATE_NPM_DIR=NPM_DIR, KVGATE_WORKERS=",".join(workers),
                   KVGATE_ADMIN_TOKEN=ADMIN_TOKEN)
        node_proc = subprocess.Popen([node, args.node_script, f"http://127.0.0.1:{port}"],
                                     env=env, stdin=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)
        try:
            rc = node_proc.wait(timeout=NODE_DEADLINE_S)
        except subprocess.TimeoutExpired:
            fail(f"node did not finish within {NODE_DEADLINE_S}s")
        if rc != 0:
            print(f"--- kvgate log ---\n{gateway.log()[-6000:]}", flush=True)
            print(f"--- kvgate-sim log ---\n{sim.log()[-3000:]}", flush=True)
        return rc
    finally:
        if node_proc is not None and node_proc.poll() is None:
            node_proc.kill()
            node_proc.wait()
        for c in reversed(children):
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
