#!/usr/bin/env bash
# Runs the whole test suite (what CI runs), then prints what each phase cost
# (seconds, and what it ran). Needs the Rust toolchain and cargo-nextest
# (without it, cargo test runs the tests one at a time), and installs what else
# it needs when missing: kcat and, as root, the fault harness's tools (apt),
# Kafka's Python clients (a venv under target/), librdkafka's test suite (built
# from the rdkafka-sys crate's source, with Debian's compilers) and cargo-fuzz.
# The end-to-end tests start the binaries built here, and the Kafka listener's
# run Kafka's clients and test suites against them.
#
#   scripts/test.sh                 everything: the README's test command, CI's
#   scripts/test.sh --quick         unit, property and in-process tests and the
#                                   doc tests: no process cluster, no external
#                                   suite, no simulation run (minutes, warm)
#   scripts/test.sh [--quick] FILTER...
#                                   extra arguments go to the test runner
#
# The phases, in order (the table at the end gives each one's cost):
#   setup         kcat, the fault tools, Kafka's Python clients and
#                 kafka-python's test sources, when missing
#   from here on, in the background at the lowest CPU priority (why:
#   scripts/phases.sh): librdkafka's test suite's build; the release build of
#   the shipped binaries (checked); the simulation's release build, its fixed
#   and fresh seeds and the planted bugs it must catch; the fuzz targets' build
#   build         the debug build: synclined and syncline as they ship (no
#                 test-only feature), and every test
#   tests         unit, property, in-process and end-to-end tests (nextest's ci
#                 profile, .config/nextest.toml: end-to-end ones one at a time)
#   librdkafka    librdkafka's own suite, two of its parts at a time
#   doc tests
#   containers    scripts/compose-test.sh, plaintext and --secure, when a
#                 Docker engine answers
#   scaling       scripts/bench-scale.sh --smoke, on the release build
#   hostile       scripts/bench-hostile.sh --smoke: every attack in turn beside
#                 a steady acks=all producer (about 2 minutes)
#   then, once the background is done: the fuzz smoke run (every target for
#   20 s, one per core) and scripts/bench.sh --smoke on a quiet machine
#
# Environment: SYNCLINE_SIM_SEEDS (the fixed seed set's size, default 500).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=scripts/phases.sh
. scripts/phases.sh

QUICK=0
if [ "${1:-}" = --quick ]; then
    QUICK=1
    shift
fi

phases_begin
trap phases_end EXIT
failed=()

have_nextest() { cargo nextest --version >/dev/null 2>&1; }

if [ "$QUICK" = 1 ]; then
    have_nextest || die "--quick needs cargo-nextest (cargo install cargo-nextest --locked)"
    phase "build (tests)" - cargo nextest run --workspace --no-run || die "the build failed"
    # A test of this tier that starts a process fails (crates/e2e's bin()).
    export SYNCLINE_E2E_IN_PROCESS_ONLY=1
    phase "unit, property and in-process tests" nextest \
        cargo nextest run --workspace --profile quick --no-tests=warn "$@" || failed+=(tests)
    phase "doc tests" doctests cargo test --workspace --doc --quiet || failed+=("doc tests")
    [ "${#failed[@]}" = 0 ] || die "failed: ${failed[*]}"
    exit 0
fi

# ------------------------------------------------------------ what each phase runs

setup() {
    # The Kafka listener's tests run Kafka's own command-line client against it.
    command -v kcat >/dev/null 2>&1 ||
        apt_install "Debian's kcat: the Kafka listener's tests use it" kcat
    # The fault harness's bounded runs cut links with nftables and power with
    # loop devices (as root; without root those faults are skipped and named).
    ensure_fault_tools
    # Kafka's Python clients (confluent-kafka bundles librdkafka; kafka-python
    # is pure Python), in a venv of their own under target/.
    ensure_kafka_clients
    # kafka-python's own integration tests (its sdist) and pytest, into that venv.
    scripts/kafka-python-tests.sh fetch
}

