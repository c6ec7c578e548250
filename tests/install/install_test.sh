#!/usr/bin/env bash
# The installed tree works: `cmake --install BUILD --prefix TMP`, then from TMP only
#  - each installed binary's --version names it, the project's version and a commit;
#  - the installed example config passes `kvgate --config TMP/etc/kvgate/kvgate.yaml --check`;
#  - the systemd units are installed and start the installed paths' binaries;
#  - deploy/ runs the image `make image` builds (Makefile IMAGE);
#  - the Dockerfile installs the same binaries, runs as 65532, and names no build package in
#    its runtime stage.
# The image itself is built only with KVGATE_TEST_IMAGE=1 and an engine (podman, buildah or
# docker with a daemon) that can pull debian:12; otherwise that step says why it was skipped.
#   tests/install/install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install failed"; }
version=$(sed -n 's/^project(kvgate VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no version in CMakeLists.txt"
for b in kvgate kvgate-store kvgate-sim; do
  exe="$tmp/prefix/bin/$b"
  [ -x "$exe" ] || fail "$b not installed into bin/"
  out=$("$exe" --version) || fail "$b --version exited $?"
  [[ "$out" =~ ^$b\ $version\ \(commit\ [0-9a-z.-]+\)$ ]] ||
    fail "$b --version printed '$out', expected '$b $version (commit ...)'"
  echo "ok: $out"
done
config="$tmp/prefix/etc/kvgate/kvgate.yaml"
[ -f "$config" ] || fail "the example config is not installed as etc/kvgate/kvgate.yaml"
"$tmp/prefix/bin/kvgate" --config "$config" --check || fail "the installed config fails --check"
for unit in kvgate kvgate-store; do
  f="$tmp/prefix/lib/systemd/system/$unit.service"
  [ -f "$f" ] || fail "$unit.service not installed"
  grep -q "^ExecStart=/usr/local/bin/$unit " "$f" || fail "$unit.service does not start /usr/local/bin/$unit"
done
grep -q "^ExecStart=.* --config /etc/kvgate/kvgate.yaml" "$tmp/prefix/lib/systemd/system/kvgate.service" ||
  fail "kvgate.service does not read /etc/kvgate/kvgate.yaml"
echo "ok: config, systemd units"

image=$(MAKEFLAGS= MAKELEVEL= make -s --no-print-directory -C "$src" print-image)
[ "$image" = "ghcr.io/kvgate/kvgate:$version" ] || fail "make image builds '$image'"
used=$(grep -rhoE 'image: ghcr.io/kvgate/kvgate:[^ ]+' "$src/deploy" | sort -u | sed 's/image: //')
[ "$used" = "$image" ] || fail "deploy/ runs '$used', make image builds '$image'"
echo "ok: deploy/ runs $image"

df="$src/Dockerfile"
runtime=$(sed -n '/^FROM debian:12-slim/,$p' "$df")
[ -n "$runtime" ] || fail "the Dockerfile has no debian:12-slim runtime stage"
grep -q '^USER 65532:65532' <<<"$runtime" || fail "the runtime stage does not run as 65532"
if grep -qE -- '-dev\b|build-essential|cmake' <<<"$runtime"; then
  fail "the runtime stage installs build packages"
fi
grep -q -- '--target kvgate kvgate-store kvgate-sim' "$df" || fail "the Dockerfile builds other targets"
# Every library the installed binaries link, from a package the runtime stage installs.
if command -v dpkg >/dev/null; then
  pkgs=$(for b in kvgate kvgate-store kvgate-sim; do ldd "$tmp/prefix/bin/$b"; done |
    awk '/=> \//{print $3}' | sort -u | xargs -r -n1 readlink -f |
    { xargs -r dpkg -S 2>/dev/null || true; } | cut -d: -f1 | sort -u)
  for p in $pkgs; do
    case $p in
      libc6 | libgcc-s1 | libstdc++6 | libzstd1 | liblzma5 | zlib1g | libbsd0 | libmd0 | \
        libgssapi-krb5-2 | libk5crypto3 | libkrb5-3 | libkrb5support0 | libcom-err2 | \
        libkeyutils1 | libnl-3-200 | libnl-route-3-200 | libnorm1 | libpgm-5.3-0 | \
        libsodium23 | libgomp1) ;;  # in debian:12-slim, or pulled in by a listed package
      libasan* | libubsan* | libtsan*) ;;  # a sanitizer build's runtime (this test's build)
      *) grep -qw "$p" <<<"$runtime" || fail "the runtime stage lacks $p (linked by the binaries)" ;;
    esac
  done
  echo "ok: the runtime stage installs every library the binaries link"
fi

if [ "${KVGATE_TEST_IMAGE:-}" != 1 ]; then
  echo "image build skipped: set KVGATE_TEST_IMAGE=1 on a machine with podman, buildah or a"
  echo "docker daemon that can pull debian:12 (this one has $(command -v docker podman buildah |
    tr '\n' ' ')none of them able to build: no engine daemon, no registry access)"
  exit 0
fi
make -C "$src" image IMAGE="kvgate-install-test:$version"
engine=$(command -v podman || command -v docker)
out=$("$engine" run --rm --entrypoint /usr/local/bin/kvgate-store "kvgate-install-test:$version" --version)
[[ "$out" == "kvgate-store $version (commit "* ]] || fail "the image's kvgate-store --version: $out"
uid=$("$engine" run --rm --entrypoint /usr/bin/id "kvgate-install-test:$version" -u)
[ "$uid" = 65532 ] || fail "the image runs as uid $uid"
"$engine" run --rm "kvgate-install-test:$version" --config /etc/kvgate/kvgate.yaml --check ||
  fail "the image's config fails --check"
echo "ok: image kvgate-install-test:$version"
