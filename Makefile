# kvgate: `make demo` and `make test` work on a fresh Debian 12 machine (they install what is
# missing through scripts/setup first).
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BINARIES := kvgate kvgate-fake-upstream kvgate-sim kvgate-replay kvindex_bench kvgate-tokenize \
	kvgate-tokenizer-bench kvgate-transfer-bench \
	kvgate-store kvgate-store-bench
# ccache: paths relative to the checkout, so that another clone of the repo (CI) hits the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all setup build debug test test-debug test-asan test-tsan test-fuzz test-demo demo bench \
	format clean

all: build

setup:
	@bash scripts/setup

# Release binaries, linked under build/ (build/kvgate, ...).
build: setup
	@cmake --preset release >/dev/null
	@cmake --build build/release -j$(JOBS)
	@for b in $(BINARIES); do [ -e build/release/bin/$$b ] && ln -sf release/bin/$$b build/$$b; done; true

debug: setup
	@cmake --preset debug >/dev/null
	@cmake --build build/debug -j$(JOBS)

test-debug: debug
	@ctest --preset debug -j2

test-asan: setup
	@cmake --preset asan-ubsan >/dev/null
	@cmake --build build/asan-ubsan -j$(JOBS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --preset asan-ubsan -j2

# ThreadSanitizer on the concurrent parts: the kvindex stress test, the gateway (sessions,
# relay, framing, reload and drain against the control thread and metric scrapes), the
# KV-event subscriber (its events thread against status readers), the transfer engine and the
# store (master, data nodes and clients on their threads).
test-tsan: setup
	@cmake --preset tsan >/dev/null
	@cmake --build build/tsan -j$(JOBS) --target kvgate_kvindex_tests kvgate_gateway_tests \
	  kvgate_kv_subscriber_tests kvgate_transfer_tests kvgate_store_tests
	@TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --preset tsan -j2 -R "Stress|Concurren|Gateway|Relay|Framing|Subscriber|Discovery|Security|Tls|Fault"
	@TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --preset tsan -j2 -L "transfer|store"

# Bounded libFuzzer runs (need clang; skipped with a message otherwise).
test-fuzz: setup
	@if [ -x tests/fuzz/run_fuzzers.sh ] || [ -f tests/fuzz/run_fuzzers.sh ]; then \
	  bash tests/fuzz/run_fuzzers.sh $${FUZZ_SECONDS:-30}; fi

# `make demo` on the ASan/UBSan build, shortened: it must still show kvaware beating
# round_robin (and no binary may leak or trip a sanitizer on the way).
test-demo: test-asan
	@KVGATE_BIN_DIR=build/asan-ubsan/bin KVGATE_DEMO_SECONDS=$${DEMO_SECONDS:-15} \
	  ASAN_OPTIONS=detect_leaks=1 bash scripts/demo.sh

# One sanitized pass (ASan+UBSan is a Debug build: asserts on) covers what a plain debug pass
# would; `make test-debug` is still there for a quick local run.
test: test-asan test-tsan test-fuzz test-demo
	@echo "make test: all suites passed"

demo: build
	@bash scripts/demo.sh

bench: build
	@bash bench/proxy/run.sh
	@[ -x build/kvindex_bench ] && build/kvindex_bench || true

format:
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	@rm -rf build
