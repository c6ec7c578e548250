#!/usr/bin/env python3
"""Compares chat renders line by line (issue 16 parity tests).

  compare_renders.py REFERENCE OURS LABEL

Lines hold {"rendered": ...} or {"error": ...}. A line matches when both rendered the same
bytes, or both failed (the template raised, or the input was rejected). Prints
"LABEL: N/N equal (E errors on both sides)" and the first differences; exits 1 unless all match.
"""
import json
import sys


def main():
    ref, ours = ([json.loads(l) for l in open(p, encoding="utf-8").read().split("\n") if l]
                 for p in sys.argv[1:3])
    label = sys.argv[3]
    if len(ref) != len(ours):
        print(f"{label}: line counts differ: reference {len(ref)}, kvgate {len(ours)}")
        return 1
    bad, errors = [], 0
    for i, (r, o) in enumerate(zip(ref, ours)):
        if "error" in r and "error" in o:
            errors += 1
        elif "error" in r or "error" in o or r["rendered"] != o["rendered"]:
            bad.append((i, r, o))
    print(f"{label}: {len(ref) - len(bad)}/{len(ref)} equal ({errors} errors on both sides)")
    for i, r, o in bad[:3]:
        a = r.get("rendered", r.get("error", ""))
        b = o.get("rendered", o.get("error", ""))
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        print(f"  case {i + 1}, first difference at character {k}:")
        print(f"    reference {a[max(0, k - 60):k + 80]!r}")
        print(f"    kvgate    {b[max(0, k - 60):k + 80]!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
