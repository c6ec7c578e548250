#!/usr/bin/env python3
"""Clang's thread-safety analysis over the annotated product code (not tests).

Reads the compile commands CMake exported for a configured build (any preset) and reruns
product TUs through `clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety`, failing on
any diagnostic. Not every TU: each file that takes a lock or carries an annotation is checked
in at least one TU that includes it (each annotated .cc in its own; a header in the TU that
covers the most of them), which is the same analysis at a quarter of the cost. GCC ignores the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations;
this is what checks them. First it proves it can fail: planted_unguarded.cc must compile
clean as written and fail with -DPLANT_BUG (a guarded member read without its lock).
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ANALYSIS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
# Flags of the GCC build that clang does not take or that only matter for code generation.
DROP_PREFIXES = ("-W", "-fsanitize", "-fno-sanitize", "-g", "-O", "-fprofile", "--coverage")


def clang_args(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith(DROP_PREFIXES):
            continue
        out.append(a)
    return out + ANALYSIS


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LOCKING = re.compile(
    r"ABSL_[A-Z_]*(GUARDED|LOCK|REQUIRED|EXCLUDED|CAPABILITY|THREAD_SAFETY)|MutexLock|"
    r"LockGuard|\bMutex\b|CondVar")


def annotated_closure(path, root, memo):
    """The files `path` includes (itself too, through quoted includes) that lock or annotate."""
    if path in memo:
        return memo[path]
    memo[path] = set()  # Include cycles end here.
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return set()
    found = {path} if LOCKING.search(text) else set()
    for name in INCLUDE.findall(text):
        for base in (os.path.dirname(path), root):
            candidate = os.path.normpath(os.path.join(base, name))
            if os.path.exists(candidate):
                found |= annotated_closure(candidate, root, memo)
                break
    memo[path] = found
    return found


def pick(entries, root):
    """Every TU whose own sources are annotated, then TUs covering the remaining headers."""
    memo = {}
    covers = {e["file"]: annotated_closure(e["file"], root, memo) for e in entries}
    chosen = [f for f, c in covers.items() if any(a.endswith((".cc", ".cxx")) for a in c)]
    left = set().union(*covers.values()) - set().union(set(), *(covers[f] for f in chosen))
    while left:
        best = max(covers, key=lambda f: len(covers[f] & left))
        chosen.append(best)
        left -= covers[best]
    return [e for e in entries if e["file"] in chosen]


def is_product(path, root):
    rel = os.path.relpath(path, root)
    if rel.startswith("tests" + os.sep) or rel.startswith(".."):
        return False
    return True


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def self_check(template, clang, root):
    """The planted file passes as written and fails when the bug is planted."""
    planted = os.path.join(root, "tests", "thread_safety", "planted_unguarded.cc")
    base = clang_args(template, clang)
    base = [a for a in base if not a.endswith((".cc", ".cxx", ".cpp"))]
    rc, out = run(base + [planted], template["directory"])
    if rc != 0:
        print("thread-safety self-check: planted_unguarded.cc should compile clean:\n" + out)
        return False
    rc, out = run(base + ["-DPLANT_BUG", planted], template["directory"])
    if rc == 0 or "-Wthread-safety" not in out:
        print("thread-safety self-check: the planted unguarded read was not reported:\n" + out)
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/asan-ubsan", help="a configured CMake build dir")
    ap.add_argument("--root", default=".")
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("-j", type=int, default=2)
    opts = ap.parse_args()
    root = os.path.abspath(opts.root)
    if shutil.which(opts.clang) is None:
        print(f"thread-safety: {opts.clang} not found (scripts/setup installs clang)")
        return 2
    db = os.path.join(opts.build, "compile_commands.json")
    if not os.path.exists(db):
        print(f"thread-safety: {db} missing (configure the build first)")
        return 2
    with open(db) as f:
        entries = [e for e in json.load(f) if is_product(e["file"], root)]
    start = time.monotonic()
    if not self_check(entries[0], opts.clang, root):
        return 1
    # Unity sources (generated under the build dir) include their members by absolute path.
    entries = pick(entries, root)
    failed = []
    with concurrent.futures.ThreadPoolExecutor(opts.j) as pool:
        jobs = {pool.submit(run, clang_args(e, opts.clang), e["directory"]): e for e in entries}
        for job in concurrent.futures.as_completed(jobs):
            rc, out = job.result()
            if rc != 0 or out.strip():
                failed.append(jobs[job]["file"])
                print(out, end="")
    took = time.monotonic() - start
    if failed:
        print(f"thread-safety: {len(failed)} of {len(entries)} translation units failed:")
        for f in sorted(failed):
            print("  " + os.path.relpath(f, root))
        return 1
    print(f"thread-safety: {len(entries)} translation units clean ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
