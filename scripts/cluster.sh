#!/usr/bin/env bash
# The three-node local cluster of config/broker-{1,2,3}.toml, run from the
# repository root (the configs' data paths are relative to it).
#
#   scripts/cluster.sh up          build if needed, start the brokers in the
#                                  background, wait until the cluster is ready
#   scripts/cluster.sh down        stop them: SIGTERM, then SIGKILL after a grace
#   scripts/cluster.sh status      PID, liveness and role of each broker (exit
#                                  status 1 unless all three are up and alive)
#   scripts/cluster.sh logs [N]    the last lines of every log (or broker N's),
#                                  followed while the output is a terminal
#
# Files: data/broker-N (partition logs; broker 1 also keeps the metadata log
# there), data/logs/broker-N.log, data/run/broker-N.pid. `up` is idempotent: a
# broker that is already running is left alone. Remove data/ (after `down`) to
# start from an empty cluster.
#
# Environment: SYNCLINE_UP_TIMEOUT_S (default 60) bounds the wait for the
# cluster to become ready; SYNCLINE_STOP_GRACE_S (default 20) is how long `down`
# waits after SIGTERM before SIGKILL; SYNCLINE_NO_BUILD=1 makes `up` use the
# binaries in target/release as they are; RUST_LOG sets the brokers' log level.
set -euo pipefail
cd "$(dirname "$0")/.."

BROKERS=(1 2 3)
LOG_DIR=data/logs
RUN_DIR=data/run
BIN_DIR=target/release
UP_TIMEOUT_S=${SYNCLINE_UP_TIMEOUT_S:-60}
STOP_GRACE_S=${SYNCLINE_STOP_GRACE_S:-20}
# One CLI call never hangs the script (e.g. on a broker paused with SIGSTOP).
CLI_TIMEOUT_S=5

