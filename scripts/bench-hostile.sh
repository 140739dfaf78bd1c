#!/usr/bin/env bash
# Hostile clients against a running cluster, one attack at a time, beside a
# well-behaved client: a fresh three-node cluster (release build, every broker
# also a controller voter, as the shipped config/, default settings
# otherwise), one idempotent acks=all producer sending 1 KiB records at a
# fixed rate to a topic of RF 3 and min.insync.replicas=2, and for a first
# phase without attack, then for each attack in turn (crates/hostile/src/
# attacks.rs: fetches naming 20,000 topics, repeated names, clients that never
# read, an ApiVersions flood, 9,000 held connections, 64 MiB garbage frames,
# decompression bombs, fetch-session churn, auto-creation floods):
#   the producer's latency   p50, p99 and worst, from when each record was due
#                            (open loop), and p99's ratio to the first phase's;
#   memory                   each broker's peak resident set;
#   health                   fenced brokers seen, controller elections and ISR
#                            shrinks during the phase;
# and at the end every acknowledged record is read back. Fails when a phase's
# p99 is over 50 ms, a broker's memory over 512 MiB, a record was not
# written or is missing, or a broker was fenced, the controller moved or an
# ISR shrank (crates/hostile/src/main.rs says how each is measured).
#
#   scripts/bench-hostile.sh          20 s per phase
#   scripts/bench-hostile.sh --smoke  6 s per phase (CI); the p99 target is
#                                     printed, not asserted (every other
#                                     bound is)
#   scripts/bench-hostile.sh --keep   keep the throwaway directory (logs)
#
# Environment: HOSTILE_ATTACKS (comma-separated names, default all),
# HOSTILE_SECONDS (per phase), HOSTILE_RUST_LOG (the brokers' RUST_LOG,
# default warn). SYNCLINE_NO_BUILD=1 uses target/release as it is.
# Everything started here is stopped on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

seconds=20
keep=0
advisory=()
for arg in "$@"; do
    case "$arg" in
    --smoke)
        seconds=6
        advisory=(--latency-advisory)
        ;;
    --keep) keep=1 ;;
    -h | --help)
        usage_from_header "$0"
        exit 0
        ;;
    *) die "unknown argument $arg (expected --smoke, --keep or --help)" ;;
    esac
done
seconds="${HOSTILE_SECONDS:-$seconds}"

build_shipped release -p syncline-hostile
bin="$repo/target/release"
[ -x "$bin/syncline-hostile" ] || die "$bin/syncline-hostile is missing: build it with cargo build --release -p syncline-hostile"
SYNCLINE="$bin/syncline"

work="$(mktemp -d "${TMPDIR:-/tmp}/syncline-hostile.XXXXXX")"
pids=()
cleanup() {
    local status=$? pid
    stop_wait_ready
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$keep" = 1 ] || [ "$status" -ne 0 ]; then
        echo "==> kept $work (broker logs)"
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

brokers_alive() {
    local pid
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || {
            echo "error: a broker exited; see $work/broker-*.log" >&2
            return 1
        }
    done
}

echo "==> starting three brokers in $work"
start_bench_cluster "$work" "$bin" "${HOSTILE_RUST_LOG:-warn}"
ready=0
wait_cluster_ready 60 3 "$bootstrap" brokers_alive || ready=$?
[ "$ready" -ne 1 ] || die "$NOT_READY_REASON; see $work/broker-*.log (run with --keep)"
[ "$ready" -eq 0 ] || exit 1

"$bin/syncline-hostile" --brokers "$bootstrap" --kafka "$kafka_bootstrap" \
    --metrics "$metrics_addrs" --pids "$(IFS=,; echo "${pids[*]}")" \
    --seconds "$seconds" --attacks "${HOSTILE_ATTACKS:-all}" "${advisory[@]}"
