# shellcheck shell=bash
# Helpers shared by the scripts in scripts/; sourced, never run:
#
#   . "$(dirname "$0")/lib.sh"
#
# Cluster state is read through the CLI (`syncline cluster wait-ready`,
# `--field` reads of `topic describe --json` and `cluster describe --json`),
# never by parsing the tables meant for people. Settings a script may give
# before calling these: SYNCLINE (the syncline binary, default: syncline on
# PATH), CLI_TIMEOUT_S (bound on one CLI call, default 10), RED and RESET
# (colours of error messages, default none).

# The script's name, for messages.
PROG=$(basename "$0")

die() {
    echo "${RED:-}$PROG: error: $*${RESET:-}" >&2
    exit 1
}

# Prints the comment block at the top of script $1 (from line 2 to the
# `set -euo pipefail` line), without the comment marks.
usage_from_header() {
    sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'
}

# ---------------------------------------------------------------- processes

# True while process $1 exists and is not a zombie.
is_alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ "$(process_state "$1")" != zombie ]
}

# running | paused | zombie (from /proc where it exists, else running).
process_state() {
    local state=""
    if [ -r "/proc/$1/stat" ]; then
        state=$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || state=""
    fi
    case "$state" in
    T | t) echo paused ;;
    Z) echo zombie ;;
    *) echo running ;;
    esac
}

