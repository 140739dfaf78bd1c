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

PROJECT=${COMPOSE_PROJECT_NAME:-syncline}
PROFILE=${SYNCLINE_PROFILE:-release}
case "$PROFILE" in
release) CARGO_BUILD=(cargo build --release --bins) ;;
debug) CARGO_BUILD=(cargo build --bins) ;;
*)
    echo "compose.sh: error: SYNCLINE_PROFILE must be release or debug (got $PROFILE)" >&2
    exit 2
    ;;
esac
BIN_DIR=target/$PROFILE
CONTEXT=docker
BROKERS=(1 2 3)
UP_TIMEOUT_S=${SYNCLINE_UP_TIMEOUT_S:-90}

die() {
    echo "compose.sh: error: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

# `docker compose` or `docker-compose`, as an array in COMPOSE.
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
    COMPOSE+=(-f docker-compose.yml -p "$PROJECT")
}

compose() { "${COMPOSE[@]}" "$@"; }

client_address() { echo "127.0.0.1:$((9091 + $1))"; }

port_answers() {
    (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

syncline_cli() { timeout 5 "$BIN_DIR/syncline" "$@"; }

# Reads `syncline cluster describe --json`; prints the unfenced broker ids.
unfenced_ids() {
    awk '
        /"id":/      { v = $2; gsub(/[^0-9]/, "", v); id = v }
        /"fenced":/  { fenced = ($2 ~ /true/) }
        /^[[:space:]]*}/ { if (id != "" && !fenced) print id; id = ""; fenced = 0 }
    ' | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# The release binaries, their shared libraries and loader (as `ldd` lists them)
# and the configs, laid out as the image's root file system.
stage() {
    if [ "${SYNCLINE_NO_BUILD:-0}" != 1 ]; then
        command -v cargo >/dev/null || die "cargo not found: install the Rust toolchain (rustup)"
        echo "==> ${CARGO_BUILD[*]}"
        "${CARGO_BUILD[@]}"
    fi
    local b
    for b in synclined syncline; do
        [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: run ${CARGO_BUILD[*]}"
    done
    command -v ldd >/dev/null || die "ldd not found: it lists the shared libraries the image needs (it comes with glibc)"

    echo "==> staging $CONTEXT/rootfs (binaries, shared libraries, configs)"
    rm -rf "$CONTEXT/rootfs" "$CONTEXT/rootfs-data"
    mkdir -p "$CONTEXT/rootfs/usr/local/bin" "$CONTEXT/rootfs/etc/syncline" "$CONTEXT/rootfs-data"
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
    find_compose
    stage
    echo "==> ${COMPOSE[*]} build"
    compose build
}

running_containers() { compose ps -q 2>/dev/null | grep -c . || true; }

wait_ready() {
    local deadline=$((SECONDS + UP_TIMEOUT_S)) n out seen last="" pending
    echo "==> waiting (up to ${UP_TIMEOUT_S} s) until every broker is registered, unfenced and answers"
    while :; do
        pending=""
        for n in "${BROKERS[@]}"; do
            if out=$(syncline_cli --bootstrap-server "$(client_address "$n")" cluster describe --json 2>&1); then
                seen=$(echo "$out" | unfenced_ids)
                if [ "$seen" != "${BROKERS[*]}" ]; then
                    pending=$n
                    last="broker $n sees registered and unfenced brokers [${seen:-none}]"
                    break
                fi
            else
                pending=$n
                last="broker $n does not answer on $(client_address "$n"): $(echo "$out" | tail -n 1)"
                break
            fi
        done
        [ -n "$pending" ] || return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "compose.sh: error: the cluster is not ready after ${UP_TIMEOUT_S} s: $last" >&2
            compose ps >&2 || true
            for n in "${BROKERS[@]}"; do
                echo "---- last lines of broker-$n's log ----" >&2
                compose logs --no-color --tail 15 "broker-$n" >&2 || true
            done
            echo "compose.sh: the containers are left running to look at; stop them with: scripts/compose.sh down" >&2
            exit 1
        fi
        sleep 0.5
    done
}

cmd_up() {
    find_compose
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
    find_compose
    local args=(down --remove-orphans)
    case "${1:-}" in
    "") ;;
    -v | --volumes) args+=(--volumes) ;;
    *) die "unknown option $1 for down (only -v, which removes the data volumes too)" ;;
    esac
    compose "${args[@]}"
}

cmd_status() {
    find_compose
    compose ps
    echo
    syncline_cli --bootstrap-server "$(client_address 1)" cluster describe ||
        echo "broker 1 does not answer on $(client_address 1): start the cluster with scripts/compose.sh up"
}

cmd_logs() {
    find_compose
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
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
