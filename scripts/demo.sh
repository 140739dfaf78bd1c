#!/usr/bin/env bash
# A guided, unattended tour of the ISR (README: "The replication contract") on a throwaway
# three-broker cluster of its own: its own temporary directory, free ports and
# short timers, so it never touches a cluster started by scripts/cluster.sh.
#
#   scripts/demo.sh            the demo on a plaintext cluster
#   scripts/demo.sh --secure   the same on a secure cluster (as scripts/cluster.sh
#                              up --secure makes: SASL_SSL clients, mutual TLS
#                              between brokers, ACLs, a super user admin), every
#                              command with --command-config; then one more
#                              chapter: ACLs (a user refused Write with
#                              TOPIC_AUTHORIZATION_FAILED until an ACL allows
#                              it) and a wrong password refused
#
# The story: acks=all rests on the ISR; a paused follower leaves the ISR while
# acks=all goes on; below min.insync.replicas acks=all is refused; resumed
# followers rejoin; a partition's replicas move, a new replica joining the ISR
# once caught up; a killed leader is replaced by an ISR member with a higher
# leader epoch, and every acknowledged record is still there.
#
# It builds the release binaries first if needed (cargo build --release -p
# syncline-broker -p syncline-cli, as scripts/cluster.sh does),
# then runs in well under two minutes. Every process it starts is killed on every
# exit path (Ctrl-C included); its directory is removed unless a step fails
# (then the brokers' logs are kept and their path printed) or SYNCLINE_DEMO_KEEP=1.
# SYNCLINE_NO_BUILD=1 uses target/release as it is; SYNCLINE_DEMO_SECURE=1 is
# --secure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

SECURE=${SYNCLINE_DEMO_SECURE:-0}
for arg in "$@"; do
    case "$arg" in
    --secure) SECURE=1 ;;
    -h | --help)
        usage_from_header "$0"
        exit 0
        ;;
    *) die "unknown argument $arg (expected --secure or --help)" ;;
    esac
done

BIN_DIR=$PWD/target/release
# Short timers so the story fits in a minute (Kafka's defaults are 30000 ms lag,
# 9000 ms session). The topic below overrides the lag time per topic. The
# session timeout stays above the time a follower is kept paused, so that the
# leader's own ISR decision, not the controller's fencing, tells the story of
# the pauses; fencing is the story of the failover.
REPLICA_LAG_TIME_MAX_MS=3000
TOPIC_LAG_TIME_MAX_MS=2000
BROKER_SESSION_TIMEOUT_MS=10000
BROKER_HEARTBEAT_INTERVAL_MS=1000
# Bound on every wait for a condition.
WAIT_S=30

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
    BOLD=$'\e[1m' GREEN=$'\e[32m' RED=$'\e[31m' RESET=$'\e[0m'
else
    BOLD="" GREEN="" RED="" RESET=""
fi

DEMO_DIR=""
BROKER_PIDS=()
TICKER_PIDS=()
FAILED=0
STARTED_AT=$SECONDS

