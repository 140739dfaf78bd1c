#!/usr/bin/env bash
# Runs the whole test suite (what CI runs). Needs the Rust toolchain, and
# installs kcat (apt) and Kafka's Python clients (a venv under target/) when
# missing: the end-to-end tests start the real binaries, built here first, and
# the Kafka listener's run Kafka's clients against them.
#   scripts/test.sh            all tests
#   scripts/test.sh FILTER...  extra arguments go to the test runner
set -euo pipefail
cd "$(dirname "$0")/.."

# The Kafka listener's tests run Kafka's own command-line client against it.
if ! command -v kcat >/dev/null 2>&1; then
    echo "==> installing kcat (Debian's package; the Kafka listener's tests use it)"
    sudo_if_needed=""
    [ "$(id -u)" = 0 ] || sudo_if_needed="sudo"
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq kcat >/dev/null
fi

# And Kafka's Python clients (confluent-kafka bundles librdkafka; kafka-python
# is pure Python), in a venv of their own under target/.
KAFKA_VENV=target/kafka-clients
KAFKA_PY_PACKAGES="confluent-kafka==2.16.1 kafka-python==3.0.12"
if ! "$KAFKA_VENV/bin/python" -c "import confluent_kafka, kafka" >/dev/null 2>&1; then
    echo "==> installing Kafka's Python clients into $KAFKA_VENV ($KAFKA_PY_PACKAGES)"
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
        sudo_if_needed=""
        [ "$(id -u)" = 0 ] || sudo_if_needed="sudo"
        $sudo_if_needed apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    rm -rf "$KAFKA_VENV"
    python3 -m venv "$KAFKA_VENV"
    # shellcheck disable=SC2086
    "$KAFKA_VENV/bin/pip" install -q $KAFKA_PY_PACKAGES
fi
export SYNCLINE_KAFKA_PYTHON="$PWD/$KAFKA_VENV/bin/python"

echo "==> building binaries (the end-to-end tests run them)"
cargo build --workspace --bins

if cargo nextest --version >/dev/null 2>&1; then
    echo "==> unit, property, integration and end-to-end tests (cargo nextest)"
    cargo nextest run --workspace --profile ci "$@"
    echo "==> doc tests"
    cargo test --workspace --doc --quiet
else
    echo "==> cargo-nextest not found: using cargo test (end-to-end tests one at a time)"
    cargo test --workspace --exclude syncline-e2e "$@"
    cargo test -p syncline-e2e "$@" -- --test-threads=1
fi
