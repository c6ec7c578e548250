#!/usr/bin/python3
"""Tests of bench/compare's tables without running anything: a replay report becomes a row
(TTFT floor and prediction error included, in simulated seconds), the row becomes markdown
columns, and compare_plot.rows_from_markdown reads new and old tables back (--replot)."""
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
_loader = importlib.machinery.SourceFileLoader("compare", os.path.join(BENCH, "compare"))
_spec = importlib.util.spec_from_loader("compare", _loader)
compare = importlib.util.module_from_spec(_spec)
_loader.exec_module(compare)
import compare_plot  # noqa: E402


def report(floor=True, prediction=True, engine=True):
    """A kvgate-replay JSON report, wall-clock seconds."""
    r = {"api": "chat", "totals": {"requests": 10, "ok": 10, "errors": 0, "prompt_tokens": 1000,
                                   "cached_tokens": 600, "store_tokens": 0,
                                   "cached_ratio": 0.6, "output_tokens_per_s": 50.0},
         "ttft_s": {"count": 10, "mean": 0.05, "p50": 0.04, "p90": 0.08, "p99": 0.1},
         "tpot_s": {"count": 10, "mean": 0.001, "p50": 0.001, "p90": 0.001, "p99": 0.001},
         "workers": {"w1": {"requests": 5}, "w2": {"requests": 5}},
         "bounds": {"ideal_reuse_ratio": 0.8, "pooled_lru_reuse_ratio": 0.75}}
    if engine:  # kvgate-sim's clocks: less than the client's TTFT
        r["engine_ttft_s"] = {"count": 10, "mean": 0.03, "p50": 0.02, "p90": 0.05, "p99": 0.07}
        r["engine_above_floor_s"] = {"count": 10 if floor else 0, "mean": 0.02, "p50": 0.01,
                                     "p90": 0.03, "p99": 0.05}
    if floor:
        r["floor"] = {"prefill_tokens_per_s": 285714.3, "count": 10, "compulsory_tokens": 400,
                      "mean_s": 0.01, "p99_s": 0.04, "ttft_mean_above_s": 0.04,
                      "ttft_p99_above_s": 0.06}
    if prediction:
        r["prediction"] = {"count": 10, "abs_error_p50": 0.123, "abs_error_p90": 0.456,
                           "bias": -0.05}
    return r


class RowTest(unittest.TestCase):
    def test_floor_in_simulated_seconds_and_prediction_error(self):
        x = compare.row("kvaware", report(), 0.05)
        self.assertAlmostEqual(x["ttft_mean_above_floor"], 0.8)
        self.assertAlmostEqual(x["ttft_p99_above_floor"], 1.2)
        self.assertAlmostEqual(x["floor_mean"], 0.2)
        self.assertEqual(x["pred_abs_p50"], 0.123)
        self.assertEqual(x["pred_abs_p90"], 0.456)

    def test_engine_clock_ttft_in_simulated_seconds(self):
        x = compare.row("kvaware", report(), 0.05)
        self.assertAlmostEqual(x["engine_ttft_mean"], 0.6)
        self.assertAlmostEqual(x["engine_mean_above_floor"], 0.4)
        # A P/D row's answering decode did not see the prefill: no engine figure.
        self.assertIsNone(compare.row("kvaware@pd", report(), 0.05)["engine_ttft_mean"])
        # Without a floor, or from a replayer before the field, None (not 0).
        self.assertIsNone(compare.row("kvaware", report(floor=False), 0.05)
                          ["engine_mean_above_floor"])
        self.assertIsNone(compare.row("kvaware", report(engine=False), 0.05)["engine_ttft_mean"])

    def test_reports_without_floor_or_prediction(self):
        x = compare.row("round_robin", report(floor=False, prediction=False), 0.05)
        self.assertIsNone(x["ttft_mean_above_floor"])
        self.assertIsNone(x["pred_abs_p50"])