die() {
    echo "cluster.sh: error: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

config_file() { echo "config/broker-$1.toml"; }
log_file() { echo "$LOG_DIR/broker-$1.log"; }
pid_file() { echo "$RUN_DIR/broker-$1.pid"; }

# The quoted value of `key` in broker N's config.
config_value() {
    local n=$1 key=$2
    sed -n "s/^[[:space:]]*${key}[[:space:]]*=[[:space:]]*\"\(.*\)\".*/\1/p" "$(config_file "$n")" | head -n 1
}

# host:port a client uses for broker N: its first advertised listener (or its
# listener), without a Kafka-style NAME:// prefix.
client_address() {
    local v
    v=$(config_value "$1" advertised_listeners)
    [ -n "$v" ] || v=$(config_value "$1" listeners)
    v=${v%%,*}
    echo "${v#*://}"
}

metrics_address() { config_value "$1" metrics_listen; }

is_controller_in_config() { [[ "$(config_value "$1" process_roles)" == *controller* ]]; }

# True when something accepts TCP connections on host:port.
port_answers() {
    local host=${1%:*} port=${1##*:}
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

# PID of broker N if the process in its pid file is alive and is synclined.
broker_pid() {
    local file pid
    file=$(pid_file "$1")
    [ -f "$file" ] || return 1
    pid=$(cat "$file" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Guard against a recycled PID: where /proc exists, the process must be ours.
    if [ -r "/proc/$pid/cmdline" ]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "synclined" || return 1
    fi
    echo "$pid"
}

# running | paused | zombie (from /proc where it exists).
process_state() {
    local pid=$1 state=""
    if [ -r "/proc/$pid/stat" ]; then
        state=$(sed 's/^.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null) || state=""
    fi
    case "$state" in
    T | t) echo paused ;;
    Z) echo zombie ;;
    *) echo running ;;
    esac
}

syncline_cli() { timeout "$CLI_TIMEOUT_S" "$BIN_DIR/syncline" "$@"; }

# Reads `syncline cluster describe --json` on stdin; prints the ids of the
# unfenced brokers, space-separated, ascending.
unfenced_ids() {
    awk '
        /"id":/      { v = $2; gsub(/[^0-9]/, "", v); id = v }
        /"fenced":/  { fenced = ($2 ~ /true/) }
        /^[[:space:]]*}/ { if (id != "" && !fenced) print id; id = ""; fenced = 0 }
    ' | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# Reads `syncline cluster describe --json` on stdin; prints the controller id.
controller_id() {
    sed -n 's/^[[:space:]]*"controller_id":[[:space:]]*\([0-9][0-9]*\).*/\1/p' | head -n 1
}

log_tail() {
    local n=$1 file
    file=$(log_file "$n")
    echo "---- last 20 lines of $file ----" >&2
    tail -n 20 "$file" >&2 2>/dev/null || echo "(no log)" >&2
    echo "----" >&2
}

build() {
    if [ "${SYNCLINE_NO_BUILD:-0}" = 1 ]; then
        echo "==> SYNCLINE_NO_BUILD=1: using $BIN_DIR as it is"
        return
    fi
    command -v cargo >/dev/null ||
        die "cargo not found: install the Rust toolchain (rustup) and run this again"
    echo "==> cargo build --release --bins"
    cargo build --release --bins
}

# ---------------------------------------------------------------- up

# Brokers this invocation started, stopped again if `up` does not finish.
STARTED=()
UP_DONE=0

on_up_exit() {
    local status=$?
    if [ "$UP_DONE" -eq 0 ] && [ "${#STARTED[@]}" -gt 0 ]; then
        echo "cluster.sh: stopping the brokers this command started (${STARTED[*]}); their logs stay in $LOG_DIR/" >&2
        stop_brokers "${STARTED[@]}" >&2 || true
    fi
    exit "$status"
}

# Refuses to start broker N onto a port something else already listens on.
check_ports_free() {
    local n=$1 a
    for a in "$(client_address "$n")" "$(metrics_address "$n")"; do
        [ -n "$a" ] || continue
        if port_answers "$a"; then
            die "broker $n cannot start: $a is already in use by a process this script did not start. Stop that process (another checkout's \`scripts/cluster.sh down\`, or kill it), or change the ports in $(config_file "$n")"
        fi
    done
}

start_broker() {
    local n=$1 config log pidfile address metrics pid
    config=$(config_file "$n")
    log=$(log_file "$n")
    pidfile=$(pid_file "$n")
    [ -f "$config" ] || die "$config is missing: it is part of the repository; restore it with your version control"
    address=$(client_address "$n")
    metrics=$(metrics_address "$n")
    mkdir -p "$(config_value "$n" log_dirs)"
    echo "==== $(date '+%Y-%m-%d %H:%M:%S') scripts/cluster.sh up: starting broker $n ====" >>"$log"
    # nohup: the broker outlives this script and the terminal it ran in.
    NO_COLOR=1 nohup "$BIN_DIR/synclined" --config "$config" >>"$log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pidfile"
    STARTED+=("$n")
    echo "started broker $n (pid $pid, $address, metrics $metrics, log $log)"
}

# Prints why broker N is not ready yet, or nothing when it is: it answers
# DescribeCluster and Metadata and sees all brokers registered and unfenced.
not_ready_reason() {
    local n=$1 address out want seen
    address=$(client_address "$n")
    want="${BROKERS[*]}"
    if ! out=$(syncline_cli --bootstrap-server "$address" cluster describe --json 2>&1); then
        echo "does not answer on $address: $(echo "$out" | tail -n 1)"
        return
    fi
    seen=$(echo "$out" | unfenced_ids)
    if [ "$seen" != "$want" ]; then
        echo "sees registered and unfenced brokers [${seen:-none}], waiting for [$want]"
        return
    fi
    if ! out=$(syncline_cli --bootstrap-server "$address" topic list 2>&1); then
        echo "does not answer Metadata on $address: $(echo "$out" | tail -n 1)"
    fi
}

wait_ready() {
    local deadline=$((SECONDS + UP_TIMEOUT_S)) n reason worst worst_reason
    echo "==> waiting (up to ${UP_TIMEOUT_S} s) until every broker is registered, unfenced and answers metadata"
    while :; do
        for n in "${BROKERS[@]}"; do
            if ! broker_pid "$n" >/dev/null; then
                echo "cluster.sh: error: broker $n exited during start-up" >&2
                log_tail "$n"
                exit 1
            fi
        done
        worst=""
        worst_reason=""
        for n in "${BROKERS[@]}"; do
            reason=$(not_ready_reason "$n")
            if [ -n "$reason" ]; then
                worst=$n
                worst_reason=$reason
                break
            fi
        done
        [ -n "$worst" ] || return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            # Name the broker that is missing from the cluster rather than the
            # one that merely reports it missing.
            local missing
            missing=$(for m in "${BROKERS[@]}"; do
                case " $(syncline_cli --bootstrap-server "$(client_address "$worst")" cluster describe --json 2>/dev/null | unfenced_ids) " in
                *" $m "*) ;;
                *) echo "$m" ;;
                esac
            done | head -n 1)
            if [[ "$worst_reason" == sees* ]] && [ -n "$missing" ] && [ "$missing" != "$worst" ]; then
                echo "cluster.sh: error: broker $missing did not register (or stays fenced) within ${UP_TIMEOUT_S} s: broker $worst $worst_reason" >&2
                log_tail "$missing"
            else
                echo "cluster.sh: error: broker $worst is not ready after ${UP_TIMEOUT_S} s: it $worst_reason" >&2
                log_tail "$worst"
            fi
            echo "Raise SYNCLINE_UP_TIMEOUT_S if the machine is just slow." >&2
            exit 1
        fi
        sleep 0.2
    done
}

