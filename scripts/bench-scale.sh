#!/usr/bin/env bash
# How syncline's cost grows with partitions: for each partition count, a fresh
# three-node cluster (release build, every broker also a controller voter, as
# the shipped config/) and one topic of that many partitions (RF 3,
# min.insync.replicas=2), then:
#   create     time from `topic create` until every partition has a leader and
#              a full ISR;
#   idle CPU   of the three brokers together over 10 s with nothing to do
#              (% of one core, from /proc/PID/stat);
#   RSS        each broker's resident set, idle, and its peak after the load;
#   Metadata   a Kafka client's Metadata request for all topics through the
#              Kafka listener (librdkafka's list_topics): median and worst of 30;
#   describe   `syncline topic describe` of the topic, the whole command
#              (process start included): median of 5;
#   produce    `syncline perf produce`, acks=all, 1 KiB records, spread over
#              every partition (128 KiB batches, linger 5 ms);
#   failover   a broker other than the active controller is killed (SIGKILL):
#              time until none of the partitions it led names it as leader,
#              against broker_session_timeout_ms + 5 s.
#
#   scripts/bench-scale.sh            3, 300 and 3,000 partitions
#   scripts/bench-scale.sh --smoke    3 and 30 partitions, few records (CI);
#                                     figures printed, not asserted
#   scripts/bench-scale.sh --keep     keep the throwaway directory (logs)
#
# Environment: SCALE_PARTITIONS (e.g. "3 300 3000"), SCALE_RECORDS (records
# produced per partition count), SCALE_RUST_LOG (the brokers' RUST_LOG,
# default warn; their logs stay with --keep). Writes the table to stdout, and with
# SCALE_REPORT=FILE also as Markdown to FILE. Everything started here is
# stopped on every exit path.
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
    -h | --help)
        usage_from_header "$0"
        exit 0
        ;;
    *) die "unknown argument $arg (expected --smoke, --keep or --help)" ;;
    esac
done

if [ "$mode" = smoke ]; then
    counts="${SCALE_PARTITIONS:-3 30}"
    records="${SCALE_RECORDS:-20000}"
else
    counts="${SCALE_PARTITIONS:-3 300 3000}"
    records="${SCALE_RECORDS:-300000}"
fi
session_timeout_ms=9000
idle_window_s=10

command -v python3 >/dev/null || die "python3 is needed: install it (apt-get install python3)"
ensure_kafka_clients
kafka_python="$repo/$KAFKA_VENV/bin/python"
"$kafka_python" -c 'import confluent_kafka' ||
    die "confluent-kafka is not importable from $kafka_python (remove $KAFKA_VENV and run again)"

build_shipped release
bin="$repo/target/release"
SYNCLINE="$bin/syncline"
clk_tck=$(getconf CLK_TCK)

