#!/usr/bin/env bash
# Benchmarks syncline on this machine, in one run, against the raw RF=3 floor.
#
#   scripts/bench.sh           full run (a few minutes): prints the table, writes
#                              docs/benchmarks.md and docs/img/benchmarks.png
#   scripts/bench.sh --smoke   about 10 s of load, small record counts (CI): prints
#                              the table only; figures are printed, not asserted
#   scripts/bench.sh --keep    keep the throwaway directory (logs, JSON reports)
#
# Starts three brokers (release build) on free loopback ports with data in a
# throwaway directory, then measures:
#   (a) the floor: producer -> leader -> 2 followers, raw TCP + file appends
#       (in a full run ../shared/tools/rf3-floor/run.sh when it exists, else the project's own
#       rf3-floor binary, which does the same), moving as many bytes as (b);
#   (b) RF 3, acks=all, 1 KiB records (idempotent, the default);
#   (c) RF 3, acks=1;  (d) RF 1;
#   (e) consumer throughput (reading what the last run of (b) wrote);
#   (f) produce latency at a fixed rate, 0.25 x the floor;  (g) end-to-end latency;
#   (h) and (i): (b) with compression.type=lz4 and zstd;
#   (j) (b) with enable.idempotence=false (what idempotence costs);
#   (k) (b) through the brokers' Kafka listeners, with librdkafka as the
#       producer (confluent-kafka, scripts/bench/kafka_producer.py);
#   (l) (b) over TLS: through a second, SASL_SSL client listener of each
#       broker (TLS with a local CA, SCRAM-SHA-512 login; replication between
#       the brokers stays on the plaintext listener), with (l)/(b);
# then the floor again (how far the machine drifted during the run), and each
# broker's peak RSS (VmHWM in /proc). Every phase runs BENCH_REPEATS times (3;
# 1 in a smoke run), each from a synced and dropped page cache (root; else only
# synced), each produce run to a fresh topic deleted after it; a figure is the
# median of its runs with the lowest and highest, its ratio to the floor's
# median, and the CPU-seconds per GB of the brokers (from /proc) and of the
# client (getrusage). scripts/bench/report.py prints the table and writes the
# page. Everything started here is stopped on every exit path.
#
# Kafka's Python clients are installed into target/kafka-clients (a venv, as
# scripts/test.sh does) when missing.
#
# Environment: BENCH_RECORDS (records for b/c/d/k), BENCH_PARTITIONS (3),
# BENCH_PRODUCER_PROPS (extra producer settings for b/c/d/f/k, Kafka names;
# (k) hands them to librdkafka as they are), BENCH_REPEATS (runs per phase),
# BENCH_BIN (a directory with prebuilt synclined, syncline and rf3-floor,
# absolute or relative to the repository: e.g. an older commit's, for a
# "before"; nothing is built then; BENCH_BIN_REV names their commit in the
# report), BENCH_PROFILE="LABEL..." (profile these
# runs with perf, e.g. "b-1 f-1": see run_phase), BENCH_SUMMARY=FILE (write the figures as
# JSON), BENCH_BEFORE=FILE (an earlier run's BENCH_SUMMARY: shown as "before"
# beside every figure, the CPU target judged against it), BENCH_SUMMARY_ONLY=1
# (a full run that leaves docs/ alone).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

mode=full
keep=0
for arg in "$@"; do
    case "$arg" in
        --smoke) mode=smoke ;;
        --keep) keep=1 ;;
        -h|--help) usage_from_header "$0"; exit 0 ;;
        *) echo "error: unknown argument $arg (expected --smoke, --keep or --help)" >&2; exit 2 ;;
    esac
done

record_size=1024
partitions="${BENCH_PARTITIONS:-3}"
if [ "$mode" = smoke ]; then
    records="${BENCH_RECORDS:-20000}"
    e2e_records=300
    repeats="${BENCH_REPEATS:-1}"
else
    records="${BENCH_RECORDS:-1000000}"
    e2e_records=10000
    repeats="${BENCH_REPEATS:-3}"
fi
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPEATS=$repeats: give a whole number of runs per phase, 1 or more"
# Batches of 128 KiB and a short linger: throughput settings as a Kafka
# benchmark uses too. Latency runs (f) use the same settings at half the rate.
producer_props="linger.ms=5 batch.size=131072 ${BENCH_PRODUCER_PROPS:-}"