cleanup() {
    local status=$?
    set +e
    stop_wait_ready
    # A failed step (not an interrupt: 128 + signal) keeps the logs.
    if [ "$status" -ne 0 ] && [ "$status" -lt 128 ]; then FAILED=1; fi
    stop_ticker
    local pid
    for pid in "${BROKER_PIDS[@]}"; do
        [ -n "$pid" ] || continue
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${BROKER_PIDS[@]}"; do
        [ -n "$pid" ] && wait_killed "$pid"
    done
    if [ -n "$DEMO_DIR" ] && [ -d "$DEMO_DIR" ]; then
        if [ "$FAILED" -eq 0 ] && [ "${SYNCLINE_DEMO_KEEP:-0}" != 1 ]; then
            rm -rf "$DEMO_DIR"
        else
            local n
            if [ "$FAILED" -eq 1 ]; then
                for n in 1 2 3; do
                    [ -f "$DEMO_DIR/broker-$n.log" ] || continue
                    echo "---- last lines of broker $n's log ($DEMO_DIR/broker-$n.log) ----" >&2
                    tail -n 8 "$DEMO_DIR/broker-$n.log" >&2
                done
            fi
            echo "demo.sh: the demo's configs and broker logs are kept in $DEMO_DIR (remove it when done)" >&2
        fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---------------------------------------------------------------- output

chapter() { printf '\n%s━━ %s%s\n' "$BOLD" "$*" "$RESET"; }
say() { printf '%s\n' "$*" | fold -s -w 88; }
ok() { printf '%s✔ %s%s\n' "$GREEN" "$*" "$RESET"; }
# Prints a shell command, then runs it.
run() {
    printf '%s$ %s%s\n' "$BOLD" "$1" "$RESET"
    eval "$1"
}
elapsed() { echo "$((SECONDS - $1)) s"; }

# Waits (bounded) until process $1 has exited.
wait_killed() {
    wait_gone "$1" 10 || {
        echo "demo.sh: process $1 is still alive 10 s after SIGKILL" >&2
        return 1
    }
}

# ---------------------------------------------------------------- cluster

# One CLI call never hangs the demo (e.g. on a paused broker).
CLI_TIMEOUT_S=20

broker_log_tail() {
    echo "---- last lines of $DEMO_DIR/broker-$1.log ----" >&2
    tail -n 15 "$DEMO_DIR/broker-$1.log" >&2 || true
}

# The secure cluster's files in $DEMO_DIR: a CA and the brokers' certificates
# (tls/), admin's password, the first users' verifiers, admin's client settings.
make_secure_files() {
    local n
    require_security_cli
    ensure_ca "$DEMO_DIR/tls"
    for n in 1 2 3; do ensure_cert "$DEMO_DIR/tls" "broker-$n" "$DEMO_DIR/tls" localhost 127.0.0.1; done
    ensure_password "$DEMO_DIR/admin.password"
    ensure_scram_bootstrap "$DEMO_DIR/bootstrap-users" "$SECURE_ADMIN" "$DEMO_DIR/admin.password"
    write_client_properties "$DEMO_DIR/client.properties" "$SECURE_ADMIN" "$DEMO_DIR/admin.password" "$DEMO_DIR/tls/ca.pem"
}

start_cluster() {
    local n port metrics roles listeners voter
    local free count=6
    [ "$SECURE" = 0 ] || count=9
    mapfile -t free < <(free_ports "$count")
    [ "${#free[@]}" -eq "$count" ] || die "no $count free ports found on 127.0.0.1"
    PORTS=("" "${free[@]:0:3}")
    METRICS_PORTS=("" "${free[@]:3:3}")
    INTERNAL_PORTS=("" "${free[@]:6:3}")
    BROKER_PIDS=("" "" "" "")
    [ "$SECURE" = 0 ] || make_secure_files
    for n in 1 2 3; do
        port=${PORTS[$n]}
        metrics=${METRICS_PORTS[$n]}
        # One controller voter, broker 1 (the shipped config has three): the demo
        # pauses both followers of a partition at once, and three voters would
        # lose their majority, so the ISR could not shrink.
        roles=broker
        [ "$n" -eq 1 ] && roles="broker,controller"
        listeners="127.0.0.1:$port"
        voter="127.0.0.1:${PORTS[1]}"
        if [ "$SECURE" = 1 ]; then
            # Clients on CLIENT (SASL_SSL), the brokers and the quorum on
            # INTERNAL (SSL, mutual TLS), as scripts/cluster.sh up --secure.
            listeners="CLIENT://127.0.0.1:$port,INTERNAL://127.0.0.1:${INTERNAL_PORTS[$n]}"
            voter="127.0.0.1:${INTERNAL_PORTS[1]}"
        fi
        cat >"$DEMO_DIR/broker-$n.toml" <<EOF
# scripts/demo.sh: broker $n of the demo's throwaway cluster.
node_id = $n
cluster_id = "syncline-demo"
listeners = "$listeners"
log_dirs = "$DEMO_DIR/data-$n"
process_roles = "$roles"
controller_quorum_voters = "1@$voter"
metrics_listen = "127.0.0.1:$metrics"
replica_lag_time_max_ms = $REPLICA_LAG_TIME_MAX_MS
broker_session_timeout_ms = $BROKER_SESSION_TIMEOUT_MS
broker_heartbeat_interval_ms = $BROKER_HEARTBEAT_INTERVAL_MS
EOF
        if [ "$SECURE" = 1 ]; then
            echo 'inter_broker_listener_name = "INTERNAL"' >>"$DEMO_DIR/broker-$n.toml"
            secure_broker_keys "CLIENT:SASL_SSL,INTERNAL:SSL" "$DEMO_DIR/tls" "broker-$n" \
                "$DEMO_DIR/bootstrap-users" >>"$DEMO_DIR/broker-$n.toml"
        fi
        NO_COLOR=1 synclined --config "$DEMO_DIR/broker-$n.toml" >"$DEMO_DIR/broker-$n.log" 2>&1 </dev/null &
        BROKER_PIDS[n]=$!
        # Out of the job table: no "Killed" notice when the demo kills it.
        disown "$!"
    done
    export SYNCLINE_BOOTSTRAP_SERVER="127.0.0.1:${PORTS[1]}"
    [ "$SECURE" = 0 ] || SYNCLINE_ARGS=(--command-config "$DEMO_DIR/client.properties")

    local status=0
    wait_cluster_ready "$WAIT_S" 3 "127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]},127.0.0.1:${PORTS[3]}" \
        brokers_alive || status=$?
    case "$status" in
    0) ;;
    2) exit 1 ;;
    *) die "the demo cluster did not become ready within ${WAIT_S} s: $NOT_READY_REASON (brokers' logs in $DEMO_DIR)" ;;
    esac
}

