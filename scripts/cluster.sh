#!/usr/bin/env bash
# The three-node local cluster of config/broker-{1,2,3}.toml, run from the
# repository root (the configs' data paths are relative to it).
#
#   scripts/cluster.sh up          build if needed, start the brokers in the
#                                  background, wait until the cluster is ready
#   scripts/cluster.sh up --secure the same cluster secured: SASL_SSL client
#                                  listeners, mutual TLS between brokers, ACLs,
#                                  a local CA and a super user `admin`; the
#                                  client settings go to data/client.properties
#                                  (syncline --command-config data/client.properties ...)
#   scripts/cluster.sh down        stop them: SIGTERM, then SIGKILL after a grace
#   scripts/cluster.sh status      PID, liveness and role of each broker (exit
#                                  status 1 unless all three are up and alive)
#   scripts/cluster.sh logs [N]    the last lines of every log (or broker N's),
#                                  followed while the output is a terminal
#
# Files: data/broker-N (partition logs; broker 1 also keeps the metadata log
# there), data/credentials/ (each broker's secret and verifier, made by the
# broker on its first start: brokers authenticate each other),
# data/logs/broker-N.log, data/run/broker-N.pid. `up` is idempotent: a
# broker that is already running is left alone. Remove data/ (after `down`) to
# start from an empty cluster.
#
# A secure cluster (`up --secure`) keeps config/broker-N.toml's keys and ports
# and adds, per broker, an INTERNAL listener on its port + 10000
# (127.0.0.1:19092-19094: SSL, mutual TLS; the brokers and the controller
# quorum use it), the CLIENT listener on its port (9092-9094, SASL_SSL) and
# the Kafka listener on its port (29092-29094, SASL_SSL). Its files: the
# configs data/secure/broker-N.toml (made again at every `up --secure`),
# the CA and each broker's certificate and key in data/tls/ (ca.pem, ca.key,
# broker-N.pem, broker-N.key), admin's random password in
# data/secure/admin.password (mode 0600), the first users' SCRAM verifiers in
# data/secure/bootstrap-users (scram_bootstrap_file), and the client settings
# in data/client.properties (mode 0600). `up --secure` again keeps the CA and
# the password; `status`, `logs` and `down` work on either kind of cluster.
# data/ holds one kind: a secure cluster's data/ refuses plain `up` and a
# plaintext one's refuses `up --secure` (remove data/ to change).
#
# Environment: SYNCLINE_UP_TIMEOUT_S (default 60) bounds the wait for the
# cluster to become ready; SYNCLINE_STOP_GRACE_S (default 20) is how long `down`
# waits after SIGTERM before SIGKILL; SYNCLINE_NO_BUILD=1 makes `up` use the
# binaries in target/release as they are; RUST_LOG sets the brokers' log level.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

BROKERS=(1 2 3)
LOG_DIR=data/logs
RUN_DIR=data/run
BIN_DIR=target/release
UP_TIMEOUT_S=${SYNCLINE_UP_TIMEOUT_S:-60}
STOP_GRACE_S=${SYNCLINE_STOP_GRACE_S:-20}
SYNCLINE=$BIN_DIR/syncline
CLI_TIMEOUT_S=5

# Secure (1) or plaintext (0): set from `up`'s flag, else from data/.
SECURE=0
SECURE_DIR=data/secure
TLS_DIR=data/tls
CLIENT_PROPERTIES=data/client.properties
# The INTERNAL listener of a secure broker is on its client port + this.
INTERNAL_PORT_OFFSET=10000

plain_config_file() { echo "config/broker-$1.toml"; }
secure_config_file() { echo "$SECURE_DIR/broker-$1.toml"; }
# The config broker N runs with (a secure one once it has been made).
config_file() {
    if [ "$SECURE" = 1 ] && [ -f "$(secure_config_file "$1")" ]; then
        secure_config_file "$1"
    else
        plain_config_file "$1"
    fi
}
log_file() { echo "$LOG_DIR/broker-$1.log"; }
pid_file() { echo "$RUN_DIR/broker-$1.pid"; }

# The quoted value of `key` in broker N's config.
config_value() { toml_value "$(config_file "$1")" "$2"; }

# The first address in config FILE under key $2 (advertised), else under $3
# (bound), without a Kafka-style NAME:// prefix.
file_first_listener() {
    local v
    v=$(toml_value "$1" "$2")
    [ -n "$v" ] || v=$(toml_value "$1" "$3")
    v=${v%%,*}
    echo "${v#*://}"
}

