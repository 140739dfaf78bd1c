#!/usr/bin/env bash
# The deterministic simulation (syncline-sim): whole three-node clusters,
# their Raft controller quorum and a workload of producers and consumers, on
# one thread under a simulated network, clock and disk, through a seed's
# faults (crashes, pauses, cuts both ways and one way, isolation, slow links,
# power losses, full and failing disks, faults aimed at a leader or the
# active controller), healed and checked by the fault harness' checker. Exit
# 0 only when every seed was valid; a failing seed prints the command that
# replays it.
#
#   scripts/sim.sh                           one random seed (printed)
#   scripts/sim.sh --seed 42 --trace         one seed with its event trace
#   scripts/sim.sh --seed 1 --seeds 500      seeds 1..500 in one process
#   scripts/sim.sh --jobs 2 --seed 1 --seeds 10000
#                                            a long run on 2 processes
#   scripts/sim.sh --no-faults               the fault-free baseline
#   scripts/sim.sh --help                    every option
#
# Builds the release binary first (SYNCLINE_NO_BUILD=1 uses it as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
PROG=sim.sh
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

case "${1:-}" in
-h | --help)
    help_with_binary "$0" syncline-sim "cargo build --release -p syncline-sim"
    exit 0
    ;;
esac

jobs=1
if [ "${1:-}" = --jobs ]; then
    [ $# -ge 2 ] && [ "$2" -ge 1 ] 2>/dev/null ||
        die "--jobs needs a number of processes, e.g. --jobs $(nproc)"
    jobs=$2
    shift 2
fi

if [ "${SYNCLINE_NO_BUILD:-0}" != 1 ]; then
    echo "==> cargo build --release -p syncline-sim"
    cargo build --release -p syncline-sim
fi
bin=target/release/syncline-sim

if [ "$jobs" = 1 ]; then
    exec "$bin" "$@"
fi

# --jobs: split --seed S --seeds N into one range per process.
seed="" seeds=1 rest=()
while [ $# -gt 0 ]; do
    case "$1" in
    --seed) seed=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    *) rest+=("$1"); shift ;;
    esac
done
[ -n "$seed" ] || seed=$((RANDOM * 32768 + RANDOM))
logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT
per=$(((seeds + jobs - 1) / jobs))
for ((j = 0; j < jobs; j++)); do
    from=$((seed + j * per))
    n=$((seeds - j * per < per ? seeds - j * per : per))
    [ "$n" -gt 0 ] || break
    "$bin" --seed "$from" --seeds "$n" "${rest[@]}" >"$logs/$j" 2>&1 &
    pids+=($!)
done
status=0
for ((j = 0; j < ${#pids[@]}; j++)); do
    rc=0
    wait "${pids[$j]}" || rc=$?
    # A violation (1) outranks a seed that could not be run (3).
    if [ "$rc" = 1 ] || [ "$status" = 0 ]; then status=$rc; fi
done
grep -hv '^seed [0-9]*: .*VALID$' "$logs"/* | grep -v '^seeds ' || true
echo "==> totals of $jobs processes:"
grep -h '^seeds ' "$logs"/*
exit "$status"