work="$(mktemp -d "${TMPDIR:-/tmp}/syncline-scale.XXXXXX")"
pids=()
stop_brokers() {
    local pid
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}
cleanup() {
    local status=$?
    stop_wait_ready
    stop_brokers
    if [ "$keep" = 1 ]; then
        echo "==> kept $work"
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_cluster DIR: three brokers with data under DIR (start_bench_cluster);
# sets bootstrap, kafka_bootstrap and pids.
start_cluster() {
    start_bench_cluster "$1" "$bin" "${SCALE_RUST_LOG:-warn}" "broker_session_timeout_ms = $session_timeout_ms"
    local ready=0
    wait_cluster_ready 60 3 "$bootstrap" brokers_alive || ready=$?
    [ "$ready" -ne 1 ] || die "$NOT_READY_REASON; see $1/broker-*.log (run with --keep)"
    [ "$ready" -eq 0 ] || exit 1
}

brokers_alive() {
    local i
    for i in 0 1 2; do
        if ! kill -0 "${pids[$i]}" 2>/dev/null; then
            echo "error: broker $((i + 1)) exited; its log:" >&2
            tail -20 "$work/p$current/broker-$((i + 1)).log" >&2
            return 1
        fi
    done
}

sl() { timeout 120 "$SYNCLINE" --bootstrap-server "$bootstrap" "$@"; }

now_ms() { date +%s%3N; }



report="$work/rows"
: >"$report"
for p in $counts; do
    current=$p
    dir="$work/p$p"
    echo "==> $p partitions: starting three brokers in $dir"
    start_cluster "$dir"

    start=$(now_ms)
    sl topic create scale --replication-factor 3 --partitions "$p" \
        --config min.insync.replicas=2 >/dev/null
    wait_until 300 all_led_in_sync sl scale "$p" 3 ||
        die "$p partitions: not every partition had a leader and a full ISR within 300 s"
    create_ms=$(($(now_ms) - start))
    echo "    created, all led with a full ISR, in $create_ms ms"

    # Idle: nothing produced, nothing fetched by clients; followers long-poll.
    sync
    t0=$(cpu_ticks "${pids[@]}")
    s0=$(now_ms)
    sleep "$idle_window_s" # the measurement window itself, not a wait for a condition
    t1=$(cpu_ticks "${pids[@]}")
    s1=$(now_ms)
    idle_pct=$(python3 -c "print(f'{100 * ($t1 - $t0) / $clk_tck / (($s1 - $s0) / 1000):.2f}')")
    rss_idle=$(for pid in "${pids[@]}"; do awk '/^VmRSS/ {printf "%d ", $2 / 1024}' "/proc/$pid/status"; done)
    echo "    idle CPU of the three brokers: $idle_pct % of one core; RSS (MiB): $rss_idle"

    metadata=$("$kafka_python" - "$kafka_bootstrap" <<'PY'
import statistics, sys, time
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
admin.list_topics(timeout=30)  # connects; not counted
times = []
for _ in range(30):
    t = time.perf_counter()
    md = admin.list_topics(timeout=30)
    times.append((time.perf_counter() - t) * 1000)
parts = sum(len(t.partitions) for t in md.topics.values())
print(f"{statistics.median(times):.1f} {max(times):.1f} {parts}")
PY
    )
    read -r md_median md_max md_parts <<<"$metadata"
    echo "    Metadata (all topics, $md_parts partitions): median $md_median ms, worst $md_max ms"

    describe_times=()
    for _ in 1 2 3 4 5; do
        t=$(now_ms)
        sl topic describe scale --json >/dev/null
        describe_times+=($(($(now_ms) - t)))
    done
    describe_ms=$(printf '%s\n' "${describe_times[@]}" | sort -n | sed -n 3p)
    echo "    topic describe (the whole CLI command): median $describe_ms ms"

    sync
    sl perf produce --topic scale --num-records "$records" --record-size 1024 --throughput -1 \
        --producer-props acks=all linger.ms=5 batch.size=131072 \
        --json-report "$dir/produce.json" | sed 's/^/    /'
    produce_mbs=$(python3 -c "import json; print(f\"{json.load(open('$dir/produce.json'))['bytes_per_sec'] / 1e6:.1f}\")")
    rss_peak=$(for pid in "${pids[@]}"; do awk '/^VmHWM/ {printf "%d ", $2 / 1024}' "/proc/$pid/status"; done)

    # Failover: a broker that is not the active controller, so that only the
    # partition leaders move (not the controller too).
    controller=$(sl cluster describe --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["controller_id"])')
    victim=3
    [ "$controller" != 3 ] || victim=2
    led=$(partition_lines sl scale | awk -v v="$victim" '$2 == v' | wc -l)
    kill -KILL "${pids[$((victim - 1))]}"
    start=$(now_ms)
    still_led() { partition_lines sl scale | awk -v v="$victim" '$2 == v || $2 < 0 {n++} END {exit n > 0 ? 0 : 1}'; }
    moved=1
    while still_led; do
        if [ $(($(now_ms) - start)) -gt $((session_timeout_ms + 60000)) ]; then
            moved=0
            break
        fi
        sleep 0.1
    done
    failover_ms=$(($(now_ms) - start))
    if [ "$moved" = 1 ]; then
        echo "    broker $victim killed: its $led leaders moved in $failover_ms ms"
    else
        echo "    broker $victim killed: its $led leaders had not all moved after $failover_ms ms"
        failover_ms="> $failover_ms"
    fi
    wait "${pids[$((victim - 1))]}" 2>/dev/null || true
    stop_brokers
    echo "$p|$create_ms|$idle_pct|$rss_idle|$rss_peak|$md_median|$md_max|$describe_ms|$produce_mbs|$led|$failover_ms" >>"$report"
    [ "$keep" = 1 ] || rm -rf "$dir"
done

python3 - "$report" "$session_timeout_ms" "${SCALE_REPORT:-}" <<'PY'
import sys
rows = [line.rstrip("\n").split("|") for line in open(sys.argv[1]) if line.strip()]
bound = int(sys.argv[2]) / 1000 + 5
head = ["partitions", "create (ms)", "idle CPU (% of a core)", "RSS idle (MiB)", "RSS peak (MiB)",
        "Metadata median / worst (ms)", "describe (ms)", "produce (MB/s)", f"failover (ms, bound {bound:.0f} s)"]
table = []
for r in rows:
    p, create, idle, rss_idle, rss_peak, md_med, md_max, desc, mbs, led, fail = r
    fail_txt = f"{fail} ({led} leaders)"
    table.append([p, create, idle, " / ".join(rss_idle.split()), " / ".join(rss_peak.split()),
                  f"{md_med} / {md_max}", desc, mbs, fail_txt])
widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
print()
print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
for t in table:
    print("  ".join(c.ljust(w) for c, w in zip(t, widths)))
if sys.argv[3]:
    with open(sys.argv[3], "w") as f:
        f.write("| " + " | ".join(head) + " |\n")
        f.write("|" + "---|" * len(head) + "\n")
        for t in table:
            f.write("| " + " | ".join(t) + " |\n")
PY