# wait_gone PID [TIMEOUT_S]: waits (default 10 s) until process PID has
# exited; returns 1 if it is still alive then.
wait_gone() {
    local deadline=$((SECONDS + ${2:-10}))
    while is_alive "$1"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# wait_until TIMEOUT_S COMMAND...: runs COMMAND every 0.2 s until it succeeds
# (returns 0) or TIMEOUT_S seconds have passed (returns 1).
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# ---------------------------------------------------------------- network

# True when something accepts TCP connections on HOST:PORT.
port_answers() {
    (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

# free_ports N: N distinct ports nobody listens on, one per line, below the
# usual ephemeral range (32768-60999) so that no client's outgoing connection
# can be holding one when a broker binds it.
free_ports() {
    local n=$1 p tries=0 found=" "
    while [ "$n" -gt 0 ]; do
        p=$((20000 + RANDOM % 12000))
        tries=$((tries + 1))
        [ "$tries" -lt 500 ] || die "found no free port between 20000 and 31999"
        [[ "$found" == *" $p "* ]] && continue
        port_answers "127.0.0.1:$p" && continue
        found+="$p "
        echo "$p"
        n=$((n - 1))
    done
}

# http_get URL: the body of GET http://HOST:PORT/PATH, with curl where it
# exists, else over bash's /dev/tcp.
http_get() {
    if command -v curl >/dev/null; then
        curl -sf --max-time 5 "$1"
        return
    fi
    local url=${1#http://} hostport path
    hostport=${url%%/*}
    path=/${url#*/}
    # shellcheck disable=SC2016 # the inner script expands its own arguments
    timeout 5 bash -c '
        exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
        printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$1" >&3
        sed "1,/^\r\{0,1\}$/d" <&3' _ "$hostport" "$path"
}

# metric HOST:PORT NAME: the value of the unlabelled Prometheus metric NAME on
# a broker's metrics endpoint, as an integer (empty if unreadable).
metric() {
    http_get "http://$1/metrics" 2>/dev/null | tr -d '\r' |
        awk -v m="$2" '$1 == m && !found { print int($2); found = 1 }'
}

# ---------------------------------------------------------------- config files

# toml_value FILE KEY: the quoted string value of KEY in a TOML file (empty if
# absent).
toml_value() {
    sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\"\(.*\)\".*/\1/p" "$1" | head -n 1
}

# ---------------------------------------------------------------- the CLI

# syncline, bounded in time: one call never hangs a script (e.g. on a broker
# paused with SIGSTOP).
cli() { timeout "${CLI_TIMEOUT_S:-10}" "${SYNCLINE:-syncline}" "$@"; }

# partition_fields TOPIC PARTITION FIELD...: the partition's FIELDs (keys of
# `topic describe --json`: leader, leader_epoch, replicas, isr,
# high_watermark, log_end_offset, ...) on one line; empty if the CLI fails.
partition_fields() {
    local topic=$1 partition=$2 args=() f
    shift 2
    for f in "$@"; do args+=(--field "$f"); done
    cli topic describe "$topic" --partition "$partition" "${args[@]}" 2>/dev/null || true
}

# True when the comma-separated list $1 contains $2.
list_has() { [[ ",$1," == *",$2,"* ]]; }

# Number of items in the comma-separated list $1 (`none` is empty).
list_len() {
    if [ -z "$1" ] || [ "$1" = none ]; then echo 0; else echo "$1" | tr ',' '\n' | wc -l | tr -d ' '; fi
}

# wait_cluster_ready TIMEOUT_S BROKERS BOOTSTRAP [CHECK]: waits until BROKERS
# brokers are registered, unfenced and answer Metadata (`syncline cluster
# wait-ready`, in the background). CHECK, a command run every 0.2 s meanwhile,
# stops the wait when it fails (e.g. a broker process has exited): returns 2.
# On timeout returns 1 with NOT_READY_BROKER (the id of the broker the CLI
# blames, or empty) and NOT_READY_REASON (its message) set. A script that may be
# interrupted meanwhile calls stop_wait_ready from its exit trap.
WAIT_READY_PID=""
WAIT_READY_DIR=""
wait_cluster_ready() {
    local timeout_s=$1 brokers=$2 bootstrap=$3 check=${4:-true} out pid status=0
    out=$(mktemp -d "${TMPDIR:-/tmp}/syncline-ready.XXXXXX")
    WAIT_READY_DIR=$out
    # Not through cli(): $! must be timeout's own pid (it passes SIGTERM on).
    # --foreground keeps it in the script's process group, so Ctrl-C reaches it.
    timeout --foreground "$((timeout_s + 15))" "${SYNCLINE:-syncline}" --bootstrap-server "$bootstrap" cluster wait-ready \
        --brokers "$brokers" --timeout-ms "$((timeout_s * 1000))" >"$out/stdout" 2>"$out/stderr" &
    pid=$!
    WAIT_READY_PID=$pid
    while kill -0 "$pid" 2>/dev/null; do
        if ! $check; then
            stop_wait_ready
            return 2
        fi
        sleep 0.2
    done
    WAIT_READY_PID=""
    wait "$pid" || status=$?
    # shellcheck disable=SC2034 # for the caller
    NOT_READY_BROKER=""
    # shellcheck disable=SC2034 # for the caller
    NOT_READY_REASON=""
    if [ "$status" -ne 0 ]; then
        # The CLI's own wording, less what a script's user cannot act on (the
        # script states its wait and how to change it).
        # shellcheck disable=SC2034 # for the caller
        NOT_READY_REASON=$(sed -e 's/^error: //' -e 's/^not ready after [0-9]* ms: //' \
            -e 's/; raise --timeout-ms.*$//' "$out/stderr")
        [ -n "$NOT_READY_REASON" ] || NOT_READY_REASON="syncline cluster wait-ready exited with status $status"
        # The id is the CLI's stdout only when it failed.
        # shellcheck disable=SC2034 # for the caller
        NOT_READY_BROKER=$(head -n 1 "$out/stdout")
    fi
    rm -rf "$out"
    WAIT_READY_DIR=""
    [ "$status" -eq 0 ] || return 1
}

# Stops a wait_cluster_ready still running (interrupted script) and removes its
# files.
stop_wait_ready() {
    if [ -n "$WAIT_READY_PID" ]; then
        kill "$WAIT_READY_PID" 2>/dev/null || true
        wait "$WAIT_READY_PID" 2>/dev/null || true
        WAIT_READY_PID=""
    fi
    if [ -n "$WAIT_READY_DIR" ]; then
        rm -rf "$WAIT_READY_DIR"
        WAIT_READY_DIR=""
    fi
    return 0
}

# ---------------------------------------------------------------- Kafka's clients

# ensure_kafka_clients: Kafka's Python clients (confluent-kafka bundles
# librdkafka; kafka-python is pure Python) in a venv of their own,
# KAFKA_VENV=target/kafka-clients (relative to the working directory: the
# repository root), installed when missing (python3-venv from apt first if
# python3 cannot make a venv). Sets KAFKA_VENV and KAFKA_PY_PACKAGES.
ensure_kafka_clients() {
    KAFKA_VENV=target/kafka-clients
    KAFKA_PY_PACKAGES="confluent-kafka==2.16.1 kafka-python==3.0.12"
    if ! "$KAFKA_VENV/bin/python" -c "import confluent_kafka, kafka" >/dev/null 2>&1; then
        echo "==> installing Kafka's Python clients into $KAFKA_VENV ($KAFKA_PY_PACKAGES)"
        if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
            local sudo_if_needed=""
            [ "$(id -u)" = 0 ] || sudo_if_needed="sudo"
            $sudo_if_needed apt-get update -qq
            DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq python3 python3-venv >/dev/null
        fi
        rm -rf "$KAFKA_VENV"
        python3 -m venv "$KAFKA_VENV"
        # shellcheck disable=SC2086 # a list of package==version words
        "$KAFKA_VENV/bin/pip" install -q $KAFKA_PY_PACKAGES
    fi
}

# ---------------------------------------------------------------- build, Docker

# build_bins PROFILE: cargo build [--release] --bins (PROFILE release or
# debug), unless SYNCLINE_NO_BUILD=1.
build_bins() {
    local cmd=(cargo build --bins)
    [ "$1" = release ] && cmd=(cargo build --release --bins)
    if [ "${SYNCLINE_NO_BUILD:-0}" = 1 ]; then
        echo "==> SYNCLINE_NO_BUILD=1: using target/$1 as it is"
        return
    fi
    command -v cargo >/dev/null ||
        die "cargo not found: install the Rust toolchain (rustup) and run this again"
    echo "==> ${cmd[*]}"
    "${cmd[@]}"
}

# find_compose PROJECT: sets COMPOSE to `docker compose` (v2) or
# `docker-compose` (v1), with this repository's docker-compose.yml and PROJECT.
find_compose() {
    command -v docker >/dev/null ||
        die "docker not found: install Docker Engine and the Compose tool (docker compose or docker-compose)"
    if docker compose version >/dev/null 2>&1; then
        COMPOSE=(docker compose)
    elif command -v docker-compose >/dev/null; then
        COMPOSE=(docker-compose)
    else
        die "neither \`docker compose\` nor \`docker-compose\` is installed: install the Compose tool"
    fi
    COMPOSE+=(-f docker-compose.yml -p "$1")
}