command -v python3 >/dev/null || {
    echo "error: python3 is needed (figures, the report): install it (apt-get install python3)" >&2
    exit 1
}

echo "==> load before the run: $(uptime | sed 's/.*load average/load average/')"
read -r load1 _ < /proc/loadavg
if python3 -c "import sys; sys.exit(0 if float('$load1') > 1.0 else 1)"; then
    echo "    warning: the machine is busy (1-minute load $load1 on $(nproc) cores): figures will be noisy"
fi

# The plot needs matplotlib: installed first, so that a failure to install it
# stops the run before minutes of measurements rather than after.
if [ "$mode" = full ] && ! python3 -c 'import matplotlib' 2>/dev/null; then
    echo "==> installing matplotlib for the plot (pip, user site)"
    python3 -m pip install --quiet --user matplotlib || {
        echo "error: cannot install matplotlib (for the plot); install it (apt-get install python3-matplotlib) and run again" >&2
        exit 1
    }
fi
# librdkafka for (k): confluent-kafka in the venv scripts/test.sh uses too.
ensure_kafka_clients
kafka_python="$repo/$KAFKA_VENV/bin/python"
"$kafka_python" -c 'import confluent_kafka' ||
    die "confluent-kafka is not importable from $kafka_python (remove $KAFKA_VENV and run again)"

if [ -n "${BENCH_BIN:-}" ]; then
    bin="$(abs_path "$BENCH_BIN")"
    for b in synclined syncline rf3-floor; do
        [ -x "$bin/$b" ] || die "BENCH_BIN=$BENCH_BIN has no $b: build it (cargo build --release --bin $b) or point BENCH_BIN elsewhere"
    done
    echo "==> binaries from $bin (BENCH_BIN)"
else
    build_shipped release -p syncline-floor
    bin="$repo/target/release"
fi

# CPU pressure (PSI): the share of the run during which some runnable task
# waited for a CPU. High values mean other work competed with the benchmark.
cpu_stall_us() {
    awk '/^some/ { for (i = 1; i <= NF; i++) if ($i ~ /^total=/) { sub("total=", "", $i); print $i } }' \
        /proc/pressure/cpu 2>/dev/null || echo 0
}
stall_start="$(cpu_stall_us)"
run_start="$(date +%s.%N)"

work="$(mktemp -d "${TMPDIR:-/tmp}/syncline-bench.XXXXXX")"
pids=()
cleanup() {
    local status=$?
    stop_wait_ready
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait_gone "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$keep" = 1 ]; then
        echo "==> kept $work"
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "==> starting three brokers in $work"
# Per broker: its own listener, metrics, and a Kafka wire-protocol listener (k).
# (l): a second client listener, SASL_SSL, per broker.
mapfile -t ports < <(free_ports 12)
[ "${#ports[@]}" -eq 12 ] || die "no 12 free ports found on 127.0.0.1"
bootstrap="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
kafka_bootstrap="127.0.0.1:${ports[6]},127.0.0.1:${ports[7]},127.0.0.1:${ports[8]}"
tls_bootstrap="127.0.0.1:${ports[9]},127.0.0.1:${ports[10]},127.0.0.1:${ports[11]}"
# (l)'s TLS files: a CA, each broker's certificate, the user admin (no ACLs here).
SYNCLINE="$bin/syncline"
require_security_cli
ensure_ca "$work/tls"
ensure_password "$work/admin.password"
ensure_scram_bootstrap "$work/bootstrap-users" "$SECURE_ADMIN" "$work/admin.password"
write_client_properties "$work/client.properties" "$SECURE_ADMIN" "$work/admin.password" "$work/tls/ca.pem"
# As the shipped config/: every broker is also a controller voter.
voters="1@127.0.0.1:${ports[0]},2@127.0.0.1:${ports[1]},3@127.0.0.1:${ports[2]}"
for id in 1 2 3; do
    ensure_cert "$work/tls" "broker-$id" "$work/tls" localhost 127.0.0.1
    cat > "$work/broker-$id.toml" <<EOF