# Broker N's first address under key $2 (advertised), else under $3 (bound).
first_listener() { file_first_listener "$(config_file "$1")" "$2" "$3"; }

# host:port a client uses for broker N.
client_address() { first_listener "$1" advertised_listeners listeners; }

# host:port of broker N's listener named $2 (empty if it has none).
named_listener() {
    local item
    for item in $(config_value "$1" listeners | tr ',' ' '); do
        [ "${item%%://*}" = "$2" ] && echo "${item#*://}" && return 0
    done
    return 0
}

metrics_address() { config_value "$1" metrics_listen; }

# host:port Kafka's clients use for broker N (its first Kafka listener), if any.
kafka_address() { first_listener "$1" kafka_advertised_listeners kafka_listeners; }

is_controller_in_config() { [[ "$(config_value "$1" process_roles)" == *controller* ]]; }

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

log_tail() {
    local n=$1 file
    file=$(log_file "$n")
    echo "---- last 20 lines of $file ----" >&2
    tail -n 20 "$file" >&2 2>/dev/null || echo "(no log)" >&2
    echo "----" >&2
}

# ---------------------------------------------------------------- secure mode

# What data/ holds: secure (a cluster of `up --secure`), plain (one of `up`),
# or none.
data_mode() {
    if [ -d "$SECURE_DIR" ]; then
        echo secure
        return
    fi
    local n dir
    for n in "${BROKERS[@]}"; do
        dir=$(toml_value "$(plain_config_file "$n")" log_dirs)
        if [ -n "$dir" ] && [ -d "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
            echo plain
            return
        fi
    done
    echo none
}

# Refuses to start a cluster of the other kind on data/.
check_data_mode() {
    local mode
    mode=$(data_mode)
    if [ "$SECURE" = 1 ] && [ "$mode" = plain ]; then
        die "data/ holds a plaintext cluster (made by \`scripts/cluster.sh up\`): a secure one cannot take over its data. Run \`scripts/cluster.sh up\` for it, or \`scripts/cluster.sh down\`, remove data/ (its topics are lost) and run \`scripts/cluster.sh up --secure\`"
    fi
    if [ "$SECURE" = 0 ] && [ "$mode" = secure ]; then
        die "data/ holds a secure cluster (made by \`scripts/cluster.sh up --secure\`, see $SECURE_DIR/): run \`scripts/cluster.sh up --secure\` for it, or \`scripts/cluster.sh down\`, remove data/ (its topics, users and ACLs are lost) and run \`scripts/cluster.sh up\`"
    fi
}

# The secure config of broker N, from config/broker-N.toml: its keys less the
# listeners and the quorum (replaced), then the listeners and the security keys.
write_secure_config() {
    local n=$1 plain host port kafka voters="" v tls out tmp
    plain=$(plain_config_file "$n")
    [ -f "$plain" ] || die "$plain is missing: it is part of the repository; restore it with your version control"
    local address
    address=$(file_first_listener "$plain" advertised_listeners listeners)
    host=${address%:*}
    port=${address##*:}
    kafka=$(file_first_listener "$plain" kafka_advertised_listeners kafka_listeners)
    for v in $(toml_value "$plain" controller_quorum_voters | tr ',' ' '); do
        # id@host:port -> id@host:(port + offset): the voters' INTERNAL listeners.
        voters+="${voters:+,}${v%:*}:$((${v##*:} + INTERNAL_PORT_OFFSET))"
    done
    tls=$PWD/$TLS_DIR
    out=$(secure_config_file "$n")
    tmp=$out.tmp
    {
        cat <<EOF
# Broker $n of the secure local cluster, made by \`scripts/cluster.sh up --secure\`
# from config/broker-$n.toml at every start: change that file, not this one.
# It keeps every key of config/broker-$n.toml but the listeners and the quorum,
# which come at the end with the security keys.

EOF
        sed -E '/^[[:space:]]*(listeners|advertised_listeners|kafka_listeners|kafka_advertised_listeners|inter_broker_listener_name|controller_quorum_voters|listener_security_protocol_map|ssl_[a-z_]+|inter_broker_ssl_client_auth|authorizer_enable|super_users|allow_everyone_if_no_acl_found|scram_bootstrap_file)[[:space:]]*=/d' "$plain"
        cat <<EOF

# ---- listeners (added by scripts/cluster.sh up --secure) --------------------
# CLIENT: syncline's protocol for clients (SASL_SSL); INTERNAL (port + $INTERNAL_PORT_OFFSET): the
# other brokers and the controller quorum (SSL, mutual TLS).
listeners = "CLIENT://$host:$port,INTERNAL://$host:$((port + INTERNAL_PORT_OFFSET))"
inter_broker_listener_name = "INTERNAL"
controller_quorum_voters = "$voters"
EOF
        [ -z "$kafka" ] || printf '# Kafka'"'"'s protocol for Kafka'"'"'s clients (SASL_SSL).\nkafka_listeners = "KAFKA://%s"\n' "$kafka"
        secure_broker_keys "CLIENT:SASL_SSL,INTERNAL:SSL${kafka:+,KAFKA:SASL_SSL}" "$tls" "broker-$n" "$PWD/$SECURE_DIR/bootstrap-users"
    } >"$tmp"
    if [ -f "$out" ] && cmp -s "$tmp" "$out"; then
        rm -f "$tmp"
        return
    fi
    mv "$tmp" "$out"
    if broker_pid "$n" >/dev/null; then
        echo "  note: $out changed while broker $n runs; run \`scripts/cluster.sh down\` then \`up --secure\` to apply it"
    fi
}

# Everything a secure cluster needs in data/, kept where it exists: the CA and
# the brokers' certificates, admin's password, the first users' verifiers,
# the client settings, the configs.
prepare_secure() {
    require_security_cli
    local n dir
    mkdir -p "$SECURE_DIR" "$TLS_DIR"
    chmod 700 "$SECURE_DIR" "$TLS_DIR"
    if [ ! -s "$SECURE_DIR/admin.password" ]; then
        # The metadata of a cluster that bootstrapped admin with the lost
        # password would refuse any new one.
        for n in "${BROKERS[@]}"; do
            dir=$(toml_value "$(plain_config_file "$n")" log_dirs)
            if [ -n "$dir" ] && [ -d "$dir/__cluster_metadata" ]; then
                die "$SECURE_DIR/admin.password is missing, but the cluster in $dir already made admin's credential with it: remove data/ (after scripts/cluster.sh down) to start an empty secure cluster"
            fi
        done
    fi
    echo "==> secure cluster files: CA and certificates in $TLS_DIR/, admin's password and the configs in $SECURE_DIR/"
    ensure_ca "$TLS_DIR"
    for n in "${BROKERS[@]}"; do
        local hosts=(localhost 127.0.0.1) host
        host=$(file_first_listener "$(plain_config_file "$n")" advertised_listeners listeners)
        host=${host%:*}
        [[ " ${hosts[*]} " == *" $host "* ]] || hosts+=("$host")
        ensure_cert "$TLS_DIR" "broker-$n" "$TLS_DIR" "${hosts[@]}"
    done
    ensure_password "$SECURE_DIR/admin.password"
    ensure_scram_bootstrap "$SECURE_DIR/bootstrap-users" "$SECURE_ADMIN" "$SECURE_DIR/admin.password"
    write_client_properties "$CLIENT_PROPERTIES" "$SECURE_ADMIN" "$SECURE_DIR/admin.password" "$TLS_DIR/ca.pem"
    for n in "${BROKERS[@]}"; do write_secure_config "$n"; done
    SYNCLINE_ARGS=(--command-config "$CLIENT_PROPERTIES")
}

# ---------------------------------------------------------------- up

# Brokers this invocation started, stopped again if `up` does not finish.
STARTED=()
UP_DONE=0

on_up_exit() {
    local status=$?
    stop_wait_ready
    if [ "$UP_DONE" -eq 0 ] && [ "${#STARTED[@]}" -gt 0 ]; then
        echo "cluster.sh: stopping the brokers this command started (${STARTED[*]}); their logs stay in $LOG_DIR/" >&2
        stop_brokers "${STARTED[@]}" >&2 || true
    fi
    exit "$status"
}

# Refuses to start broker N onto a port something else already listens on.
check_ports_free() {
    local n=$1 a
    for a in "$(client_address "$n")" "$(named_listener "$n" INTERNAL)" "$(metrics_address "$n")" "$(kafka_address "$n")"; do
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
    [ -f "$config" ] || die "$config is missing: $([ "$SECURE" = 1 ] && echo "run scripts/cluster.sh up --secure, which makes it" || echo "it is part of the repository; restore it with your version control")"
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

# False, naming the broker and showing the end of its log, if one of those
# this script runs has exited.
brokers_alive() {
    local n
    for n in "${BROKERS[@]}"; do
        if ! broker_pid "$n" >/dev/null; then
            echo "cluster.sh: error: broker $n exited during start-up" >&2
            log_tail "$n"
            return 1
        fi
    done
}

wait_ready() {
    local addresses=() n blamed status=0
    for n in "${BROKERS[@]}"; do addresses+=("$(client_address "$n")"); done
    echo "==> waiting (up to ${UP_TIMEOUT_S} s) until every broker is registered, unfenced and answers metadata"
    wait_cluster_ready "$UP_TIMEOUT_S" "${#BROKERS[@]}" "$(
        IFS=,
        echo "${addresses[*]}"
    )" brokers_alive || status=$?
    case "$status" in
    0) return 0 ;;
    2) exit 1 ;;
    esac
    # The CLI names the broker at fault; when no registered one is (one never
    # registered), name the first the cluster does not know.
    blamed=$NOT_READY_BROKER
    if [ -z "$blamed" ]; then
        for n in "${BROKERS[@]}"; do
            if ! cli --bootstrap-server "$(client_address "$n")" cluster describe --broker "$n" --field status >/dev/null 2>&1; then
                blamed=$n
                break
            fi
        done
    fi
    echo "cluster.sh: error: $NOT_READY_REASON" >&2
    [ -z "$blamed" ] || log_tail "$blamed"
    echo "(SYNCLINE_UP_TIMEOUT_S, ${UP_TIMEOUT_S} s, sets the wait.)" >&2
    exit 1
}