class FloorRateTest(unittest.TestCase):
    def args(self, profile=None):
        class Args:
            sim_profile = profile
        return Args()

    def test_default_profile_in_wall_clock_tokens_per_second(self):
        # 7e-5 simulated s a token; 0.05 real s a simulated s.
        self.assertAlmostEqual(compare.floor_prefill_rate(self.args(), 0.05), 285714.2857, 3)
        self.assertAlmostEqual(compare.floor_prefill_rate(self.args(), 1.0), 14285.7142, 3)

    def test_reads_the_profile(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("name: x\nprefill_per_token_ctx_s: 1.0e-9\nprefill_per_token_s: 1.0e-4  # c\n")
            f.flush()
            self.assertAlmostEqual(compare.floor_prefill_rate(self.args(f.name), 0.05), 200000)


class TableTest(unittest.TestCase):
    def rows(self):
        return [compare.row("kvaware", report(), 0.05),
                compare.row("round_robin", report(prediction=False), 0.05),
                compare.row("cost", report(floor=False, prediction=False), 0.05)]

    def test_new_columns(self):
        md = compare.table(self.rows())
        lines = md.splitlines()
        self.assertIn("| mean above floor s | p99 above floor s | engine-clock TTFT mean / above "
                      "floor s | pred \\|err\\| p50 / p90 |", lines[0])
        self.assertIn("| 0.800 | 1.200 | 0.600 / 0.400 | 12.3% / 45.6% |", lines[2])
        self.assertIn("| 0.800 | 1.200 | 0.600 / 0.400 |  |", lines[3])  # no prediction: blank
        self.assertIn("| n/a | n/a | 0.600 / n/a |  |", lines[4])  # a report before the floor
        # Every line has as many (unescaped) cells as the header.
        counts = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
        self.assertEqual(len(counts), 1, md)
        note = compare.floor_note(self.rows(), 7e-5)
        self.assertIn("at 14,286 tokens per simulated second", note[0])
        self.assertIn("mean 0.200 s, p99 0.800 s", note[0])

    def test_store_and_pd_tables_have_them_too(self):
        for policy in ("kvaware+store", "kvaware@pd"):
            x = compare.row(policy, report(), 0.05)
            x.update({"counters_match": True, "pd": None, "sims": {}})
            md = compare.table([x])
            self.assertIn("pred \\|err\\| p50 / p90", md)
            engine = "n/a" if "@pd" in policy else "0.600 / 0.400"
            self.assertIn(f"| 0.800 | 1.200 | {engine} | 12.3% / 45.6% |", md)

    def test_replot_reads_new_and_old_tables(self):
        new = compare_plot.rows_from_markdown("### agentic\n\n" + compare.table(self.rows()))
        x = new["agentic"][0]
        self.assertEqual(x["policy"], "kvaware")
        self.assertAlmostEqual(x["ttft_mean"], 1.0)
        self.assertAlmostEqual(x["gpu_cached"], 0.6)  # columns after the escaped pipes line up
        self.assertAlmostEqual(x["ttft_mean_above_floor"], 0.8)
        self.assertIsNone(new["agentic"][2]["ttft_mean_above_floor"])
        old = compare_plot.rows_from_markdown(
            "### agentic\n\n| policy | requests (errors) | TTFT mean s | cached tokens |\n"
            "| --- | --- | --- | --- |\n| cost | 10 (0) | 1.500 | 60.0% |\n")
        self.assertEqual(old["agentic"][0]["ttft_mean"], 1.5)
        self.assertNotIn("ttft_mean_above_floor", old["agentic"][0])


class PreciseNoteTest(unittest.TestCase):
    def precise(self, policy, mean, lag):
        return {"policy": policy, "ttft_mean": mean,
                "precise": {"verified": 8, "lag_p99_le": lag, "lag_samples": 38326.0}}

    def test_a_lag_that_is_a_large_share_of_the_ttft_is_flagged(self):
        # 0.25 s wall at time scale 0.05 is 5 s simulated, against a mean TTFT of 1.27 s.
        note = compare.precise_note(self.precise("kvaware-precise+store", 1.27, 0.25), 8, 0.05)
        self.assertIn("p99 ≤ 250 ms (≤ 5 s simulated) over 38326 batches", note[0])
        self.assertIn("stale view", note[0])

    def test_a_lag_the_machine_kept_small_is_only_reported(self):
        # 0.02 s wall at time scale 0.2 is 0.1 s simulated, a seventh of 0.70 s.
        note = compare.precise_note(self.precise("kvaware-precise+store", 0.70, 0.02), 8, 0.2)
        self.assertIn("(≤ 0.1 s simulated)", note[0])
        self.assertNotIn("stale view", note[0])

    def test_rows_without_events_have_no_note(self):
        self.assertEqual(compare.precise_note({"policy": "kvaware", "ttft_mean": 1.0}, 8, 0.05),
                         [])
        note = compare.precise_note(self.precise("kvaware-precise", 1.0, None), 8, 0.05)
        self.assertIn("p99 n/a", note[0])


class LagNoteTest(unittest.TestCase):
    def rows(self, *rows):
        return [{"policy": p, "ttft_mean": mean, "sims": {"max_lag_s": v}} for p, mean, v in rows]

    def test_a_row_whose_simulator_fell_behind_more_than_its_mean_ttft_is_named(self):
        # 0.412 real s at time scale 0.05 is 8.24 simulated s, against a mean TTFT of 1.3 s.
        note = compare.lag_note(self.rows(("kvaware+store", 1.2, 0.045),
                                          ("cost+store", 1.3, 0.412)), 0.05)
        self.assertIn("kvaware+store 0.045 (0.90), cost+store 0.412 (8.24).", note[0])
        self.assertIn("More than the mean TTFT in cost+store:", note[0])
        self.assertNotIn("in kvaware+store", note[0])

    def test_a_testbed_that_kept_up_is_only_reported(self):
        # 0.1 real s at time scale 0.1 is 1 simulated s: not more than a mean of 1 s.
        note = compare.lag_note(self.rows(("kvaware", 1.0, 0.1), ("cache_aware", 2.0, 0.02)), 0.1)
        self.assertIn("kvaware 0.100 (1.00), cache_aware 0.020 (0.20).", note[0])
        self.assertNotIn("More than", note[0])

    def test_rows_from_before_the_figure_have_no_note(self):
        self.assertEqual(compare.lag_note([{"policy": "kvaware", "sims": {}},
                                           {"policy": "cost", "sims": None}], 0.05), [])


class FailureNoteTest(unittest.TestCase):
    def test_a_row_that_mostly_failed_is_flagged_with_its_error_kinds(self):
        # The P/D rows while bench/compare's config lacked kv_transfer_ports: 335 of 351 were 502s.
        x = {"policy": "cache_aware@pd", "requests": 16, "errors": 335,
             "error_kinds": {"http_502": 335}}
        note = compare.failure_note(x)
        self.assertIn("cache_aware@pd: 335 of 351 requests failed", note[0])
        self.assertIn("http_502 335", note[0])

    def test_a_few_failures_are_not_flagged(self):
        # The Mooncake conversation rows: 7 prompts larger than a worker's KV cache of 911.
        x = {"policy": "kvaware", "requests": 904, "errors": 7, "error_kinds": {"http_400": 7}}
        self.assertEqual(compare.failure_note(x), [])
        self.assertEqual(compare.failure_note({"policy": "cost", "requests": 0, "errors": 0}), [])

    def test_a_report_row_carries_its_error_kinds(self):
        r = report()
        r["error_kinds"] = {"transport": 2}
        self.assertEqual(compare.row("kvaware", r, 0.05)["error_kinds"], {"transport": 2})


if __name__ == "__main__":
    unittest.main()
