# kvgate: `make demo` and `make test` work on a fresh Debian 12 machine (they install what is
# missing through scripts/setup first).
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BINARIES := kvgate kvgate-fake-upstream kvgate-sim kvgate-replay kvindex_bench kvgate-tokenize \
	kvgate-tokenizer-bench kvgate-transfer-bench \
	kvgate-store kvgate-store-bench
# The image `make image` builds and deploy/ runs (kept equal by tests/deploy/image_name_test.sh).
VERSION := $(shell sed -n 's/^project.kvgate VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE ?= ghcr.io/kvgate/kvgate:$(VERSION)
# What `make demo` runs, and nothing else.
DEMO_TARGETS := kvgate kvgate-sim kvgate-replay kvgate-store kvgate-fake-upstream
# ccache: paths relative to the checkout, so that another clone of the repo (CI) hits the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all setup build debug test test-debug test-asan test-tsan test-fuzz test-demo \
	test-thread-safety demo bench \
	format clean image demo-build print-image

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

# Clang's -Wthread-safety over the annotated product code (GCC ignores the annotations); it
# first proves it fails on a planted unguarded read. Needs only a configured build tree.
test-thread-safety: setup
	@cmake --preset asan-ubsan >/dev/null
	@/usr/bin/python3 tests/thread_safety/check.py --build build/asan-ubsan -j2

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
test: test-asan test-tsan test-fuzz test-demo test-thread-safety
	@echo "make test: all suites passed"

# Only the binaries the demo runs (a fresh clone builds 5 targets, not the test suite).
demo-build: setup
	@cmake --preset release >/dev/null
	@cmake --build build/release -j$(JOBS) --target $(DEMO_TARGETS)
	@for b in $(DEMO_TARGETS); do ln -sf release/bin/$$b build/$$b; done

demo: demo-build
	@bash scripts/demo.sh

print-image:
	@echo $(IMAGE)

# The container image deploy/ runs: Dockerfile (multi-stage Debian 12) with whichever engine
# this machine has. Needs a running engine and the debian:12 base images from a registry.
image:
	@engine=$$(command -v podman || command -v buildah || command -v docker || true); \
	if [ -z "$$engine" ]; then echo "make image: needs podman, buildah or docker" >&2; exit 1; fi; \
	case "$$engine" in *buildah) sub=bud ;; *) sub=build ;; esac; \
	commit=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	"$$engine" $$sub --build-arg KVGATE_GIT_COMMIT=$$commit -t $(IMAGE) -f Dockerfile . && \
	echo "make image: built $(IMAGE) (commit $$commit)"

bench: build
	@bash bench/proxy/run.sh
	@[ -x build/kvindex_bench ] && build/kvindex_bench || true

format:
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	@rm -rf build