# False, showing its log, if a broker has exited during start-up.
brokers_alive() {
    local n
    for n in 1 2 3; do
        if ! kill -0 "${BROKER_PIDS[$n]}" 2>/dev/null; then
            broker_log_tail "$n"
            echo "${RED}demo.sh: error: broker $n exited during start-up (its log is above)${RESET}" >&2
            return 1
        fi
    done
}

# ---------------------------------------------------------------- reading state

# One partition's LEADER LEADER_EPOCH REPLICAS ISR HIGH_WATERMARK
# LOG_END_OFFSET on one line (empty if the command fails).
partition_row() {
    partition_fields "$1" "$2" leader leader_epoch replicas isr high_watermark log_end_offset
}
field() { # row field-number (1 leader, 2 epoch, 3 replicas, 4 isr, 5 hw, 6 leo)
    echo "$1" | cut -d' ' -f"$2"
}

# True when a partition_row ($1) meets every condition that follows, each
# NAME=VALUE, NAME!=VALUE or NAME>NUMBER over leader, epoch, replicas, isr, hw, leo.
row_matches() {
    local leader epoch replicas isr hw leo c name op want got
    # shellcheck disable=SC2034 # read through ${!name}
    read -r leader epoch replicas isr hw leo <<<"$1"
    shift
    for c in "$@"; do
        [[ "$c" =~ ^([a-z]+)(!=|=|\>)(.*)$ ]] || die "bad condition $c"
        name=${BASH_REMATCH[1]} op=${BASH_REMATCH[2]} want=${BASH_REMATCH[3]}
        got=${!name:-}
        case "$op" in
        =) [ "$got" = "$want" ] || return 1 ;;
        !=) [ "$got" != "$want" ] || return 1 ;;
        \>) [[ "$got" =~ ^[0-9]+$ ]] && [ "$got" -gt "$want" ] || return 1 ;;
        esac
    done
}

# wait_partition TOPIC PARTITION WHAT CONDITION...: waits (bounded) until the
# partition meets every condition (see row_matches), then says WHAT and how long
# it took.
wait_partition() {
    local topic=$1 p=$2 what=$3 t0=$SECONDS row=""
    shift 3
    local deadline=$((SECONDS + WAIT_S))
    while :; do
        row=$(partition_row "$topic" "$p")
        if [ -n "$row" ] && row_matches "$row" "$@"; then
            ok "$what (after $(elapsed "$t0"))"
            return
        fi
        [ "$SECONDS" -lt "$deadline" ] ||
            die "timed out after ${WAIT_S} s waiting for: $what (last seen: leader epoch replicas ISR HW LEO = ${row:-nothing})"
        sleep 0.2
    done
}

# What the demo shows for GET /metrics: curl where it exists, else lib.sh's http_get.
if command -v curl >/dev/null; then METRICS_GET="curl -s"; else METRICS_GET="http_get"; fi
show_isr_metrics() {
    run "$METRICS_GET http://127.0.0.1:${METRICS_PORTS[1]}/metrics | grep -E '^syncline_isr_(shrinks|expands)_total'"
}
wait_metric_above() { # port name value
    local deadline=$((SECONDS + WAIT_S)) v
    while :; do
        v=$(metric "127.0.0.1:$1" "$2")
        if [ -n "$v" ] && [ "${v%.*}" -gt "$3" ]; then
            echo "${v%.*}"
            return
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "$2 on broker 1 stayed at ${v:-?} (expected more than $3)"
        sleep 0.2
    done
}