# The binaries the end-to-end tests start are built as they ship: on their
# own, so that the test crates' features stay out of them (lib.sh).
build_debug() {
    build_shipped debug
    if have_nextest; then
        cargo nextest run --workspace --no-run
    else
        cargo test --workspace --no-run
    fi
}

# librdkafka's parts get a run of their own (two at a time, and after their
# build); everything else runs in the first.
LIBRDKAFKA_PARTS=librdkafka_suite::librdkafka_
run_tests() {
    if have_nextest; then
        cargo nextest run --workspace --profile ci --no-tests=warn \
            -E "not test(/^$LIBRDKAFKA_PARTS/)" "$@"
    else
        echo "==> cargo-nextest not found: cargo test, the end-to-end tests one at a time"
        cargo test --workspace --exclude syncline-e2e --lib --bins --tests "$@"
        cargo test -p syncline-e2e --lib "$@"
        cargo test -p syncline-e2e --test e2e "$@" -- --test-threads=1 \
            --skip secure:: --skip "$LIBRDKAFKA_PARTS"
        # The secure twins set their process's environment: a process of their own.
        cargo test -p syncline-e2e --test e2e "$@" secure:: -- --test-threads=1
    fi
}
run_librdkafka_parts() {
    if have_nextest; then
        cargo nextest run --workspace --profile ci --no-tests=warn \
            -E "test(/^$LIBRDKAFKA_PARTS/)" "$@"
    else
        cargo test -p syncline-e2e --test e2e "$@" "$LIBRDKAFKA_PARTS" -- --test-threads=1
    fi
}

# planted BUG SEEDS VIOLATION [OPTION...]: the seeds 1..SEEDS with BUG
# planted (and the options) must end INVALID (exit 1), at least one of them
# with VIOLATION among its findings.
planted() {
    local bug=$1 seeds=$2 violation=$3 out rc=0 caught
    shift 3
    out=$(mktemp)
    SYNCLINE_NO_BUILD=1 scripts/sim.sh --jobs 2 --seed 1 --seeds "$seeds" --duration 10 \
        --plant "$bug" "$@" >"$out" 2>&1 || rc=$?
    caught=$(grep -c "INVALID: .*$violation" "$out" || true)
    # The totals of both processes (what the phase table counts).
    tail -n 3 "$out"
    rm -f "$out"
    [ "$rc" = 1 ] && [ "$caught" -ge 1 ] ||
        die "the planted bug $bug went unseen in $seeds seeds (exit $rc): the checker cannot fail"
    echo "caught ($violation) by $caught of $seeds seeds"
}

# ------------------------------------------------------------ background jobs

librdkafka_build() {
    # librdkafka's own test suite (crates/e2e/librdkafka/): its source from
    # the rdkafka-sys crate, built once into target/librdkafka-tests/.
    phase "librdkafka's test suite (build)" - scripts/librdkafka-tests.sh build
}

shipped_release() {
    # What scripts/cluster.sh, compose.sh and the benchmarks run (bench.sh
    # builds its floor with them).
    phase "release build (shipped binaries, checked)" - build_shipped release -p syncline-floor -p syncline-hostile
}

simulation() {
    # Beside shipped_release, cargo's lock on target/release takes the two
    # builds in turn; the dependencies they share are built once.
    phase "simulation (release build)" - cargo build --release -p syncline-sim
    # A fixed seed set on both cores, a few fresh seeds (printed, so a
    # failure can be replayed), and planted bugs it must catch within the
    # fixed seed set.
    local seeds=${SYNCLINE_SIM_SEEDS:-500}
    phase "simulation: seeds 1..$seeds" sim \
        env SYNCLINE_NO_BUILD=1 scripts/sim.sh --jobs 2 --seed 1 --seeds "$seeds" --duration 10
    phase "simulation: 5 random seeds" sim \
        env SYNCLINE_NO_BUILD=1 scripts/sim.sh --seeds 5 --duration 10
    # Truncating to the high watermark loses records when a follower restarts
    # and then its leader dies: crashes alone catch it in about 1 seed in 20.
    phase "simulation: planted hw-truncation" sim \
        planted hw-truncation 100 "lost write" --faults crash
    phase "simulation: planted lost-fsync" sim planted lost-fsync 20 "lost write"
    phase "simulation: planted no-min-isr-check" sim \
        planted no-min-isr-check 50 "acknowledged below min.insync.replicas"
}

