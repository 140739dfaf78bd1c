#!/usr/bin/env bash
# librdkafka's own test suite against syncline: the tests/ directory of the
# librdkafka source that the rdkafka-sys crate ships, built here,
# and run by crates/e2e/tests/e2e/librdkafka_suite.rs against a three-node cluster
# (the curated list and each exclusion's reason: crates/e2e/librdkafka/).
#
#   scripts/librdkafka-tests.sh build   fetch the source through cargo and build
#                                       librdkafka and its test runner into
#                                       target/librdkafka-tests/ (skipped when
#                                       already built with the same settings)
#   scripts/librdkafka-tests.sh clean   remove target/librdkafka-tests/
#
# Then: cargo build -p syncline-broker -p syncline-cli &&
#       cargo nextest run -p syncline-e2e -E 'test(/^librdkafka_suite::/)'
#
# The source: a throwaway crate depending on rdkafka-sys (pinned below), whose
# `cargo fetch` downloads it; `cargo metadata` says where cargo unpacked it, and
# the librdkafka directory is copied from there (nothing is built inside
# cargo's registry). The build: librdkafka's own configure (mklove) with no
# optional dependency but the compression libraries (the Kafka listener has no
# TLS or SASL): zlib and zstd from Debian, lz4 and snappy built in. Installs
# the Debian packages it needs when missing (apt-get, as root or with sudo):
# gcc, g++, make, python3 (librdkafka's Makefiles run it), pkg-config,
# zlib1g-dev, libzstd-dev. About 3 to 4 minutes on 2 cores.
#
# Environment: CARGO_TARGET_DIR (default target), LIBRDKAFKA_JOBS (make -j,
# default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

# librdkafka 2.12.1, as rdkafka-sys 4.10.0 ships it.
RDKAFKA_SYS_VERSION="4.10.0"
CONFIGURE_FLAGS="--no-download --disable-ssl --disable-gssapi --disable-curl --enable-zlib --enable-zstd --disable-lz4-ext"

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
OUT="$TARGET_DIR/librdkafka-tests"
SRC="$OUT/librdkafka"
STAMP="$OUT/built"
JOBS="${LIBRDKAFKA_JOBS:-2}"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

usage() {
    usage_from_header "$0"
}

# What a finished build was made from; a different one is rebuilt.
stamp_text() {
    echo "rdkafka-sys $RDKAFKA_SYS_VERSION; configure $CONFIGURE_FLAGS"
}

# Installs the Debian packages of the build that are missing.
install_build_packages() {
    apt_install "to build librdkafka's test suite" \
        gcc g++ make python3 pkg-config zlib1g-dev libzstd-dev
}

# Copies librdkafka's source out of the rdkafka-sys crate into $SRC.
fetch_source() {
    local crate="$OUT/fetch"
    mkdir -p "$crate/src"
    # Its own workspace: it is inside this one's directory but no member of it.
    cat >"$crate/Cargo.toml" <<EOF
[package]
name = "librdkafka-tests-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
rdkafka-sys = { version = "=$RDKAFKA_SYS_VERSION", default-features = false }

[workspace]
EOF
    : >"$crate/src/lib.rs"
    echo "==> fetching rdkafka-sys $RDKAFKA_SYS_VERSION (cargo fetch)"
    cargo fetch --quiet --manifest-path "$crate/Cargo.toml"
    local manifest
    manifest=$(cargo metadata --quiet --format-version 1 --manifest-path "$crate/Cargo.toml" |
        python3 -c 'import json, sys
d = json.load(sys.stdin)
print(next(p["manifest_path"] for p in d["packages"] if p["name"] == "rdkafka-sys"))')
    local from
    from="$(dirname "$manifest")/librdkafka"
    [ -f "$from/tests/test.c" ] || die "no librdkafka tests/ in $from"
    rm -rf "$SRC"
    cp -a "$from" "$SRC"
}

build() {
    if [ -x "$SRC/tests/test-runner" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$(stamp_text)" ]; then
        echo "==> librdkafka's test runner is built: $SRC/tests/test-runner ($(stamp_text))"
        return 0
    fi
    local start=$SECONDS
    command -v cargo >/dev/null 2>&1 || die "cargo is needed (it fetches the source)"
    install_build_packages
    rm -f "$STAMP"
    mkdir -p "$OUT"
    fetch_source
    echo "==> configuring librdkafka ($CONFIGURE_FLAGS)"
    # shellcheck disable=SC2086
    (cd "$SRC" && ./configure $CONFIGURE_FLAGS >"$OUT/configure.log" 2>&1) ||
        { tail -30 "$OUT/configure.log" >&2; die "configure failed (log: $OUT/configure.log)"; }
    echo "==> building librdkafka (make -j$JOBS libs; log: $OUT/build.log)"
    make -C "$SRC" -j"$JOBS" libs >"$OUT/build.log" 2>&1 ||
        { tail -30 "$OUT/build.log" >&2; die "the librdkafka build failed (log: $OUT/build.log)"; }
    echo "==> building the test runner (make -C tests -j$JOBS build)"
    make -C "$SRC/tests" -j"$JOBS" build >>"$OUT/build.log" 2>&1 ||
        { tail -30 "$OUT/build.log" >&2; die "the test runner build failed (log: $OUT/build.log)"; }
    [ -x "$SRC/tests/test-runner" ] || die "no test runner at $SRC/tests/test-runner"
    stamp_text >"$STAMP"
    echo "==> built $SRC/tests/test-runner in $((SECONDS - start)) s"
}

case "${1:-}" in
build) build ;;
clean) rm -rf "$OUT" ;;
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