node_id = $id
# The brokers replicate over PLAINTEXT (the first listener); TLS is (l)'s.
listeners = "PLAINTEXT://127.0.0.1:${ports[$((id - 1))]},TLS://127.0.0.1:${ports[$((id + 8))]}"
listener_security_protocol_map = "PLAINTEXT:PLAINTEXT,TLS:SASL_SSL"
ssl_certificate_location = "$work/tls/broker-$id.pem"
ssl_key_location = "$work/tls/broker-$id.key"
ssl_ca_location = "$work/tls/ca.pem"
scram_bootstrap_file = "$work/bootstrap-users"
log_dirs = "$work/data-$id"
process_roles = "broker,controller"
controller_quorum_voters = "$voters"
metrics_listen = "127.0.0.1:${ports[$((id + 2))]}"
kafka_listeners = "127.0.0.1:${ports[$((id + 5))]}"
EOF
    RUST_LOG=warn "$bin/synclined" --config "$work/broker-$id.toml" > "$work/broker-$id.log" 2>&1 &
    pids+=("$!")
done

syncline() {
    "$bin/syncline" --bootstrap-server "$bootstrap" "$@"
}

# False, with the broker's log, if one has exited during start-up.
brokers_alive() {
    local i
    for i in 0 1 2; do
        if ! kill -0 "${pids[$i]}" 2>/dev/null; then
            echo "error: broker $((i + 1)) exited during start-up; its log:" >&2
            tail -20 "$work/broker-$((i + 1)).log" >&2
            return 1
        fi
    done
}
ready=0
wait_cluster_ready 60 3 "$bootstrap" brokers_alive || ready=$?
if [ "$ready" -eq 1 ]; then
    echo "error: $NOT_READY_REASON; see $work/broker-*.log (run with --keep)" >&2
fi
[ "$ready" -eq 0 ] || exit 1

