#!/usr/bin/env python3
"""The tokenizer benchmark corpus (docs/benchmarks.md, "Tokenizer"): the repository's own docs
and C++ sources (English prose, Markdown, code), cut into ~4 KB lines, plus the parity corpus's
unicode lines, as {"text": ...} JSON lines on stdout. Deterministic for a given checkout.

  bench_corpus.py REPO_ROOT PARITY_CORPUS.jsonl > bench.jsonl
"""
import json
import pathlib
import sys


def main():
    root = pathlib.Path(sys.argv[1])
    files = sorted(root.glob("docs/*.md")) + sorted(root.glob("tokenizer/*.cc")) + \
        sorted(root.glob("router/**/*.cc"))
    for f in files:
        text = f.read_text(encoding="utf-8")
        for i in range(0, len(text), 4096):
            print(json.dumps({"text": text[i:i + 4096]}, ensure_ascii=False))
    for line in open(sys.argv[2], encoding="utf-8").read().split("\n"):
        if line and not json.loads(line).get("add_special_tokens", False):
            print(line)


if __name__ == "__main__":
    main()
