#!/usr/bin/env bash
# The fault harness (syncline-chaos): a cluster of real synclined processes
# under a workload and a nemesis of overlapping faults, healed, then checked:
# exit 0 only when every promise of the chosen settings held in every run.
#
#   scripts/chaos.sh                          one safe run, 60 s of faults
#   scripts/chaos.sh --duration 900           a soak (no test runner to kill it)
#   scripts/chaos.sh --runs 20 --duration 120 twenty runs, seeds N..N+19, totals
#   scripts/chaos.sh --settings unsafe        acks=1, min ISR 1, unclean
#                                             election, no fsync: losses expected
#   scripts/chaos.sh --seed 42 -v             replay a schedule, print each fault
#   scripts/chaos.sh --faults kill,cut,split  choose the nemesis' repertoire
#   scripts/chaos.sh --scenario jepsen-2013   a named scenario alone (also
#                                             last-replica-standing, kip-101,
#                                             kip-101-power, kip-279,
#                                             zombie-controller, power-loss)
#   scripts/chaos.sh --brokers 5 --partitions 6   a bigger cluster and topic
#   scripts/chaos.sh --flush each|never|auto  fsync every append, never, or
#                                             when safe with power loss (auto)
#   SYNCLINE_CHAOS_KEEP=DIR scripts/chaos.sh  keep broker logs of a bad run
#   scripts/chaos.sh --help                   every option
#
# Builds the release binaries first (SYNCLINE_NO_BUILD=1 uses them as they
# are). Network faults (nftables, a table of the harness's own) and power loss
# (ext4 on loop devices) need root; without root they are skipped and named,
# and the process faults still run. As root, installs nftables and e2fsprogs
# when missing. Every process, rule, mount and loop device it made is removed
# on every exit path (Ctrl-C included); those of a killed earlier run are
# removed at the next start.
set -euo pipefail
cd "$(dirname "$0")/.."
PROG=chaos.sh
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

case "${1:-}" in
-h | --help)
    help_with_binary "$0" syncline-chaos "cargo build --release -p syncline-chaos"
    exit 0
    ;;
esac

ensure_fault_tools
# The brokers it starts are the shipped synclined; the harness is a test crate,
# built in a build of its own.
build_shipped release
if [ "${SYNCLINE_NO_BUILD:-0}" != 1 ]; then
    echo "==> cargo build --release -p syncline-chaos"
    cargo build --release -p syncline-chaos
fi
exec target/release/syncline-chaos "$@"