print_usage_hint() {
    local addresses=() n
    for n in "${BROKERS[@]}"; do addresses+=("$(client_address "$n")"); done
    local bootstrap
    bootstrap=$(
        IFS=,
        echo "${addresses[*]}"
    )
    cat <<EOF

The cluster is up: brokers ${BROKERS[*]} on ${addresses[*]} (broker 1 hosts the controller).

  export PATH="\$PWD/$BIN_DIR:\$PATH"      # syncline and synclined
  syncline topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
  seq 1 5 | syncline produce orders --acks all
  syncline consume orders --from-beginning --max-messages 5
  syncline topic describe orders        # leaders, epochs, ISR, high watermarks
  syncline cluster describe             # brokers, fenced or not, the controller

The CLI bootstraps from 127.0.0.1:9092 (broker 1); to survive broker 1 being
down, use --bootstrap-server $bootstrap
(or export SYNCLINE_BOOTSTRAP_SERVER=$bootstrap).

  scripts/cluster.sh status             # PIDs, liveness, roles
  scripts/cluster.sh logs [N]           # tail the logs ($LOG_DIR/broker-N.log)
  scripts/cluster.sh down               # stop the cluster
EOF
}

cmd_up() {
    build
    if [ ! -x "$BIN_DIR/synclined" ] || [ ! -x "$BIN_DIR/syncline" ]; then
        die "$BIN_DIR/synclined or $BIN_DIR/syncline is missing: build them with cargo build --release --bins"
    fi
    mkdir -p "$LOG_DIR" "$RUN_DIR"
    trap on_up_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local n pid
    for n in "${BROKERS[@]}"; do
        broker_pid "$n" >/dev/null || check_ports_free "$n"
    done
    for n in "${BROKERS[@]}"; do
        if pid=$(broker_pid "$n"); then
            echo "broker $n is already running (pid $pid): left alone"
            if [ "$BIN_DIR/synclined" -nt "$(pid_file "$n")" ]; then
                echo "  note: $BIN_DIR/synclined was rebuilt after broker $n started; run \`scripts/cluster.sh down\` then \`up\` to run the new build"
            fi
        else
            rm -f "$(pid_file "$n")"
            start_broker "$n"
        fi
    done
    wait_ready
    UP_DONE=1
    trap - EXIT INT TERM
    print_usage_hint
}

# ---------------------------------------------------------------- down

# Stops brokers (SIGTERM, SIGKILL after STOP_GRACE_S), in parallel.
stop_brokers() {
    local n pid pids=() ids=()
    for n in "$@"; do
        if pid=$(broker_pid "$n"); then
            # A paused (SIGSTOPped) process would not see SIGTERM until resumed.
            kill -CONT "$pid" 2>/dev/null || true
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            ids+=("$n")
        else
            [ -f "$(pid_file "$n")" ] && echo "broker $n was not running (stale pid file removed)"
            rm -f "$(pid_file "$n")"
        fi
    done
    [ "${#pids[@]}" -gt 0 ] || return 0
    echo "sent SIGTERM to broker(s) ${ids[*]} (pid ${pids[*]}); waiting up to ${STOP_GRACE_S} s"
    local deadline=$((SECONDS + STOP_GRACE_S)) i alive
    while :; do
        alive=0
        for i in "${!pids[@]}"; do
            kill -0 "${pids[$i]}" 2>/dev/null && [ "$(process_state "${pids[$i]}")" != zombie ] && alive=1
        done
        [ "$alive" -eq 1 ] || break
        if [ "$SECONDS" -ge "$deadline" ]; then
            for i in "${!pids[@]}"; do
                if kill -0 "${pids[$i]}" 2>/dev/null; then
                    echo "broker ${ids[$i]} (pid ${pids[$i]}) did not stop within ${STOP_GRACE_S} s: SIGKILL"
                    kill -KILL "${pids[$i]}" 2>/dev/null || true
                fi
            done
            # SIGKILL cannot be caught; the process is gone once the kernel reaps it.
            local kill_deadline=$((SECONDS + 10))
            for i in "${!pids[@]}"; do
                while kill -0 "${pids[$i]}" 2>/dev/null && [ "$(process_state "${pids[$i]}")" != zombie ]; do
                    [ "$SECONDS" -lt "$kill_deadline" ] ||
                        die "broker ${ids[$i]} (pid ${pids[$i]}) survived SIGKILL for 10 s"
                    sleep 0.1
                done
            done
            break
        fi
        sleep 0.1
    done
    for i in "${!ids[@]}"; do
        rm -f "$(pid_file "${ids[$i]}")"
        echo "broker ${ids[$i]} stopped"
    done
}