# ---------------------------------------------------------------- background load

# Appends a record to orders-0 every 100 ms with acks=1: a follower with nothing
# to fetch counts as caught up (Kafka's rule), so the leader's log must grow for
# a paused follower to fall behind.
start_ticker() {
    mkfifo "$DEMO_DIR/ticks"
    syncline produce orders --partition 0 --acks 1 --retries 10 <"$DEMO_DIR/ticks" \
        >/dev/null 2>"$DEMO_DIR/ticker.err" &
    TICKER_PIDS+=("$!")
    (
        i=0
        while :; do
            i=$((i + 1))
            echo "tick-$i"
            sleep 0.1
        done
    ) >"$DEMO_DIR/ticks" &
    TICKER_PIDS+=("$!")
}
stop_ticker() {
    local pid
    for pid in "${TICKER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${TICKER_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    TICKER_PIDS=()
}

# ---------------------------------------------------------------- acknowledged records

ACKED_FILE=""
# Records "$@" as acknowledged with acks=all (the produce command succeeded).
acked() { printf '%s\n' "$@" >>"$ACKED_FILE"; }

# ================================================================ the story

build_shipped release
export PATH="$BIN_DIR:$PATH"
unset RUST_LOG
STARTED_AT=$SECONDS

DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/syncline-demo.XXXXXX")
ACKED_FILE=$DEMO_DIR/acked.txt
: >"$ACKED_FILE"

chapter "0. A throwaway three-broker cluster"
say "Three brokers on free ports, data in $DEMO_DIR. Broker 1 also hosts the controller \
(a single voter), which commits every ISR change and elects leaders, so the demo never \
pauses or kills broker 1. Short timers: replica_lag_time_max_ms=$REPLICA_LAG_TIME_MAX_MS, \
broker_session_timeout_ms=$BROKER_SESSION_TIMEOUT_MS, broker_heartbeat_interval_ms=$BROKER_HEARTBEAT_INTERVAL_MS."
start_cluster
say "The CLI talks to broker 1: SYNCLINE_BOOTSTRAP_SERVER=$SYNCLINE_BOOTSTRAP_SERVER"
if [ "$SECURE" = 1 ]; then
    # Every command below as admin; one that names its own settings keeps them.
    syncline() {
        if [ "${1:-}" = --command-config ]; then
            command syncline "$@"
        else
            command syncline --command-config "$DEMO_DIR/client.properties" "$@"
        fi
    }
    say "A secure cluster, as scripts/cluster.sh up --secure makes: clients connect with \
SASL_SSL (TLS against the demo's own CA, then a SCRAM-SHA-512 login), the brokers talk to \
each other with mutual TLS on a listener of their own, and ACLs are on (authorizer_enable) \
with the super user admin. Every syncline command below is run as admin: here syncline \
stands for \`syncline --command-config $DEMO_DIR/client.properties\`, which holds:"
    run "grep -v '^#' $DEMO_DIR/client.properties | sed 's/^sasl.password=.*/sasl.password=(random, from admin.password)/'"
fi
run "syncline cluster describe"

chapter "1. A topic with replication factor 3 and min.insync.replicas=2"
say "Every record goes to 3 replicas; acks=all needs at least 2 of them in sync. \
replica.lag.time.max.ms=$TOPIC_LAG_TIME_MAX_MS is syncline's per-topic override: a follower \
that has not caught up with the leader's log end for that long leaves the ISR."
run "syncline topic create orders --partitions 1 --replication-factor 3 --config min.insync.replicas=2 --config replica.lag.time.max.ms=$TOPIC_LAG_TIME_MAX_MS"
wait_partition orders 0 "orders-0: leader 1, ISR 1,2,3" isr=1,2,3 leader=1
row=$(partition_row orders 0)
[ "$(field "$row" 1)" = 1 ] || die "orders-0 is led by broker $(field "$row" 1), not broker 1: the demo pauses the followers of a partition the controller's broker leads"
run "syncline topic describe orders"

