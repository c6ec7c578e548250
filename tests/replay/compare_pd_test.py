#!/usr/bin/python3
"""bench/compare's P/D rows end to end, for each of the four P/D protocols: a few seconds of the
agentic traces through kvgate in front of prefill and decode simulators must be answered,
request for request. kvgate accepts a
vLLM NIXL prefill worker's kv_transfer_params only when they name that worker (issue 27), so the
bench's config has to say where each simulator's side channel is; when it did not, every
disaggregated request of the P/D table was a 502 and the table still printed.
Usage: compare_pd_test.py BIN_DIR (where kvgate, kvgate-sim and kvgate-replay are)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BIN_DIR = None


class PdRowsTest(unittest.TestCase):
    def run_rows(self, protocol, policies):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.md")
            with open(out, "w") as f:
                f.write("<!-- compare-pd:begin -->\n<!-- compare-pd:end -->\n")
            summary = os.path.join(tmp, "summary.json")
            cmd = [sys.executable, os.path.join(ROOT, "bench", "compare"), "--bin-dir", BIN_DIR,
                   "--workers", "4", "--pd-fleet", "2x2", "--pd-protocol", protocol,
                   "--workloads", "agentic", "--policies", policies, "--duration", "4",
                   "--conversations", "4", "--gpu-blocks", "20000", "--section", "compare-pd",
                   "--out", out, "--plot", os.path.join(tmp, "p.png"),
                   "--summary-json", summary]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            with open(summary) as f:
                return json.load(f)["agentic"], done.stderr

    def test_every_request_of_a_disaggregated_row_is_answered(self):
        for protocol in ("vllm-nixl", "vllm-mooncake", "vllm-p2p-nccl", "sglang-bootstrap"):
            with self.subTest(protocol=protocol):
                rows, log = self.run_rows(protocol, "kvaware@pd-noskip")
                self.assertEqual(len(rows), 1)
                row = rows[0]
                self.assertGreater(row["requests"], 0, log[-3000:])
                self.assertEqual(row["errors"], 0, log[-3000:])
                # Each request went through a prefill worker (no skip), and the decode
                # simulators counted the cached tokens the replayer was told about.
                decisions = row["pd"] or {}
                self.assertGreater(decisions.get("disaggregated", 0), 0, decisions)
                self.assertTrue(row["counters_match"], log[-3000:])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BIN_DIR = os.path.abspath(sys.argv.pop(1))
    unittest.main()
