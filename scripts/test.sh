#!/usr/bin/env bash
# Runs the whole test suite (what CI runs). Needs the Rust toolchain, and
# installs kcat and, as root, the fault harness's tools (apt), Kafka's Python
# clients (a venv under target/) and librdkafka's test suite (built from the
# rdkafka-sys crate's source, with Debian's compilers) when missing: the
# end-to-end tests start the real binaries, built here first, and the Kafka
# listener's run Kafka's clients and test suites against them.
#   scripts/test.sh            all tests
#   scripts/test.sh FILTER...  extra arguments go to the test runner
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

# The Kafka listener's tests run Kafka's own command-line client against it.
command -v kcat >/dev/null 2>&1 ||
    apt_install "Debian's kcat: the Kafka listener's tests use it" kcat
# The fault harness's bounded runs cut links with nftables and power with
# loop devices (as root; without root those faults are skipped and named).
ensure_fault_tools

# And Kafka's Python clients (confluent-kafka bundles librdkafka; kafka-python
# is pure Python), in a venv of their own under target/.
ensure_kafka_clients
export SYNCLINE_KAFKA_PYTHON="$PWD/$KAFKA_VENV/bin/python"
# kafka-python's own integration tests (its sdist) and pytest, into that venv.
scripts/kafka-python-tests.sh fetch

# librdkafka's own test suite (crates/e2e/librdkafka/): its source from the
# rdkafka-sys crate, built once into target/librdkafka-tests/.
scripts/librdkafka-tests.sh build

echo "==> building binaries (the end-to-end tests run them)"
cargo build --workspace --bins

if cargo nextest --version >/dev/null 2>&1; then
    echo "==> unit, property, integration and end-to-end tests (cargo nextest)"
    cargo nextest run --workspace --profile ci "$@"
    echo "==> the replication, failover and chaos tests again, on secure clusters"
    SYNCLINE_E2E_SECURE=1 cargo nextest run -p syncline-e2e --profile ci \
        --test replication --test failures --test chaos "$@"
    echo "==> doc tests"
    cargo test --workspace --doc --quiet
else
    echo "==> cargo-nextest not found: using cargo test (end-to-end tests one at a time)"
    cargo test --workspace --exclude syncline-e2e "$@"
    cargo test -p syncline-e2e "$@" -- --test-threads=1
    SYNCLINE_E2E_SECURE=1 cargo test -p syncline-e2e --test replication --test failures \
        --test chaos "$@" -- --test-threads=1
fi

# The simulation in release (crates/sim): a fixed seed set on both cores, a
# few fresh seeds (printed, so a failure can be replayed), and planted bugs it
# must catch within the fixed seed set.
SIM_SEEDS=${SYNCLINE_SIM_SEEDS:-500}
echo "==> simulation: seeds 1..$SIM_SEEDS, then 5 random seeds"
scripts/sim.sh --jobs 2 --seed 1 --seeds "$SIM_SEEDS" --duration 10
SYNCLINE_NO_BUILD=1 scripts/sim.sh --seeds 5 --duration 10

# planted BUG SEEDS VIOLATION [OPTION...]: the seeds 1..SEEDS with BUG
# planted (and the options) must end INVALID (exit 1), at least one of them
# with VIOLATION among its findings.
planted() {
    local bug=$1 seeds=$2 violation=$3 out rc=0 caught
    shift 3
    echo "==> simulation: the planted bug $bug is caught within seeds 1..$seeds $*"
    out=$(mktemp)
    SYNCLINE_NO_BUILD=1 scripts/sim.sh --jobs 2 --seed 1 --seeds "$seeds" --duration 10 \
        --plant "$bug" "$@" >"$out" 2>&1 || rc=$?
    caught=$(grep -c "INVALID: .*$violation" "$out" || true)
    tail -n 3 "$out"
    rm -f "$out"
    [ "$rc" = 1 ] && [ "$caught" -ge 1 ] ||
        die "the planted bug $bug went unseen in $seeds seeds (exit $rc): the checker cannot fail"
    echo "caught ($violation) by $caught of $seeds seeds"
}
# Truncating to the high watermark loses records when a follower restarts
# and then its leader dies: crashes alone catch it in about 1 seed in 20.
planted hw-truncation 100 "lost write" --faults crash
planted lost-fsync 20 "lost write"
planted no-min-isr-check 50 "acknowledged below min.insync.replicas"