# The fuzz targets want a nightly toolchain (sanitizers); stable builds them
# without sanitizers where there is none (fuzz/README.md).
if [ -z "${FUZZ_TOOLCHAIN:-}" ]; then
    if cargo +nightly --version >/dev/null 2>&1; then
        export FUZZ_TOOLCHAIN=nightly
    else
        export FUZZ_TOOLCHAIN=stable
    fi
fi
fuzz_build() {
    phase "fuzz targets (build)" - scripts/fuzz.sh --build
}

# ------------------------------------------------------------ the run

phase setup - setup || die "setup failed"
export SYNCLINE_KAFKA_PYTHON="$PWD/target/kafka-clients/bin/python"
# From here on the background takes whatever CPU the foreground leaves, the
# debug build's idle moments (one crate compiling while the others wait) first.
background librdkafka librdkafka_build
background shipped shipped_release
background simulation simulation
background fuzz fuzz_build
phase "build (debug: binaries, tests)" - build_debug || die "the build failed"

phase "tests (unit, property, in-process, end-to-end)" nextest run_tests "$@" || failed+=(tests)
if await librdkafka; then
    phase "librdkafka's suite (two parts at a time)" nextest run_librdkafka_parts "$@" ||
        failed+=("librdkafka's suite")
else
    failed+=("librdkafka's build")
fi
phase "doc tests" doctests cargo test --workspace --doc --quiet || failed+=("doc tests")

# The container test of the compose cluster (its images hold the binaries the
# end-to-end tests ran), plaintext and secure.
if docker info >/dev/null 2>&1; then
    phase "container test (docker compose)" compose scripts/compose-test.sh ||
        failed+=("container test")
    phase "container test, secure (SASL_SSL, mutual TLS, ACLs)" compose \
        scripts/compose-test.sh --secure || failed+=("secure container test")
else
    echo "################################################################"
    echo "## SKIPPED scripts/compose-test.sh: no Docker engine answers   ##"
    echo "################################################################"
fi

# The partition-scaling benchmark's smoke mode (3 and 30 partitions): its
# figures are printed, not asserted, so that bench-scale.sh cannot rot. Then
# the hostile clients' smoke run: each attack for 6 s beside a steady acks=all
# producer, nothing lost, no broker fenced, no ISR shrunk, each broker's memory
# under 512 MiB (asserted; its p99 target is printed).
if await shipped; then
    phase "scaling benchmark smoke run" scale env SYNCLINE_NO_BUILD=1 scripts/bench-scale.sh --smoke ||
        failed+=("scaling benchmark smoke run")
    phase "hostile clients smoke run" hostile env SYNCLINE_NO_BUILD=1 scripts/bench-hostile.sh --smoke ||
        failed+=("hostile clients smoke run")
else
    failed+=("release build")
fi

await simulation || failed+=(simulation)
if await fuzz; then
    # Every fuzz target for 20 s from the checked-in seeds (fuzz/README.md),
    # one per core at a time, on a machine nothing else keeps busy.
    phase "fuzz smoke run" fuzz scripts/fuzz.sh --smoke || failed+=("fuzz smoke run")
else
    failed+=("fuzz targets' build")
fi

# The benchmark's smoke mode: a three-node cluster and every phase with small
# record counts (figures printed, not asserted), last, on a quiet machine.
phase "benchmark smoke run" bench env SYNCLINE_NO_BUILD=1 scripts/bench.sh --smoke ||
    failed+=("benchmark smoke run")

[ "${#failed[@]}" = 0 ] || die "failed: ${failed[*]}"