# Every phase starts from a synced and dropped page cache: no phase pays for the
# previous one's write-back, and none reads what an earlier one left cached
# (root only: /proc/sys/vm/drop_caches; otherwise the cache is only synced).
drop_caches=1
if ! { sync && echo 1 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
    drop_caches=0
    echo "    note: cannot write /proc/sys/vm/drop_caches (not root?): every phase starts from a synced, not a dropped, page cache"
fi
settle() {
    sync
    if [ "$drop_caches" = 1 ]; then echo 1 > /proc/sys/vm/drop_caches; fi
}

# CPU time of the three brokers together, in clock ticks (utime + stime).
clk_tck="$(getconf CLK_TCK)"
broker_ticks() { cpu_ticks "${pids[@]:0:3}"; }

# profile_report LABEL WHO PIDS: the top symbols of PIDS (comma-separated) in
# LABEL's profile, to LABEL.WHO.perf.txt, and the first lines printed.
profile_report() {
    local out="$work/$1.$2.perf.txt"
    perf report -i "$work/$1.perf.data" --pid "$3" --percentage relative --stdio --no-children --sort dso,symbol \
        --percent-limit 0.5 2>/dev/null | grep -v '^#' | grep -v '^$' |
        sed -E 's/([[:space:]]+-){0,2}[[:space:]]*$//' | cut -c1-150 > "$out" || true
    echo "    top symbols of $1, $2 (perf record -a -e cpu-clock; % of their samples), in $out:"
    head -25 "$out" | sed 's/^/      /'
}

# run_phase LABEL COMMAND...: settles, then runs COMMAND (its output indented),
# counting the CPU-seconds of the client (COMMAND and its children) into
# LABEL.client-cpu and of the brokers into LABEL.broker-cpu.
# With LABEL in BENCH_PROFILE (labels separated by spaces, e.g. "b-1 f-1": the
# first runs of (b) and (f)), that run is profiled
# machine-wide with `perf record -e cpu-clock` (no hardware counters needed),
# and the top symbols of the brokers and of the client are written to
# LABEL.brokers.perf.txt and LABEL.client.perf.txt (kept in the
# throwaway directory with --keep, and printed).
run_phase() {
    local label="$1"
    shift
    settle
    local ticks profiler=""
    if [[ " ${BENCH_PROFILE:-} " == *" $label "* ]]; then
        command -v perf >/dev/null || die "BENCH_PROFILE needs perf: install it (apt-get install linux-perf)"
        perf record -q -a -e cpu-clock -F 999 -o "$work/$label.perf.data" 2>/dev/null &
        profiler=$!
        pids+=("$profiler")
    fi
    ticks="$(broker_ticks)"
    python3 "$repo/scripts/bench/cputime.py" "$work/$label.client-cpu" "$@" | sed 's/^/    /'
    python3 -c "print(f'{($(broker_ticks) - $ticks) / $clk_tck:.3f}')" > "$work/$label.broker-cpu"
    if [ -n "$profiler" ]; then
        kill -INT "$profiler"
        wait "$profiler" 2>/dev/null || true
        profile_report "$label" brokers "$(IFS=,; echo "${pids[*]:0:3}")"
        profile_report "$label" client "$(cat "$work/$label.client-cpu.pid")"
    fi
}

bytes=$((records * record_size))
shared_floor="$repo/../shared/tools/rf3-floor/run.sh"
floor_source="rf3-floor (crates/floor/src/main.rs)"
# A smoke run uses the project's own floor: nothing outside the repository is
# built in CI.
if [ "$mode" = full ] && [ -f "$shared_floor" ]; then
    floor_source="shared/tools/rf3-floor"
    # Built once before any measurement, so no floor run pays for a build.
    CARGO_TARGET_DIR="$repo/target/rf3-floor" bash "$shared_floor" 1048576 1048576 > /dev/null ||
        floor_source="rf3-floor (crates/floor/src/main.rs)"
fi
# measure_floor OUT: one floor run, its line to OUT and its CPU-seconds (the
# whole floor process: producer, leader and followers, all in the kernel but
# for a few ms; with the shared tool, also its `cargo build` finding nothing to
# do, about 0.06 s) to OUT.cpu.
measure_floor() {
    local line=""
    settle
    if [ "$floor_source" = "shared/tools/rf3-floor" ]; then
        if ! line="$(CARGO_TARGET_DIR="$repo/target/rf3-floor" python3 "$repo/scripts/bench/cputime.py" "$1.cpu" \
            bash "$shared_floor" "$bytes" 1048576 | tail -1)"; then
            echo "    warning: $shared_floor failed; measuring with the project's own rf3-floor instead"
            floor_source="rf3-floor (crates/floor/src/main.rs)"
            line=""
        fi
    fi
    if [ -z "$line" ]; then
        line="$(python3 "$repo/scripts/bench/cputime.py" "$1.cpu" "$bin/rf3-floor" "$bytes" 1048576 "$work" | tail -1)"
    fi
    echo "    $line   [$floor_source]"
    echo "$line" > "$1"
}

# create_topic NAME RF PARTITIONS: returns once every partition has a leader
# and a full ISR, so that no run pays for leader elections.
create_topic() {
    syncline topic create "$1" --replication-factor "$2" --partitions "$3" \
        --config min.insync.replicas="$(( $2 > 1 ? 2 : 1 ))" > /dev/null
    wait_until 60 all_led_in_sync syncline "$1" "$3" "$2" ||
        die "topic $1: not every partition had a leader and a full ISR within 60 s"
}
delete_topic() { syncline topic delete "$1" > /dev/null; }

plain_client=("$bin/syncline" --bootstrap-server "$bootstrap")
tls_client=("$bin/syncline" --bootstrap-server "$tls_bootstrap" --command-config "$work/client.properties")

# produce_phase LABEL RF ACKS RECORDS RATE [EXTRA]: REPEATS runs, each to a fresh
# topic (deleted after it, so the disk does not fill), through the client in
# the array `client` (plain_client, or tls_client for (l)). The last run's
# topic of (b) stays for the consumer (e).
client=("${plain_client[@]}")
produce_phase() {
    local label="$1" rf="$2" acks="$3" n="$4" rate="$5" extra="${6:-}" rep topic
    for rep in $(seq 1 "$repeats"); do
        topic="bench-$label-$rep"
        create_topic "$topic" "$rf" "$partitions"
        # shellcheck disable=SC2086 # producer_props and extra are lists of KEY=VALUE words
        run_phase "$label-$rep" "${client[@]}" perf produce --topic "$topic" --num-records "$n" \
            --record-size "$record_size" --throughput "$rate" --producer-props acks="$acks" \
            $producer_props $extra --json-report "$work/$label-$rep.json"
        if [ "$label" != b ] || [ "$rep" != "$repeats" ]; then delete_topic "$topic"; fi
    done
}

echo "==> (a) floor: $bytes bytes producer -> leader -> 2 followers, $repeats runs"
for rep in $(seq 1 "$repeats"); do
    measure_floor "$work/floor-$rep.txt"
done

echo "==> (b) RF 3, acks=all, $records x $record_size B"
produce_phase b 3 all "$records" -1
echo "==> (l) RF 3, acks=all, $records x $record_size B, over TLS (the SASL_SSL listeners)"
client=("${tls_client[@]}")
produce_phase l 3 all "$records" -1
client=("${plain_client[@]}")
echo "==> (c) RF 3, acks=1"
produce_phase c 3 1 "$records" -1
echo "==> (d) RF 1, acks=all"
produce_phase d 1 all "$records" -1
echo "==> (h) RF 3, acks=all, compression.type=lz4"
produce_phase h 3 all "$records" -1 compression.type=lz4
echo "==> (i) RF 3, acks=all, compression.type=zstd"
produce_phase i 3 all "$records" -1 compression.type=zstd
echo "==> (j) RF 3, acks=all, enable.idempotence=false"
produce_phase j 3 all "$records" -1 enable.idempotence=false

echo "==> (k) RF 3, acks=all, $records x $record_size B, librdkafka via the Kafka listeners"
for rep in $(seq 1 "$repeats"); do
    create_topic "bench-k-$rep" 3 "$partitions"
    # shellcheck disable=SC2086 # producer_props is a list of KEY=VALUE words
    run_phase "k-$rep" "$kafka_python" "$repo/scripts/bench/kafka_producer.py" "$kafka_bootstrap" \
        "bench-k-$rep" "$records" "$record_size" "$work/k-$rep.json" acks=all $producer_props
    delete_topic "bench-k-$rep"
done

echo "==> (e) consumer: $records records from bench-b-$repeats (what the last (b) run wrote)"
for rep in $(seq 1 "$repeats"); do
    run_phase "e-$rep" "${plain_client[@]}" perf consume --topic "bench-b-$repeats" \
        --messages "$records" --json-report "$work/e-$rep.json"
done
delete_topic "bench-b-$repeats"

# (f) at a rate fixed from the floor (the median of its runs): a quarter of it,
# i.e. half of (b)'s target, and half as many records as (b).
f_rate="$(python3 -c "
import re, statistics
floors = [float(re.search(r'baseline_rf3_loopback_MBps ([0-9.]+)', open(f'$work/floor-{r}.txt').read()).group(1))
          for r in range(1, $repeats + 1)]
print(max(1, int(0.25 * statistics.median(floors) * 1e6 / $record_size)))")"
latency_records=$((records / 2))
echo "==> (f) produce latency, acks=all, $latency_records records at $f_rate records/s (0.25 x the floor)"
produce_phase f 3 all "$latency_records" "$f_rate"

echo "==> (g) end-to-end latency: $e2e_records round trips, acks=all, RF 3"
for rep in $(seq 1 "$repeats"); do
    create_topic "bench-g-$rep" 3 1
    run_phase "g-$rep" "${plain_client[@]}" perf e2e --topic "bench-g-$rep" --num-records "$e2e_records" \
        --record-size "$record_size" --producer-acks all --json-report "$work/g-$rep.json"
    delete_topic "bench-g-$rep"
done

# The floor once more: how far the machine itself drifted during the run (on a
# shared host, memory and loopback speed vary by the minute).
echo "==> (a) floor again, at the end"
measure_floor "$work/floor-end.txt"

for id in 1 2 3; do
    # VmHWM: the peak resident set size of the process over its whole life.
    awk '/^VmHWM/ {print $2}' "/proc/${pids[$((id - 1))]}/status" > "$work/rss-$id.kib"
done

cpu_pressure="$(python3 -c "
start, end = float('$stall_start' or 0), float('$(cpu_stall_us)' or 0)
wall = float('$(date +%s.%N)') - float('$run_start')
print(f'{100 * (end - start) / 1e6 / wall:.0f}' if start and end else 'unknown')")"
export BENCH_CPU_PRESSURE="$cpu_pressure"
export BENCH_WORK="$work" BENCH_MODE="$mode" BENCH_FLOOR_SOURCE="$floor_source" \
    BENCH_RECORDS="$records" BENCH_RECORD_SIZE="$record_size" BENCH_PARTITIONS="$partitions" \
    BENCH_PRODUCER_PROPS_USED="$producer_props" BENCH_LOAD="$load1" BENCH_REPEATS="$repeats" \
    BENCH_DROP_CACHES="$drop_caches" BENCH_E2E_RECORDS="$e2e_records" BENCH_BIN_USED="$bin"
if [ "$mode" = full ] && [ -z "${BENCH_SUMMARY_ONLY:-}" ]; then
    export BENCH_DOC="$repo/docs/benchmarks.md" BENCH_PNG="$repo/docs/img/benchmarks.png"
    mkdir -p "$repo/docs/img"
fi

python3 "$repo/scripts/bench/report.py"
