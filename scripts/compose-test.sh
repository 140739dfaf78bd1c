#!/usr/bin/env bash
# Container test of the docker compose cluster (network and process faults,
# docs/INVARIANTS.md#faults; README, "Docker"), run by scripts/test.sh when a Docker engine
# answers:
#
#   1. start the compose cluster (its own compose project, fresh volumes);
#   2. keep two producers writing numbered records with acks=all, one to a
#      partition led by broker 1, one to a partition led by broker 2 or 3;
#   3. cut a follower off the network (`docker network disconnect`; broker 2
#      or 3, so that broker 1's metrics stay readable): the ISR shrinks, acks=all
#      goes on, and the two other controller voters keep a majority;
#   4. reconnect it: the ISR expands back;
#   5. SIGKILL the container of the other partition's leader: a new leader from
#      the ISR, with a higher leader epoch, and the producers go on;
#   6. read both partitions from the beginning: every record acknowledged with
#      acks=all is there.
#
# `scripts/compose-test.sh --secure` (or SYNCLINE_COMPOSE_TEST_SECURE=1) runs
# the same test on the secure compose cluster (`scripts/compose.sh up
# --secure`: SASL_SSL clients, mutual TLS between brokers, ACLs), every
# command as its super user admin; its CA and password are made afresh in the
# test's temporary directory.
#
# Needs Docker with the Compose tool, the Rust toolchain and bash; takes about a
# minute once built. Bounded in time (every wait has a deadline); the cluster
# and its volumes are removed on every exit path (`down -v`). Exits non-zero
# with a message naming the step that failed, then the brokers' last log lines.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

SECURE=${SYNCLINE_COMPOSE_TEST_SECURE:-0}
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

export COMPOSE_PROJECT_NAME=${SYNCLINE_COMPOSE_TEST_PROJECT:-syncline-test}
# The debug build by default: debug assertions on, and it is the build that
# scripts/test.sh has just made in CI. SYNCLINE_PROFILE=release tests the
# release build.
export SYNCLINE_PROFILE=${SYNCLINE_PROFILE:-debug}
# Its own image tag (docker-compose.yml): the image of `scripts/compose.sh up` stays.
export SYNCLINE_IMAGE_TAG=test
SYNCLINE=target/$SYNCLINE_PROFILE/syncline
CLI_TIMEOUT_S=30
# The topics' lag time: a cut-off follower leaves the ISR within 1.5 x this.
LAG_MS=3000
WAIT_S=90

WORK=""
LOOP_PIDS=()
COMPOSE=()
STARTED_AT=$SECONDS

log() { echo "[compose-test +$((SECONDS - STARTED_AT))s] $*"; }

fail() {
    echo "compose-test: FAILED: $*" >&2
    exit 1
}