print_usage_hint() {
    local addresses=() kafka=() n
    for n in "${BROKERS[@]}"; do
        addresses+=("$(client_address "$n")")
        [ -z "$(kafka_address "$n")" ] || kafka+=("$(kafka_address "$n")")
    done
    local bootstrap
    bootstrap=$(
        IFS=,
        echo "${addresses[*]}"
    )
    if [ "$SECURE" = 1 ]; then
        print_secure_usage_hint "$bootstrap" "${kafka[*]:-"(no kafka_listeners)"}"
        return
    fi
    cat <<EOF

The cluster is up: brokers ${BROKERS[*]} on ${addresses[*]} (each also a controller voter);
Kafka's clients and tools (kcat, librdkafka, kafka-python) on ${kafka[*]:-"(no kafka_listeners)"}.

  export PATH="\$PWD/$BIN_DIR:\$PATH"      # syncline and synclined
  syncline topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
  seq 1 5 | syncline produce orders --acks all
  syncline consume orders --from-beginning --max-messages 5
  syncline topic describe orders        # leaders, epochs, ISR, high watermarks
  syncline cluster describe             # brokers, fenced or not; the controller quorum

The CLI bootstraps from 127.0.0.1:9092 (broker 1); to survive broker 1 being
down, use --bootstrap-server $bootstrap
(or export SYNCLINE_BOOTSTRAP_SERVER=$bootstrap).

  scripts/cluster.sh status             # PIDs, liveness, roles
  scripts/cluster.sh logs [N]           # tail the logs ($LOG_DIR/broker-N.log)
  scripts/cluster.sh down               # stop the cluster
EOF
}

