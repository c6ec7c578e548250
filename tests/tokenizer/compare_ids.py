#!/usr/bin/env python3
"""Compares kvgate-tokenize's ids with the reference's, line by line (issue 16 parity tests).

  compare_ids.py CORPUS REFERENCE OURS [LABEL] [--skip-errors RENDERS]

Each file holds one JSON object per line; REFERENCE and OURS have "ids" (OURS may have
"error"). With --skip-errors, lines whose RENDERS line is an error (a template that
raised, on both sides: compare_renders.py checks that) are left out. Prints "LABEL: N/N equal" and the first mismatches; exits 1 unless all are equal.
"""
import json
import sys


def main():
    corpus, ref, ours = (open(p, encoding="utf-8").read().split("\n") for p in sys.argv[1:4])
    label = sys.argv[4] if len(sys.argv) > 4 else "ids"
    corpus = [l for l in corpus if l]
    ref = [json.loads(l) for l in ref if l]
    ours = [json.loads(l) for l in ours if l]
    if "--skip-errors" in sys.argv:
        renders = open(sys.argv[sys.argv.index("--skip-errors") + 1], encoding="utf-8")
        keep = ["error" not in json.loads(l) for l in renders.read().split("\n") if l]
        if len(keep) == len(corpus) == len(ref) == len(ours):
            corpus, ref, ours = ([x for x, k in zip(xs, keep) if k] for xs in (corpus, ref, ours))
    if not (len(corpus) == len(ref) == len(ours)):
        print(f"{label}: line counts differ: corpus {len(corpus)}, reference {len(ref)}, "
              f"kvgate {len(ours)}")
        return 1
    bad = []
    for i, (c, r, o) in enumerate(zip(corpus, ref, ours)):
        if r.get("ids") != o.get("ids"):
            bad.append((i, c, r, o))
    print(f"{label}: {len(corpus) - len(bad)}/{len(corpus)} equal")
    for i, c, r, o in bad[:5]:
        rid, oid = r.get("ids") or [], o.get("ids") or []
        k = next((j for j in range(min(len(rid), len(oid))) if rid[j] != oid[j]),
                 min(len(rid), len(oid)))
        print(f"  line {i + 1}: {c[:160]}")
        print(f"    first difference at id {k}: reference {rid[k:k + 8]} kvgate "
              f"{oid[k:k + 8] if 'ids' in o else o.get('error')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