cleanup() {
    local status=$?
    set +e
    stop_producers
    if [ "${#COMPOSE[@]}" -gt 0 ]; then
        if [ "$status" -ne 0 ]; then
            echo "---- the brokers' last log lines ----" >&2
            timeout 60 "${COMPOSE[@]}" logs --no-color --tail 25 >&2
        fi
        log "removing the cluster and its volumes (down -v)"
        timeout 180 "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 ||
            echo "compose-test: warning: \`${COMPOSE[*]} down -v\` failed; remove the project $COMPOSE_PROJECT_NAME by hand" >&2
    fi
    [ -n "$WORK" ] && rm -rf "$WORK"
    if [ "$status" -eq 0 ]; then
        log "PASSED"
    else
        echo "compose-test: exit status $status" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- helpers

# wait_for WHAT COMMAND...: waits (at most WAIT_S) until COMMAND succeeds.
wait_for() {
    local what=$1 t0=$SECONDS
    shift
    wait_until "$WAIT_S" "$@" || fail "timed out after ${WAIT_S} s waiting until $what"
    log "ok: $what (after $((SECONDS - t0)) s)"
}

leader_of() { partition_fields "$1" "$2" leader; }
isr_of() { partition_fields "$1" "$2" isr; }
isr_lacks() { local isr; isr=$(isr_of "$1" "$2"); [ -n "$isr" ] && ! list_has "$isr" "$3"; }
isr_size_is() { [ "$(list_len "$(isr_of "$1" "$2")")" -eq "$3" ]; }
count() { wc -l <"$1" | tr -d ' '; }
count_above() { [ "$(count "$1")" -gt "$2" ]; }
broker_metric() { metric "127.0.0.1:$((9100 + $1))" "$2"; } # broker-number name
metric_above() { local v; v=$(broker_metric "$1" "$2"); [ -n "$v" ] && [ "$v" -gt "$3" ]; }
new_leader() { # topic partition old-leader old-epoch
    local leader epoch
    read -r leader epoch <<<"$(partition_fields "$1" "$2" leader leader_epoch)"
    [ -n "$leader" ] && [ "$leader" != "$3" ] && [ "$leader" != none ] && [ "$epoch" -gt "$4" ]
}

# ---------------------------------------------------------------- producers

# Writes NAME-1, NAME-2, ... to one partition, one `syncline produce` per record
# with acks=all, appending each record whose produce succeeded to
# $WORK/NAME.acked, until $WORK/stop exists. A failed produce (e.g. during an
# election) is counted in NAME.failed: such a record may or may not be in the
# log, and is not checked.
producer_loop() {
    local name=$1 topic=$2 partition=$3 i=0
    while [ ! -e "$WORK/stop" ]; do
        i=$((i + 1))
        if echo "$name-$i" | timeout 60 "$SYNCLINE" "${SYNCLINE_ARGS[@]}" produce "$topic" --partition "$partition" \
            --acks all --retries 1000 --delivery-timeout-ms 45000 >/dev/null 2>>"$WORK/$name.err"; then
            echo "$name-$i" >>"$WORK/$name.acked"
        else
            echo "$name-$i" >>"$WORK/$name.failed"
        fi
        sleep 0.05
    done
}

start_producer() {
    : >"$WORK/$1.acked"
    : >"$WORK/$1.failed"
    producer_loop "$@" &
    LOOP_PIDS+=("$!")
}

stop_producers() {
    [ -n "$WORK" ] && [ -d "$WORK" ] && touch "$WORK/stop"
    local pid deadline=$((SECONDS + 70))
    for pid in "${LOOP_PIDS[@]}"; do
        wait_gone "$pid" "$((deadline > SECONDS ? deadline - SECONDS : 0))" || true
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    LOOP_PIDS=()
}

# ---------------------------------------------------------------- the test

command -v docker >/dev/null || fail "docker not found"
docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info failed): start the Docker daemon"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/syncline-compose-test.XXXXXX")
UP_ARGS=()
if [ "$SECURE" = 1 ]; then
    find_compose "$(secure_compose_project "$COMPOSE_PROJECT_NAME")" docker-compose.secure.yml
    # The test's own CA, password and client settings.
    export SYNCLINE_COMPOSE_SECURE_DIR=$WORK/secure
    SYNCLINE_ARGS=(--command-config "$SYNCLINE_COMPOSE_SECURE_DIR/client.properties")
    UP_ARGS=(--secure)
else
    find_compose "$COMPOSE_PROJECT_NAME"
fi

log "starting the $([ "$SECURE" = 1 ] && echo "secure ")compose cluster (project $COMPOSE_PROJECT_NAME)"
# A leftover of an interrupted earlier run would break "fresh volumes".
timeout 180 "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
scripts/compose.sh up "${UP_ARGS[@]}" || fail "the compose cluster did not start (the reason is above)"
export SYNCLINE_BOOTSTRAP_SERVER=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094

log "creating topics cut (1 partition) and failover (3 partitions): RF 3, min.insync.replicas=2, replica.lag.time.max.ms=$LAG_MS"
for t in "cut 1" "failover 3"; do
    read -r name parts <<<"$t"
    cli topic create "$name" --partitions "$parts" --replication-factor 3 \
        --config min.insync.replicas=2 --config "replica.lag.time.max.ms=$LAG_MS" ||
        fail "cannot create topic $name"
done
led_by_with_full_isr() { # topic partition leader
    [ "$(leader_of "$1" "$2")" = "$3" ] && isr_size_is "$1" "$2" 3
}
wait_for "cut-0 has ISR 1,2,3 and leader 1" led_by_with_full_isr cut 0 1
# The failover partition: one led by broker 2 or 3 (broker 1 leads cut-0 and
# serves the metrics read here). The follower cut off the network is the other
# of 2 and 3, so the failover partition keeps its leader through the cut.
FP=""
for p in 0 1 2; do
    wait_for "failover-$p has a full ISR" isr_size_is failover "$p" 3
    leader=$(leader_of failover "$p")
    if [ -z "$FP" ] && { [ "$leader" = 2 ] || [ "$leader" = 3 ]; }; then
        FP=$p
        L=$leader
    fi
done
[ -n "$FP" ] || fail "no partition of topic failover is led by broker 2 or 3"
F=$((5 - L))
log "cut-0 is led by broker 1; failover-$FP is led by broker $L; broker $F will be cut off"

start_producer A cut 0
start_producer B failover "$FP"
both_acked_above() { count_above "$WORK/A.acked" "$1" && count_above "$WORK/B.acked" "$1"; }
wait_for "both producers have acknowledged records" both_acked_above 3