print_secure_usage_hint() {
    local bootstrap=$1 kafka_addresses=$2 internal=() n
    for n in "${BROKERS[@]}"; do internal+=("$(named_listener "$n" INTERNAL)"); done
    cat <<EOF

The secure cluster is up: brokers ${BROKERS[*]} (each also a controller voter) serve
clients with SASL_SSL on ${bootstrap//,/ } (TLS, then a SCRAM-SHA-256/512
or PLAIN login) and each other with mutual TLS on ${internal[*]};
Kafka's clients and tools on ${kafka_addresses} (SASL_SSL too). ACLs are on: the
super user $SECURE_ADMIN may do everything, any other user only what an ACL allows.
The client settings of $SECURE_ADMIN (password in $SECURE_DIR/admin.password) are in
$CLIENT_PROPERTIES; give them to every command:

  export PATH="\$PWD/$BIN_DIR:\$PATH"      # syncline and synclined
  syncline --command-config $CLIENT_PROPERTIES topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
  seq 1 5 | syncline --command-config $CLIENT_PROPERTIES produce orders --acks all
  syncline --command-config $CLIENT_PROPERTIES consume orders --from-beginning --max-messages 5
  syncline --command-config $CLIENT_PROPERTIES cluster describe

Users and ACLs (README "Security"):

  syncline --command-config $CLIENT_PROPERTIES user create alice --password-file alice.password
  syncline --command-config $CLIENT_PROPERTIES acl add --allow-principal User:alice --operation Write --topic orders
  syncline --command-config $CLIENT_PROPERTIES acl list

To survive broker 1 being down, add --bootstrap-server $bootstrap.

  scripts/cluster.sh status             # PIDs, liveness, roles
  scripts/cluster.sh logs [N]           # tail the logs ($LOG_DIR/broker-N.log)
  scripts/cluster.sh down               # stop the cluster (data/ stays secure: up --secure again)
EOF
}