chapter "2. acks=all: answered once every ISR member has the records"
say "Each produce response names the replicas the acknowledgement rests on \
(--print-metadata prints them per record)."
run "seq -f 'order-%g' 1 5 | syncline produce orders --acks all --print-metadata"
acked order-{1..5}
run "syncline topic describe orders"

chapter "3. Pause a follower: the ISR shrinks, acks=all goes on"
SHRINKS0=$(metric "127.0.0.1:${METRICS_PORTS[1]}" syncline_isr_shrinks_total)
EXPANDS0=$(metric "127.0.0.1:${METRICS_PORTS[1]}" syncline_isr_expands_total)
show_isr_metrics
say "A follower with nothing to fetch counts as caught up, so a background producer now \
appends a record every 100 ms (acks=1, values tick-N): the leader's log keeps growing."
start_ticker
say "SIGSTOP freezes broker 2 like a long GC pause: it stops fetching."
run "kill -STOP ${BROKER_PIDS[2]}    # broker 2"
wait_partition orders 0 \
    "the leader dropped broker 2 from the ISR: ISR 1,3 (rule: not caught up for replica.lag.time.max.ms=$TOPIC_LAG_TIME_MAX_MS)" isr=1,3
run "syncline topic describe orders"
SHRINKS1=$(wait_metric_above "${METRICS_PORTS[1]}" syncline_isr_shrinks_total "${SHRINKS0%.*}")
show_isr_metrics
ok "syncline_isr_shrinks_total on broker 1 (the leader): ${SHRINKS0%.*} -> $SHRINKS1"
say "acks=all still succeeds: the ISR (1,3) still has min.insync.replicas=2 members. \
The acknowledgement rests on 2 replicas, and the CLI says so."
run "seq -f 'order-%g' 6 10 | syncline produce orders --acks all --print-metadata"
acked order-{6..10}

chapter "4. Pause the second follower: acks=all is refused"
run "kill -STOP ${BROKER_PIDS[3]}    # broker 3"
wait_partition orders 0 "the leader dropped broker 3 too: ISR 1" isr=1
say "The ISR (1) is below min.insync.replicas=2: the leader refuses acks=all before \
writing anything (consistency first), and the high watermark stops advancing while the \
ticks (acks=1) still grow the leader's log end."
if run "echo order-refused | syncline produce orders --acks all --retries 0"; then
    die "acks=all was acknowledged with ISR [1] below min.insync.replicas=2"
fi
ok "refused with NOT_ENOUGH_REPLICAS: nothing was written"
run "syncline topic describe orders"

chapter "5. Resume both followers: they catch up and rejoin the ISR"
run "kill -CONT ${BROKER_PIDS[2]} ${BROKER_PIDS[3]}    # brokers 2 and 3"
wait_partition orders 0 \
    "both followers caught up with the leader and rejoined: ISR 1,2,3" isr=1,2,3
EXPANDS1=$(wait_metric_above "${METRICS_PORTS[1]}" syncline_isr_expands_total "${EXPANDS0%.*}")
show_isr_metrics
ok "syncline_isr_expands_total on broker 1: ${EXPANDS0%.*} -> $EXPANDS1"
stop_ticker
run "syncline topic describe orders"

chapter "6. Move replicas: a new replica catches up and joins the ISR before anything leaves"
say "syncline topic reassign moves a partition's replicas (Kafka's kafka-reassign-partitions). \
First orders-0 goes down to replicas 1,2: that target is in the ISR already, so it completes \
at once and broker 3 deletes its copy."
run "syncline topic reassign orders --partition 0 --replicas 1,2"
wait_partition orders 0 "orders-0: replicas 1,2, ISR 1,2" replicas=1,2 isr=1,2
EXPANDS2=$(metric "127.0.0.1:${METRICS_PORTS[1]}" syncline_isr_expands_total)
say "Now back to 1,2,3: broker 3 is a new replica with an empty log. It fetches from the \
leader like any follower, the leader takes it into the ISR once it has caught up, and only \
then is the reassignment complete (describe shows ADDING meanwhile)."
run "syncline topic reassign orders --partition 0 --replicas 1,2,3"
wait_partition orders 0 "broker 3 caught up and joined the ISR: replicas 1,2,3, ISR 1,2,3" replicas=1,2,3 isr=1,2,3
EXPANDS3=$(wait_metric_above "${METRICS_PORTS[1]}" syncline_isr_expands_total "${EXPANDS2%.*}")
ok "syncline_isr_expands_total on broker 1: ${EXPANDS2%.*} -> $EXPANDS3"
run "syncline topic describe orders"