# ---- 3. cut a follower off the network
# The leader checks each partition every replica.lag.time.max.ms / 2 of its
# topic, so it removes the silent follower from the ISR well before the
# controller would fence the broker (broker_session_timeout_ms, 9 s).
CID_F=$("${COMPOSE[@]}" ps -q "broker-$F")
[ -n "$CID_F" ] || fail "no container for broker-$F"
NET=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{"\n"}}{{end}}' "$CID_F" | head -n 1)
[ -n "$NET" ] || fail "broker-$F's container is on no network"
SHRINKS0=$(broker_metric 1 syncline_isr_shrinks_total)
EXPANDS0=$(broker_metric 1 syncline_isr_expands_total)
if [ -z "$SHRINKS0" ] || [ -z "$EXPANDS0" ]; then
    fail "cannot read broker 1's metrics on 127.0.0.1:9101"
fi
log "docker network disconnect $NET broker-$F"
docker network disconnect "$NET" "$CID_F"
wait_for "the leader of cut-0 dropped broker $F from the ISR" isr_lacks cut 0 "$F"
wait_for "syncline_isr_shrinks_total on broker 1 went up from $SHRINKS0" \
    metric_above 1 syncline_isr_shrinks_total "$SHRINKS0"
ACKED_A=$(count "$WORK/A.acked")
wait_for "acks=all goes on with broker $F cut off (ISR $(isr_of cut 0))" \
    count_above "$WORK/A.acked" "$((ACKED_A + 5))"

# ---- 4. reconnect it
log "docker network connect --alias broker-$F $NET broker-$F"
docker network connect --alias "broker-$F" "$NET" "$CID_F"
wait_for "broker $F rejoined the ISR of cut-0" isr_size_is cut 0 3
# And of the failover partition: the ISR read before the kill below is then the
# one the controller holds, not a broker's view that lags an expansion.
wait_for "broker $F rejoined the ISR of failover-$FP" isr_size_is failover "$FP" 3
wait_for "syncline_isr_expands_total on broker 1 went up from $EXPANDS0" \
    metric_above 1 syncline_isr_expands_total "$EXPANDS0"

# ---- 5. kill the leader of the failover partition
read -r LEADER OLD_EPOCH OLD_ISR <<<"$(partition_fields failover "$FP" leader leader_epoch isr)"
[ "$LEADER" = "$L" ] || fail "failover-$FP is now led by ${LEADER:-?}, expected broker $L"
ACKED_B=$(count "$WORK/B.acked")
log "failover-$FP: leader $L, leader epoch $OLD_EPOCH, ISR $OLD_ISR; SIGKILL broker-$L's container"
timeout 60 "${COMPOSE[@]}" kill -s SIGKILL "broker-$L" >/dev/null 2>&1 || fail "cannot kill broker-$L"
wait_for "failover-$FP has a new leader with a higher leader epoch" new_leader failover "$FP" "$L" "$OLD_EPOCH"
read -r NEW_LEADER NEW_EPOCH NEW_ISR <<<"$(partition_fields failover "$FP" leader leader_epoch isr)"
list_has "$OLD_ISR" "$NEW_LEADER" || fail "the new leader $NEW_LEADER of failover-$FP was not in its ISR $OLD_ISR"
log "failover-$FP: leader $L -> $NEW_LEADER, leader epoch $OLD_EPOCH -> $NEW_EPOCH, ISR $NEW_ISR"
wait_for "acks=all goes on after the failover" count_above "$WORK/B.acked" "$((ACKED_B + 5))"

# ---- 6. every acknowledged record is there
stop_producers
log "producers stopped: A acknowledged $(count "$WORK/A.acked") (failed $(count "$WORK/A.failed")), B acknowledged $(count "$WORK/B.acked") (failed $(count "$WORK/B.failed"))"
check_partition() { # name topic partition
    local got=$WORK/$1.read missing
    cli consume "$2" --partition "$3" --from-beginning --timeout-ms 3000 >"$got" 2>>"$WORK/consume.err" ||
        fail "cannot read $2-$3: $(tail -n 3 "$WORK/consume.err")"
    missing=$(sort -u "$WORK/$1.acked" | comm -23 - <(sort -u "$got"))
    if [ -n "$missing" ]; then
        fail "$(echo "$missing" | wc -l) acknowledged records of $2-$3 are missing, e.g. $(echo "$missing" | head -n 10 | tr '\n' ' ')"
    fi
    log "ok: all $(count "$WORK/$1.acked") acknowledged records of $2-$3 read back ($(count "$got") records in the partition)"
}
check_partition A cut 0
check_partition B failover "$FP"
