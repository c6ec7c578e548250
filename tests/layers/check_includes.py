#!/usr/bin/python3
"""The include-direction check (issue 28).

A tree is a folder whose sub-folders are layers, listed bottom first. A file in a layer may
include headers of its own layer and of layers below it. Two trees are checked:
- router/, whose layers router/CMakeLists.txt declares (and passes here): strict, so a
  folder that is not a layer, or a source directly in router/, is a finding too;
- the house: common/, net/, config/, kvindex/, ... (the top-level CMakeLists.txt order), where
  folders outside the list (tests/, docs/, ...) are not checked.
One line per finding; exit 1 when there is any.

  check_includes.py --root SRC --tree router --strict --layers pd policies ... server
  check_includes.py --root SRC --tree . --layers common net config ... bench
  ... --self-test: plants an include of the top layer in the bottom one, in a copy of the
      tree, and fails unless the check, run as a process of its own, reports it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCES = (".h", ".cc", ".cu")


def check(root, tree, layers, strict):
    rank = {name: i for i, name in enumerate(layers)}
    base = os.path.normpath(os.path.join(root, tree))
    prefix = "" if tree in ("", ".") else tree.rstrip("/") + "/"
    findings = []
    for folder in sorted(os.listdir(base)):
        if strict and os.path.isdir(os.path.join(base, folder)) and folder not in rank:
            findings.append(f"{prefix}{folder}/: a folder that is not a declared layer")
    if strict:
        for name in sorted(os.listdir(base)):
            if name.endswith(SOURCES) and os.path.isfile(os.path.join(base, name)):
                findings.append(f"{prefix}{name}: outside every layer")
    for own in layers:
        for dirpath, _, files in os.walk(os.path.join(base, own)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = prefix + os.path.relpath(path, base)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or not m.group(1).startswith(prefix):
                            continue
                        parts = m.group(1)[len(prefix):].split("/")
                        target = parts[0] if len(parts) > 1 else None
                        if target not in rank:
                            if strict:
                                findings.append(f"{rel}:{lineno}: includes {m.group(1)}, which "
                                                "is in no layer")
                        elif rank[target] > rank[own]:
                            findings.append(f"{rel}:{lineno}: includes {m.group(1)}: layer {own} "
                                            f"may not use {target}, a layer above it")
    return findings


def self_test(args):
    bottom, top = args.layers[0], args.layers[-1]
    with tempfile.TemporaryDirectory(prefix="kvgate-layers-") as tmp:
        for layer in args.layers:
            src = os.path.join(args.root, args.tree, layer)
            shutil.copytree(src, os.path.join(tmp, args.tree, layer))
        prefix = "" if args.tree in ("", ".") else args.tree.rstrip("/") + "/"
        if check(tmp, args.tree, args.layers, args.strict):
            print("self-test: the copy fails before anything is planted", file=sys.stderr)
            return 1
        def first_header(layer):
            for dirpath, _, files in sorted(os.walk(os.path.join(tmp, args.tree, layer))):
                for name in sorted(files):
                    if name.endswith(".h"):
                        return os.path.join(dirpath, name)
            raise SystemExit(f"self-test: layer {layer} has no header")
        victim = first_header(bottom)
        planted = prefix + os.path.relpath(first_header(top), os.path.join(tmp, args.tree))
        with open(victim, "a", encoding="utf-8") as f:
            f.write(f'#include "{planted}"\n')
        cmd = [sys.executable, os.path.abspath(__file__), "--root", tmp, "--tree", args.tree,
               "--layers", *args.layers] + (["--strict"] if args.strict else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        where = prefix + os.path.relpath(victim, os.path.join(tmp, args.tree))
        if run.returncode == 0 or where not in run.stdout or planted not in run.stdout:
            print(f"self-test: the include of {planted} planted in {where} was not reported "
                  f"(exit {run.returncode}):\n{run.stdout}{run.stderr}", file=sys.stderr)
            return 1
        print(f"self-test: the planted include was reported:\n{run.stdout}", end="")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, help="the source tree")
    ap.add_argument("--tree", required=True, help="folder under --root holding the layers")
    ap.add_argument("--layers", nargs="+", required=True, help="bottom first")
    ap.add_argument("--strict", action="store_true",
                    help="every folder and source of the tree must be in a layer")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args)
    findings = check(args.root, args.tree, args.layers, args.strict)
    for line in findings:
        print(line)
    if findings:
        print(f"{len(findings)} finding(s) against the layer order "
              f"(bottom first: {' '.join(args.layers)})")
        return 1
    print(f"{args.tree}: no include runs upward ({' < '.join(args.layers)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
