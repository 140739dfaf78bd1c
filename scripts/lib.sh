# shellcheck shell=bash
# Helpers shared by the scripts in scripts/; sourced, never run:
#
#   . "$(dirname "$0")/lib.sh"
#
# Cluster state is read through the CLI (`syncline cluster wait-ready`,
# `--field` reads of `topic describe --json` and `cluster describe --json`),
# never by parsing the tables meant for people. Settings a script may give
# before calling these: SYNCLINE (the syncline binary, default: syncline on
# PATH), SYNCLINE_ARGS (an array of global options put before every command
# of cli() and wait_cluster_ready, e.g. (--command-config FILE) for a secure
# cluster; default none), CLI_TIMEOUT_S (bound on one CLI call, default 10),
# RED and RESET (colours of error messages, default none).

# The script's name, for messages.
PROG=$(basename "$0")

# Global options of every syncline call made here (see above).
SYNCLINE_ARGS=()

die() {
    echo "${RED:-}$PROG: error: $*${RESET:-}" >&2
    exit 1
}

# Prints the comment block at the top of script $1 (from line 2 to the
# `set -euo pipefail` line), without the comment marks.
usage_from_header() {
    sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'
}

# help_with_binary SCRIPT BINARY BUILD: the script's header, then the options
# of the release binary it runs (or the command that builds it).
help_with_binary() {
    usage_from_header "$1"
    echo
    echo "$2's options:"
    if [ -x "target/release/$2" ]; then
        "target/release/$2" --help
    else
        echo "  (build first: $3)"
    fi
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

# cpu_ticks PID...: the processes' CPU time (utime + stime, clock ticks) summed.
cpu_ticks() {
    local pid total=0 fields
    for pid in "$@"; do
        # Fields after the command name: utime and stime are the 12th and 13th.
        fields=$(sed 's/^.*) //' "/proc/$pid/stat")
        total=$((total + $(echo "$fields" | awk '{print $12 + $13}')))
    done
    echo "$total"
}

# partition_lines CLI TOPIC: TOPIC's partitions as "partition leader isr_size"
# lines, CLI being a command (or shell function) that runs syncline against the
# cluster.
partition_lines() {
    "$1" topic describe "$2" --json 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["partitions"]:
    print(p["partition"], p["leader"], len(p["isr"]))'
}

# all_led_in_sync CLI TOPIC PARTITIONS RF: true when every one of TOPIC's
# PARTITIONS partitions has a leader and RF replicas in sync.
all_led_in_sync() {
    local n
    n=$(partition_lines "$1" "$2" | awk -v rf="$4" '$2 >= 0 && $3 == rf' | wc -l) || return 1
    [ "$n" -eq "$3" ]
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
cli() { timeout "${CLI_TIMEOUT_S:-10}" "${SYNCLINE:-syncline}" "${SYNCLINE_ARGS[@]}" "$@"; }

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
    timeout --foreground "$((timeout_s + 15))" "${SYNCLINE:-syncline}" "${SYNCLINE_ARGS[@]}" \
        --bootstrap-server "$bootstrap" cluster wait-ready \
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

# start_bench_cluster DIR BIN RUST_LOG [TOML]: starts three brokers of BIN
# (each a controller voter too, as the shipped config/) on free loopback ports,
# with data and logs under DIR and the TOML lines in every config; waits for
# nothing (wait_cluster_ready does). Sets bootstrap, kafka_bootstrap,
# metrics_addrs (comma-separated, in broker order) and appends the brokers'
# pids to pids.
start_bench_cluster() {
    local dir=$1 bin=$2 log=$3 extra=${4:-} id ports voters
    mkdir -p "$dir"
    mapfile -t ports < <(free_ports 9)
    [ "${#ports[@]}" -eq 9 ] || die "no 9 free ports found on 127.0.0.1"
    bootstrap="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
    metrics_addrs="127.0.0.1:${ports[3]},127.0.0.1:${ports[4]},127.0.0.1:${ports[5]}"
    kafka_bootstrap="127.0.0.1:${ports[6]},127.0.0.1:${ports[7]},127.0.0.1:${ports[8]}"
    voters="1@127.0.0.1:${ports[0]},2@127.0.0.1:${ports[1]},3@127.0.0.1:${ports[2]}"
    for id in 1 2 3; do
        cat >"$dir/broker-$id.toml" <<EOF
node_id = $id
listeners = "PLAINTEXT://127.0.0.1:${ports[$((id - 1))]}"
log_dirs = "$dir/data-$id"
process_roles = "broker,controller"
controller_quorum_voters = "$voters"
metrics_listen = "127.0.0.1:${ports[$((id + 2))]}"
kafka_listeners = "127.0.0.1:${ports[$((id + 5))]}"
$extra
EOF
        RUST_LOG="$log" "$bin/synclined" --config "$dir/broker-$id.toml" >"$dir/broker-$id.log" 2>&1 &
        pids+=("$!")
    done
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

# ---------------------------------------------------------------- security

# A secure cluster's files (scripts/cluster.sh up --secure, scripts/compose.sh
# up --secure, scripts/demo.sh --secure, scripts/bench.sh): a local CA and
# certificates (`syncline cert`), a random password, the SCRAM verifiers of a
# new cluster's first user (`syncline user verifier`), the client settings.
# Each helper makes its file only when it is missing, so running a script
# again keeps the cluster's CA and passwords.

# The user every secure cluster of the scripts starts with, a super user.
SECURE_ADMIN="admin"
# The mechanism the scripts' client settings use (the brokers accept
# SCRAM-SHA-256 and PLAIN too).
SECURE_MECHANISM=SCRAM-SHA-512

# require_security_cli: fails unless the syncline binary has the commands a
# secure cluster is made with.
require_security_cli() {
    local c
    for c in cert user acl; do
        "${SYNCLINE:-syncline}" "$c" --help >/dev/null 2>&1 ||
            die "${SYNCLINE:-syncline} has no \`$c\` command (needed for a secure cluster): rebuild it with cargo build --release ${SHIPPED_PACKAGES[*]}"
    done
}

# ensure_ca DIR: a CA in DIR (ca.pem, and ca.key readable by its owner only),
# made with `syncline cert create-ca` when DIR has none.
ensure_ca() {
    local dir=$1
    [ -f "$dir/ca.pem" ] && [ -f "$dir/ca.key" ] && return 0
    if [ -f "$dir/ca.pem" ] || [ -f "$dir/ca.key" ]; then
        die "$dir holds only one of ca.pem and ca.key: remove $dir to make a new CA (its certificates are made again with it; clients must then trust the new ca.pem)"
    fi
    mkdir -p "$dir"
    "${SYNCLINE:-syncline}" cert create-ca --dir "$dir" >/dev/null ||
        die "\`syncline cert create-ca --dir $dir\` failed (its message is above)"
}

# ensure_cert CA_DIR NAME OUT_DIR HOST...: OUT_DIR/NAME.pem and NAME.key, a
# certificate with CN=NAME and the HOSTs (DNS names, IP addresses) as its
# subject alternative names, signed by the CA in CA_DIR; made again when
# missing or older than the CA.
ensure_cert() {
    local ca=$1 name=$2 out=$3 args=() h
    shift 3
    if [ -f "$out/$name.pem" ] && [ -f "$out/$name.key" ] && ! [ "$ca/ca.pem" -nt "$out/$name.pem" ]; then
        return 0
    fi
    rm -f "$out/$name.pem" "$out/$name.key"
    for h in "$@"; do args+=(--host "$h"); done
    "${SYNCLINE:-syncline}" cert create --ca-dir "$ca" --name "$name" "${args[@]}" --out-dir "$out" >/dev/null ||
        die "\`syncline cert create --ca-dir $ca --name $name ${args[*]} --out-dir $out\` failed (its message is above)"
}

# ensure_password FILE: a random password (18 bytes of /dev/urandom in base64:
# 24 characters) in FILE, readable by its owner only; kept when FILE exists.
ensure_password() {
    [ -s "$1" ] && return 0
    (
        umask 077
        head -c 18 /dev/urandom | base64 | tr -d '\n' >"$1.tmp"
        mv "$1.tmp" "$1"
    )
}

# ensure_scram_bootstrap FILE USER PASSWORD_FILE: FILE, a broker's
# scram_bootstrap_file: USER's SCRAM-SHA-256 and SCRAM-SHA-512 verifiers (salted
# hashes, not the password), which the controller of a new cluster turns into
# the cluster's first credentials. Made again when older than PASSWORD_FILE.
ensure_scram_bootstrap() {
    local file=$1 user=$2 password=$3 m
    [ -s "$file" ] && ! [ "$password" -nt "$file" ] && return 0
    {
        echo "# SCRAM credentials a new cluster starts with (scram_bootstrap_file): applied"
        echo "# once, while the cluster's metadata has no user yet. Made by scripts/$PROG."
        for m in SCRAM-SHA-256 SCRAM-SHA-512; do
            "${SYNCLINE:-syncline}" user verifier "$user" --mechanism "$m" --password-file "$password" ||
                die "\`syncline user verifier $user --mechanism $m --password-file $password\` failed (its message is above)"
        done
    } >"$file.tmp"
    mv "$file.tmp" "$file"
}

# abs_path PATH: PATH, absolute (relative to the working directory).
abs_path() {
    case "$1" in
    /*) echo "$1" ;;
    *) echo "$PWD/$1" ;;
    esac
}

# write_client_properties FILE USER PASSWORD_FILE CA_FILE: the Kafka client
# settings (`--command-config FILE`) of USER over SASL_SSL, readable by its
# owner only (it holds the password). Paths in it are absolute.
write_client_properties() {
    local file user=$2 password ca
    file=$(abs_path "$1")
    password=$(cat "$3")
    ca=$(abs_path "$4")
    (
        umask 077
        cat >"$file.tmp" <<EOF
# Client settings of $user (Kafka's client property names), made by scripts/$PROG:
#   syncline --command-config $file ...
security.protocol=SASL_SSL
sasl.mechanism=$SECURE_MECHANISM
sasl.username=$user
sasl.password=$password
ssl.ca.location=$ca
EOF
        mv "$file.tmp" "$file"
    )
}

# secure_broker_keys MAP TLS_DIR NAME BOOTSTRAP_FILE: the TOML keys that make
# a broker secure, for the end of its config: each listener's security
# protocol (MAP, as listener_security_protocol_map), its certificate
# TLS_DIR/NAME.pem and key, the CA TLS_DIR/ca.pem, ACLs on with $SECURE_ADMIN as
# the super user, and the first users (BOOTSTRAP_FILE).
secure_broker_keys() {
    cat <<EOF

# ---- security (added by scripts/$PROG) ------------------------------------
# Each listener's protocol: SASL_SSL (TLS, then a SCRAM or PLAIN login) for
# clients; SSL on the inter-broker listener, where inter_broker_ssl_client_auth
# (default required) makes it mutual TLS (the brokers also log in to each
# other as broker-N with SCRAM, as on any listener).
listener_security_protocol_map = "$1"
ssl_certificate_location = "$2/$3.pem"
ssl_key_location = "$2/$3.key"
ssl_ca_location = "$2/ca.pem"
# Clients of the other listeners need no certificate of their own.
ssl_client_auth = "none"
# ACLs decide what each user may do; $SECURE_ADMIN may do everything.
authorizer_enable = true
super_users = "User:$SECURE_ADMIN"
allow_everyone_if_no_acl_found = false
# The users a new cluster starts with (SCRAM verifiers): $SECURE_ADMIN.
scram_bootstrap_file = "$4"
EOF
}

# ---------------------------------------------------------------- Kafka's clients

# ensure_kafka_clients: Kafka's Python clients (confluent-kafka bundles
# librdkafka; kafka-python is pure Python) in a venv of their own,
# KAFKA_VENV=target/kafka-clients (relative to the working directory: the
# repository root), installed when missing (python3-venv from apt first if
# python3 cannot make a venv). Sets KAFKA_VENV and KAFKA_PY_PACKAGES.
# apt_install WHY PKG...: installs the Debian packages among PKG... that are
# not installed (as root, or with sudo), saying WHY; dies naming them when
# there is no apt-get.
apt_install() {
    local why=$1 missing=() pkg
    shift
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages (${missing[*]}, $why) and no apt-get to install them"
    local sudo_if_needed=""
    [ "$(id -u)" = 0 ] || sudo_if_needed="sudo"
    echo "==> installing ${missing[*]} ($why)"
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq "${missing[@]}" >/dev/null
}

# ensure_fault_tools: the packages the fault harness's root-only faults use
# (nftables for network faults; e2fsprogs and util-linux for power loss on
# loop devices; python3 for the filesystem shutdown ioctl), when root.
ensure_fault_tools() {
    [ "$(id -u)" = 0 ] || return 0
    apt_install "the fault harness's network and power faults" \
        nftables e2fsprogs util-linux mount python3
}

ensure_kafka_clients() {
    KAFKA_VENV=target/kafka-clients
    KAFKA_PY_PACKAGES="confluent-kafka==2.16.1 kafka-python==3.0.12"
    if ! "$KAFKA_VENV/bin/python" -c "import confluent_kafka, kafka" >/dev/null 2>&1; then
        echo "==> installing Kafka's Python clients into $KAFKA_VENV ($KAFKA_PY_PACKAGES)"
        if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
            apt_install "Kafka's Python clients' venv" python3 python3-venv
        fi
        rm -rf "$KAFKA_VENV"
        python3 -m venv "$KAFKA_VENV"
        # shellcheck disable=SC2086 # a list of package==version words
        "$KAFKA_VENV/bin/pip" install -q $KAFKA_PY_PACKAGES
    fi
}

# ---------------------------------------------------------------- build, Docker

# The binaries users run, and their packages. They are built on their own:
# cargo compiles a package once per build, with the features of every package
# in that build, so a build of the whole workspace gives synclined the
# test-only features that the test crates turn on (crates/broker/Cargo.toml).
SHIPPED_PACKAGES=(-p syncline-broker -p syncline-cli)

# build_shipped PROFILE [-p PACKAGE...]: builds synclined and syncline (and
# the other packages given) into target/PROFILE (release or debug), unless
# SYNCLINE_NO_BUILD=1, then checks that synclined is a shipped build.
build_shipped() {
    local profile=$1 cmd=(cargo build)
    shift
    [ "$profile" = release ] && cmd+=(--release)
    cmd+=("${SHIPPED_PACKAGES[@]}" "$@")
    if [ "${SYNCLINE_NO_BUILD:-0}" = 1 ]; then
        echo "==> SYNCLINE_NO_BUILD=1: using target/$profile as it is"
    else
        command -v cargo >/dev/null ||
            die "cargo not found: install the Rust toolchain (rustup) and run this again"
        echo "==> ${cmd[*]}"
        "${cmd[@]}"
    fi
    check_shipped "target/$profile"
}

# check_shipped DIR: DIR/synclined and DIR/syncline exist, and synclined
# holds no test-only feature (its --version names them: "(test-only features:
# none)" in a shipped build).
check_shipped() {
    local bin=$1/synclined version release="" b
    [ "${1##*/}" = release ] && release=" --release"
    for b in synclined syncline; do
        [ -x "$1/$b" ] || die "$1/$b is missing: build it with cargo build$release ${SHIPPED_PACKAGES[*]}"
    done
    version=$("$bin" --version) || die "$bin --version failed"
    case "$version" in
    *"(test-only features: none)") echo "==> $bin is a shipped build: $version" ;;
    *) die "$bin is not a shipped build: $version (a build of the whole workspace compiles the test crates' features into it): build it with cargo build$release ${SHIPPED_PACKAGES[*]}" ;;
    esac
}

# The compose project of the secure cluster of compose project $1
# (scripts/compose.sh up --secure): its containers, network and volumes are its
# own.
secure_compose_project() { echo "$1-secure"; }

# find_compose PROJECT [FILE...]: sets COMPOSE to `docker compose` (v2) or
# `docker-compose` (v1), with this repository's docker-compose.yml (then the
# FILEs on top, e.g. docker-compose.secure.yml) and PROJECT.
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
    COMPOSE+=(-f docker-compose.yml)
    local f
    for f in "${@:2}"; do COMPOSE+=(-f "$f"); done
    COMPOSE+=(-p "$1")
}