chapter "7. Kill a leader: a new leader from the ISR, with a higher leader epoch"
say "A second topic; its partitions' leaders are spread over the brokers. We kill \
the leader of one led by broker 2 or 3 (never broker 1, the controller's host)."
run "syncline topic create payments --partitions 3 --replication-factor 3 --config min.insync.replicas=2 --config replica.lag.time.max.ms=$TOPIC_LAG_TIME_MAX_MS"
FAIL_P=""
deadline=$((SECONDS + WAIT_S))
while [ -z "$FAIL_P" ]; do
    for p in 0 1 2; do
        row=$(partition_row payments "$p")
        [ -n "$row" ] || continue
        if [ "$(list_len "$(field "$row" 4)")" -eq 3 ] &&
            [ "$(field "$row" 1)" != 1 ] && [ "$(field "$row" 1)" != none ]; then
            FAIL_P=$p
            break
        fi
    done
    [ -n "$FAIL_P" ] || [ "$SECONDS" -lt "$deadline" ] ||
        die "no partition of payments is led by broker 2 or 3 with a full ISR after ${WAIT_S} s"
    [ -n "$FAIL_P" ] || sleep 0.2
done
row=$(partition_row payments "$FAIL_P")
OLD_LEADER=$(field "$row" 1)
OLD_EPOCH=$(field "$row" 2)
OLD_ISR=$(field "$row" 4)
run "seq -f 'payment-%g' 1 20 | syncline produce payments --partition $FAIL_P --acks all --print-metadata | cut -f3 | sort | uniq -c"
acked payment-{1..20}
run "syncline topic describe payments"
say "payments-$FAIL_P: leader $OLD_LEADER, leader epoch $OLD_EPOCH, ISR $OLD_ISR. SIGKILL its leader. \
The controller fences broker $OLD_LEADER once it has missed heartbeats for \
broker_session_timeout_ms=$BROKER_SESSION_TIMEOUT_MS, then elects the first live ISR member."
run "kill -KILL ${BROKER_PIDS[$OLD_LEADER]}    # broker $OLD_LEADER"
wait_killed "${BROKER_PIDS[$OLD_LEADER]}"
BROKER_PIDS[OLD_LEADER]=""
wait_partition payments "$FAIL_P" "payments-$FAIL_P has a new leader" \
    "leader!=$OLD_LEADER" leader!=none "epoch>$OLD_EPOCH"
row=$(partition_row payments "$FAIL_P")
NEW_LEADER=$(field "$row" 1)
NEW_EPOCH=$(field "$row" 2)
[[ ",$OLD_ISR," == *",$NEW_LEADER,"* ]] || die "new leader $NEW_LEADER was not in the ISR $OLD_ISR"
run "syncline cluster describe"
run "syncline topic describe payments"
ok "payments-$FAIL_P: leader $OLD_LEADER -> $NEW_LEADER (a member of the ISR $OLD_ISR), leader epoch $OLD_EPOCH -> $NEW_EPOCH"

chapter "8. Every acknowledged record is still there"
say "$(wc -l <"$ACKED_FILE") records were acknowledged with acks=all. Read both topics from the beginning:"
run "syncline consume orders --from-beginning --timeout-ms 2000 | grep -v '^tick-' > $DEMO_DIR/orders.txt; cat $DEMO_DIR/orders.txt"
run "syncline consume payments --partition $FAIL_P --from-beginning --timeout-ms 2000 > $DEMO_DIR/payments.txt; wc -l < $DEMO_DIR/payments.txt"
missing=$(sort "$ACKED_FILE" | comm -23 - <(sort -u "$DEMO_DIR/orders.txt" "$DEMO_DIR/payments.txt"))
[ -z "$missing" ] || die "acknowledged records missing after the failover: $(echo "$missing" | tr '\n' ' ')"
ok "all $(wc -l <"$ACKED_FILE") acknowledged records were read back"
if grep -qx order-refused "$DEMO_DIR/orders.txt"; then
    die "the record refused with NOT_ENOUGH_REPLICAS was read back"
