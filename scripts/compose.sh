#!/usr/bin/env bash
# The three-node cluster as containers (docker-compose.yml).
#
#   scripts/compose.sh build       build the release binaries, stage them with
#                                  their shared libraries in docker/rootfs/,
#                                  build the image FROM scratch (no registry)
#   scripts/compose.sh up          build, start the containers, wait until every
#                                  broker is registered, unfenced and answers
#   scripts/compose.sh down [-v]   stop and remove the containers (-v: and the
#                                  named volumes holding the data)
#   scripts/compose.sh status      the containers, and the cluster as broker 1 sees it
#   scripts/compose.sh logs [N]    the last lines of every broker's log (or broker N's)
#
# Works with `docker compose` (v2) or `docker-compose` (v1). The compose
# project is COMPOSE_PROJECT_NAME (default: syncline). Clients on the host use
# 127.0.0.1:9092-9094 (the ports of scripts/cluster.sh: run one at a time).
# SYNCLINE_UP_TIMEOUT_S (default 90) bounds the wait in `up`;
# SYNCLINE_PROFILE=debug puts the debug build in the image (default: release);
# SYNCLINE_NO_BUILD=1 uses the binaries in target/ as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

PROJECT=${COMPOSE_PROJECT_NAME:-syncline}
PROFILE=${SYNCLINE_PROFILE:-release}
case "$PROFILE" in
release | debug) ;;
*)
    echo "compose.sh: error: SYNCLINE_PROFILE must be release or debug (got $PROFILE)" >&2
    exit 2
    ;;
esac
BIN_DIR=target/$PROFILE
CONTEXT=docker
BROKERS=(1 2 3)
UP_TIMEOUT_S=${SYNCLINE_UP_TIMEOUT_S:-90}

SYNCLINE=$BIN_DIR/syncline
CLI_TIMEOUT_S=5

compose() { "${COMPOSE[@]}" "$@"; }

client_address() { echo "127.0.0.1:$((9091 + $1))"; }

# The release binaries, their shared libraries and loader (as `ldd` lists them)
# and the configs, laid out as the image's root file system.
stage() {
    build_bins "$PROFILE"
    local b
    for b in synclined syncline; do
        [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: build it with cargo build$([ "$PROFILE" = release ] && echo " --release") --bins"
    done
    command -v ldd >/dev/null || die "ldd not found: it lists the shared libraries the image needs (it comes with glibc)"

    echo "==> staging $CONTEXT/rootfs (binaries, shared libraries, configs)"
    rm -rf "$CONTEXT/rootfs" "$CONTEXT/rootfs-data" "$CONTEXT/rootfs-credentials"
    mkdir -p "$CONTEXT/rootfs/usr/local/bin" "$CONTEXT/rootfs/etc/syncline" "$CONTEXT/rootfs-data" "$CONTEXT/rootfs-credentials"
    for b in synclined syncline; do
        # Debug info is most of a release binary's size and is not needed to run.
        if command -v strip >/dev/null; then
            strip --strip-debug -o "$CONTEXT/rootfs/usr/local/bin/$b" "$BIN_DIR/$b"
        else
            cp "$BIN_DIR/$b" "$CONTEXT/rootfs/usr/local/bin/$b"
        fi
    done
    local libs lib
    libs=$(ldd "$BIN_DIR/synclined" "$BIN_DIR/syncline" |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
    [ -n "$libs" ] || echo "    (the binaries are statically linked: no shared library to copy)"
    for lib in $libs; do
        mkdir -p "$CONTEXT/rootfs$(dirname "$lib")"
        cp -L "$lib" "$CONTEXT/rootfs$lib"
        echo "    $lib"
    done
    printf 'hosts: files dns\n' >"$CONTEXT/rootfs/etc/nsswitch.conf"
    cp docker/broker-*.toml "$CONTEXT/rootfs/etc/syncline/"
}

cmd_build() {
    find_compose "$PROJECT"
    stage
    echo "==> ${COMPOSE[*]} build"
    compose build
}

running_containers() { compose ps -q 2>/dev/null | grep -c . || true; }

wait_ready() {
    # An interrupted wait leaves no CLI process or files behind.
    trap stop_wait_ready EXIT
    echo "==> waiting (up to ${UP_TIMEOUT_S} s) until every broker is registered, unfenced and answers"
    wait_cluster_ready "$UP_TIMEOUT_S" "${#BROKERS[@]}" "$(client_address 1),$(client_address 2),$(client_address 3)" &&
        return 0
    echo "compose.sh: error: the cluster is not ready after ${UP_TIMEOUT_S} s: $NOT_READY_REASON" >&2
    compose ps >&2 || true
    local n
    for n in "${BROKERS[@]}"; do
        echo "---- last lines of broker-$n's log ----" >&2
        compose logs --no-color --tail 15 "broker-$n" >&2 || true
    done
    echo "compose.sh: the containers are left running to look at; stop them with: scripts/compose.sh down" >&2
    exit 1
}

cmd_up() {
    find_compose "$PROJECT"
    if [ "$(running_containers)" -eq 0 ]; then
        local n a
        for n in "${BROKERS[@]}"; do
            for a in "$(client_address "$n")" "127.0.0.1:$((9100 + n))"; do
                if port_answers "$a"; then
                    die "$a is already in use: is the local cluster (\`scripts/cluster.sh down\` stops it) or another compose project of syncline running? Stop whatever holds the port, then run this again"
                fi
            done
        done
    fi
    cmd_build
    echo "==> ${COMPOSE[*]} up -d"
    compose up -d
    wait_ready
    cat <<EOF

The compose cluster is up (project $PROJECT): brokers 1 2 3 on 127.0.0.1:9092-9094
(inside the network: broker-1:19092 ...), metrics on 127.0.0.1:9101-9103.

  export PATH="\$PWD/$BIN_DIR:\$PATH"
  syncline cluster describe
  syncline topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
  seq 1 5 | syncline produce orders --acks all

  scripts/compose.sh status | logs [N] | down [-v]
EOF
}

cmd_down() {
    find_compose "$PROJECT"
    local args=(down --remove-orphans)
    case "${1:-}" in
    "") ;;
    -v | --volumes) args+=(--volumes) ;;
    *) die "unknown option $1 for down (only -v, which removes the data volumes too)" ;;
    esac
    compose "${args[@]}"
}

cmd_status() {
    find_compose "$PROJECT"
    compose ps
    echo
    cli --bootstrap-server "$(client_address 1)" cluster describe ||
        echo "broker 1 does not answer on $(client_address 1): start the cluster with scripts/compose.sh up"
}

cmd_logs() {
    find_compose "$PROJECT"
    if [ $# -gt 0 ]; then
        [[ " ${BROKERS[*]} " == *" $1 "* ]] || die "no broker $1: choose one of ${BROKERS[*]}"
        compose logs --tail 40 "broker-$1"
    else
        compose logs --tail 40
    fi
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down)
    shift
    cmd_down "$@"
    ;;
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