cmd_down() {
    local n plain=() controllers=()
    for n in "${BROKERS[@]}"; do
        if is_controller_in_config "$n"; then controllers+=("$n"); else plain+=("$n"); fi
    done
    # The controller goes last: the others' controlled shutdown needs it.
    stop_brokers "${plain[@]}"
    stop_brokers "${controllers[@]}"
    for n in "${BROKERS[@]}"; do
        local a
        a=$(client_address "$n")
        if port_answers "$a"; then
            echo "cluster.sh: warning: something still listens on $a (broker $n's port) that this script did not start" >&2
        fi
    done
    echo "cluster down (data kept in data/; remove it for an empty cluster next time)"
}

# ---------------------------------------------------------------- status

cmd_status() {
    local n pid state view="" controller="" unfenced="" all_ok=1
    for n in "${BROKERS[@]}"; do
        if broker_pid "$n" >/dev/null &&
            view=$(syncline_cli --bootstrap-server "$(client_address "$n")" cluster describe --json 2>/dev/null); then
            controller=$(echo "$view" | controller_id)
            unfenced=$(echo "$view" | unfenced_ids)
            break
        fi
        view=""
    done
    printf '%-7s %-8s %-8s %-8s %-16s %-16s %-10s %s\n' \
        BROKER PID PROCESS ANSWERS ADDRESS METRICS CLUSTER ROLE
    for n in "${BROKERS[@]}"; do
        local address answers cluster role
        address=$(client_address "$n")
        if pid=$(broker_pid "$n"); then
            state=$(process_state "$pid")
        else
            pid="-"
            state="stopped"
        fi
        answers=no
        if [ "$state" = running ] && syncline_cli --bootstrap-server "$address" cluster describe >/dev/null 2>&1; then
            answers=yes
        fi
        if [ -z "$view" ]; then
            cluster="?"
        elif [[ " $unfenced " == *" $n "* ]]; then
            cluster=alive
        else
            cluster=fenced
        fi
        if [ -n "$controller" ]; then
            if [ "$controller" = "$n" ]; then role="controller,broker"; else role=broker; fi
        else
            role="$(config_value "$n" process_roles) (from config)"
        fi
        [ "$state" = running ] && [ "$answers" = yes ] && [ "$cluster" = alive ] || all_ok=0
        printf '%-7s %-8s %-8s %-8s %-16s %-16s %-10s %s\n' \
            "$n" "$pid" "$state" "$answers" "$address" "$(metrics_address "$n")" "$cluster" "$role"
    done
    if [ -z "$view" ]; then
        echo "No broker answers: start the cluster with scripts/cluster.sh up"
    fi
    # Non-zero unless every broker runs, answers and is alive in the cluster.
    [ "$all_ok" -eq 1 ]
}

# ---------------------------------------------------------------- logs

cmd_logs() {
    local files=() n
    if [ $# -gt 0 ]; then
        n=$1
        [[ " ${BROKERS[*]} " == *" $n "* ]] || die "no broker $n: choose one of ${BROKERS[*]}"
        files=("$(log_file "$n")")
    else
        for n in "${BROKERS[@]}"; do
            [ -f "$(log_file "$n")" ] && files+=("$(log_file "$n")")
        done
    fi
    if [ "${#files[@]}" -eq 0 ] || [ ! -f "${files[0]}" ]; then
        die "no log yet in $LOG_DIR/: start the cluster with scripts/cluster.sh up"
    fi
    if [ -t 1 ]; then
        exec tail -n 40 -F "${files[@]}"
    else
        tail -n 40 "${files[@]}"
    fi
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
logs)
    shift
    cmd_logs "$@"
    ;;
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