fi
ok "the refused record (order-refused) was never written"
say "With broker $OLD_LEADER gone, acks=all still succeeds on 2 replicas, and says so:"
run "echo payment-21 | syncline produce payments --partition $FAIL_P --acks all --print-metadata"

if [ "$SECURE" = 1 ]; then
    chapter "9. ACLs: a user may do only what an ACL allows"
    say "authorizer_enable=true, super_users=User:admin, allow_everyone_if_no_acl_found=false: \
admin may do everything, any other user only what an ACL allows. A new user, alice, whose \
SCRAM-SHA-512 credential the metadata log stores as a salted hash (never the password):"
    ensure_password "$DEMO_DIR/alice.password"
    run "syncline user create alice --mechanism SCRAM-SHA-512 --password-file $DEMO_DIR/alice.password"
    write_client_properties "$DEMO_DIR/alice.properties" alice "$DEMO_DIR/alice.password" "$DEMO_DIR/tls/ca.pem"
    say "alice owns the topics named alice-* (a prefixed ACL) and may read orders, but not write it:"
    run "syncline acl add --allow-principal User:alice --operation All --topic alice- --resource-pattern-type prefixed"
    run "syncline acl add --allow-principal User:alice --operation Read --topic orders"
    run "syncline acl list"
    # alice's login and ACLs reach broker 1 (orders-0's leader) through the
    # metadata log: wait until alice may describe orders there.
    alice_sees_orders() {
        timeout 10 "$BIN_DIR/syncline" --command-config "$DEMO_DIR/alice.properties" \
            topic describe orders --partition 0 --field leader >/dev/null 2>&1
    }
    wait_until "$WAIT_S" alice_sees_orders || die "alice cannot log in or describe orders after ${WAIT_S} s"
    HW_BEFORE=$(partition_fields orders 0 high_watermark)
    say "alice writes to orders (her settings: $DEMO_DIR/alice.properties):"
    if run "echo order-by-alice | syncline --command-config $DEMO_DIR/alice.properties produce orders --partition 0 --acks all 2>&1 | tee $DEMO_DIR/alice.err"; then
        die "alice wrote to orders without a Write ACL"
    fi
    grep -q TOPIC_AUTHORIZATION_FAILED "$DEMO_DIR/alice.err" ||
        die "alice's produce failed, but not with TOPIC_AUTHORIZATION_FAILED (its output is above)"
    HW_AFTER=$(partition_fields orders 0 high_watermark)
    [ "$HW_AFTER" = "$HW_BEFORE" ] ||
        die "orders-0's high watermark moved from $HW_BEFORE to $HW_AFTER after a refused produce"
    ok "refused with TOPIC_AUTHORIZATION_FAILED: nothing was written (orders-0's high watermark stays $HW_BEFORE)"
    run "syncline acl add --allow-principal User:alice --operation Write --topic orders"
    alice_may_write() {
        cli acl list --principal User:alice --topic orders 2>/dev/null | grep -qi write
    }
    wait_until "$WAIT_S" alice_may_write || die "the Write ACL for alice is not listed after ${WAIT_S} s"
    run "echo order-by-alice | syncline --command-config $DEMO_DIR/alice.properties produce orders --partition 0 --acks all --print-metadata"
    acked order-by-alice
    run "syncline --command-config $DEMO_DIR/alice.properties consume orders --partition 0 --from-beginning --timeout-ms 2000 | tail -n 1"
    ok "with the Write ACL, alice's record was acknowledged with acks=all and reads back"
    say "A wrong password is refused at the login, before any request:"
    sed 's/^sasl.password=.*/sasl.password=not-alices-password/' "$DEMO_DIR/alice.properties" >"$DEMO_DIR/wrong.properties"
    if run "syncline --command-config $DEMO_DIR/wrong.properties topic list 2>&1 | tee $DEMO_DIR/wrong.err"; then
        die "a wrong password was accepted"
    fi
    grep -q SASL_AUTHENTICATION_FAILED "$DEMO_DIR/wrong.err" ||
        die "the wrong password was refused, but the error does not say SASL_AUTHENTICATION_FAILED (it is above)"
    ok "refused with SASL_AUTHENTICATION_FAILED"
fi

chapter "Done in $(elapsed "$STARTED_AT")"
say "Stopping the demo cluster and removing $DEMO_DIR."