cmd_up() {
    case "${1:-}" in
    "") ;;
    --secure) SECURE=1 ;;
    *) die "unknown option $1 for up (only --secure)" ;;
    esac
    check_data_mode
    build_shipped release
    mkdir -p "$LOG_DIR" "$RUN_DIR"
    [ "$SECURE" = 0 ] || prepare_secure
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
                echo "  note: $BIN_DIR/synclined was rebuilt after broker $n started; run \`scripts/cluster.sh down\` then \`up$([ "$SECURE" = 1 ] && echo " --secure")\` to run the new build"
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
            is_alive "${pids[$i]}" && alive=1
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
            for i in "${!pids[@]}"; do
                wait_gone "${pids[$i]}" 10 ||
                    die "broker ${ids[$i]} (pid ${pids[$i]}) survived SIGKILL for 10 s"
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
    # Controller voters go last: the others' controlled shutdown needs an active
    # controller.
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
    local n m pid state via="" controller="" all_ok=1
    # The cluster as the first broker that answers sees it.
    for n in "${BROKERS[@]}"; do
        broker_pid "$n" >/dev/null || continue
        if controller=$(cli --bootstrap-server "$(client_address "$n")" cluster describe --field controller_id 2>/dev/null); then
            via=$(client_address "$n")
            break
        fi
    done
    [ "$controller" != none ] || controller=""
    if [ "$SECURE" = 1 ]; then
        echo "secure cluster (data/secure/): SASL_SSL clients on ADDRESS, mutual TLS between brokers; client settings in $CLIENT_PROPERTIES"
    fi
    printf '%-7s %-8s %-8s %-8s %-16s %-16s %-10s %s\n' \
        BROKER PID PROCESS ANSWERS ADDRESS METRICS CLUSTER ROLE
    for m in "${BROKERS[@]}"; do
        local address answers cluster role
        address=$(client_address "$m")
        if pid=$(broker_pid "$m"); then
            state=$(process_state "$pid")
        else
            pid="-"
            state="stopped"
        fi
        answers=no
        if [ "$state" = running ] && cli --bootstrap-server "$address" cluster describe >/dev/null 2>&1; then
            answers=yes
        fi
        if [ -z "$via" ]; then
            cluster="?"
        elif [ "$(cli --bootstrap-server "$via" cluster describe --broker "$m" --field status 2>/dev/null)" = alive ]; then
            cluster=alive
        else
            cluster=fenced
        fi
        if [ -n "$controller" ]; then
            if [ "$controller" = "$m" ]; then
                role="active controller,broker"
            elif is_controller_in_config "$m"; then
                role="controller voter,broker"
            else
                role=broker
            fi
        else
            role="$(config_value "$m" process_roles) (from config)"
        fi
        [ "$state" = running ] && [ "$answers" = yes ] && [ "$cluster" = alive ] || all_ok=0
        printf '%-7s %-8s %-8s %-8s %-16s %-16s %-10s %s\n' \
            "$m" "$pid" "$state" "$answers" "$address" "$(metrics_address "$m")" "$cluster" "$role"
    done
    if [ -z "$via" ]; then
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

# Every command but `up` works on the cluster data/ holds, secure or not.
if [ "${1:-}" != up ] && [ -d "$SECURE_DIR" ]; then
    SECURE=1
    SYNCLINE_ARGS=(--command-config "$CLIENT_PROPERTIES")
fi

case "${1:-}" in
up)
    shift
    cmd_up "$@"
    ;;
down) cmd_down ;;
status) cmd_status ;;
logs)
    shift
    cmd_logs "$@"
    ;;
-h | --help | help) usage_from_header "$0" ;;
*)
    usage_from_header "$0" >&2
    exit 2
    ;;
esac
