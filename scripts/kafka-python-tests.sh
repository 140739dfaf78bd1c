#!/usr/bin/env bash
# kafka-python's own integration tests against syncline: the test/ directory of
# kafka-python's source distribution (pip download), run with pytest by
# crates/e2e/tests/e2e/kafka_python_suite.rs against a three-node cluster (what
# runs, and why the rest does not: crates/e2e/kafka-python/SELECTION.md).
#
#   scripts/kafka-python-tests.sh fetch   download the kafka-python sdist (pip),
#                                         unpack it into target/kafka-python-tests/
#                                         and install pytest and the compression
#                                         libraries, pinned, into the Kafka
#                                         clients' venv (skipped when already
#                                         done with the same settings)
#   scripts/kafka-python-tests.sh clean   remove target/kafka-python-tests/
#
# Then: cargo build -p syncline-broker -p syncline-cli &&
#       cargo nextest run -p syncline-e2e -E 'test(/^kafka_python_suite::/)'
#
# The venv is the one scripts/test.sh makes with Kafka's Python clients
# (target/kafka-clients, kafka-python among them; scripts/test.sh runs this
# script right after it): its python is $SYNCLINE_KAFKA_PYTHON, or
# target/kafka-clients/bin/python. pip downloads the sdist itself (no wheel),
# without dependencies, and only the exact versions below are installed (each
# with --no-deps: the list is complete).
#
# Environment: CARGO_TARGET_DIR (default target), SYNCLINE_KAFKA_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_PYTHON_VERSION="3.0.12"
# What the suite's test/ imports beyond kafka-python (pytest; py.path, which
# pytest ships as `py`), the pytest-timeout its pyproject.toml's addopts
# names, pytest's own dependencies, and the compression libraries of
# kafka.codec (python-snappy needs cramjam), so that no compressed case skips.
TEST_PACKAGES="pytest==9.2.0 pytest-timeout==2.4.0 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 Pygments==2.21.0 lz4==4.4.5 zstandard==0.25.0 python-snappy==0.7.3 cramjam==2.14.0"

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
OUT="$TARGET_DIR/kafka-python-tests"
SRC="$OUT/kafka_python-$KAFKA_PYTHON_VERSION"
STAMP="$OUT/fetched"
PYTHON="${SYNCLINE_KAFKA_PYTHON:-$PWD/target/kafka-clients/bin/python}"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

usage() {
    usage_from_header "$0"
}

# What a finished fetch was made with; a different one is fetched again.
stamp_text() {
    echo "kafka-python $KAFKA_PYTHON_VERSION; python $PYTHON; $TEST_PACKAGES"
}

# The venv has kafka-python (scripts/test.sh installs it) and a working pip.
check_venv() {
    [ -x "$PYTHON" ] ||
        die "no python at $PYTHON: run scripts/test.sh (it makes the Kafka clients' venv target/kafka-clients), or set SYNCLINE_KAFKA_PYTHON"
    "$PYTHON" -c "import kafka" >/dev/null 2>&1 ||
        die "kafka-python is not installed for $PYTHON: run scripts/test.sh (it installs Kafka's Python clients), or set SYNCLINE_KAFKA_PYTHON to a venv that has it"
    "$PYTHON" -m pip --version >/dev/null 2>&1 ||
        die "$PYTHON has no pip: remake the venv (rm -rf target/kafka-clients; scripts/test.sh)"
}

# Every package of $TEST_PACKAGES is installed at its version (the stamp alone
# would not see a venv made anew).
packages_installed() {
    # shellcheck disable=SC2086
    "$PYTHON" - $TEST_PACKAGES <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, wanted = pin.split("==")
    if version(name) != wanted:
        sys.exit(1)
EOF
}

# Downloads the sdist and unpacks it into $SRC.
fetch_sdist() {
    local download="$OUT/download"
    rm -rf "$download"
    mkdir -p "$download"
    echo "==> downloading the kafka-python $KAFKA_PYTHON_VERSION sdist (pip download)"
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
        --dest "$download" "kafka-python==$KAFKA_PYTHON_VERSION" ||
        die "pip could not download the kafka-python $KAFKA_PYTHON_VERSION sdist (is the package index reachable?)"
    local archive
    archive=$(find "$download" -maxdepth 1 -name "kafka*python-$KAFKA_PYTHON_VERSION.tar.gz" | head -1)
    [ -n "$archive" ] || die "pip saved no kafka-python-$KAFKA_PYTHON_VERSION.tar.gz in $download"
    rm -rf "$SRC"
    tar -xzf "$archive" -C "$OUT"
    [ -f "$SRC/test/integration/conftest.py" ] ||
        die "the sdist has no test/integration/conftest.py (unpacked from $archive into $OUT)"
    rm -rf "$download"
}

fetch() {
    check_venv
    if [ -f "$SRC/test/integration/conftest.py" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$(stamp_text)" ] &&
        packages_installed; then
        echo "==> kafka-python's tests are fetched: $SRC ($(stamp_text))"
        return 0
    fi
    rm -f "$STAMP"
    mkdir -p "$OUT"
    fetch_sdist
    echo "==> installing the tests' dependencies into $(dirname "$(dirname "$PYTHON")") ($TEST_PACKAGES)"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install --quiet --no-deps $TEST_PACKAGES ||
        die "pip could not install $TEST_PACKAGES"
    "$PYTHON" -c "import pytest, pytest_timeout, py, lz4.frame, zstandard, snappy" ||
        die "the tests' dependencies do not import with $PYTHON"
    stamp_text >"$STAMP"
    echo "==> fetched $SRC"
}

case "${1:-}" in
fetch) fetch ;;
clean) rm -rf "$OUT" ;;
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
