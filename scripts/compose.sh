#!/usr/bin/env bash
# The three-node cluster as containers (docker-compose.yml).
#
#   scripts/compose.sh build [--secure]
#                                  build the release binaries, stage them with
#                                  their shared libraries in docker/rootfs/,
#                                  build the image FROM scratch (no registry;
#                                  --secure: the secure cluster's image)
#   scripts/compose.sh up          build, start the containers, wait until every
#                                  broker is registered, unfenced and answers
#   scripts/compose.sh up --secure the same cluster secured (docker-compose.secure.yml
#                                  on top): SASL_SSL on the host's ports, mutual
#                                  TLS between brokers, ACLs, a local CA and a super
#                                  user admin, whose client settings go to
#                                  data/compose-secure/client.properties
#   scripts/compose.sh down [-v] [--secure]
#                                  stop and remove the containers (-v: and the
#                                  named volumes holding the data); --secure:
#                                  the secure cluster's, even when it has no
#                                  container left
#   scripts/compose.sh status      the containers, and the cluster as broker 1 sees it
#   scripts/compose.sh logs [N]    the last lines of every broker's log (or broker N's)
#
# Works with `docker compose` (v2) or `docker-compose` (v1). The compose
# project is COMPOSE_PROJECT_NAME (default: syncline). Clients on the host use
# 127.0.0.1:9092-9094 (the ports of scripts/cluster.sh: run one at a time).
# SYNCLINE_UP_TIMEOUT_S (default 90) bounds the wait in `up`;
# SYNCLINE_PROFILE=debug puts the debug build in the image (default: release);
# SYNCLINE_NO_BUILD=1 uses the binaries in target/ as they are.
#
# The secure cluster is the compose project COMPOSE_PROJECT_NAME-secure
# (syncline-secure): its containers, network and volumes are its own, so
# neither kind of cluster ever opens the other's data. `status`, `logs` and
# `down` work on whichever has containers; `up` refuses to start one while the
# other's containers exist. The secure cluster's files on the host are in
# SYNCLINE_COMPOSE_SECURE_DIR (default data/compose-secure/): the CA and the
# certificates (tls/), admin's random password (admin.password, mode 0600),
# the first users' verifiers (bootstrap-users), the client settings
# (client.properties); `up --secure` again keeps them.
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

SECURE=0
SECURE_DIR=${SYNCLINE_COMPOSE_SECURE_DIR:-data/compose-secure}
CLIENT_PROPERTIES=$SECURE_DIR/client.properties
# Where the image keeps the secure files (docker/Dockerfile).
IMAGE_SECURE_DIR=/etc/syncline/secure

compose() { "${COMPOSE[@]}" "$@"; }

# COMPOSE for the plaintext cluster (SECURE=0: docker-compose.yml, project
# PROJECT) or the secure one (SECURE=1: docker-compose.secure.yml on top,
# project PROJECT-secure, and the CLI with admin's client settings).
use_compose() {
    if [ "$SECURE" = 1 ]; then
        find_compose "$(secure_compose_project "$PROJECT")" docker-compose.secure.yml
        SYNCLINE_ARGS=(--command-config "$CLIENT_PROPERTIES")
    else
        find_compose "$PROJECT"
        SYNCLINE_ARGS=()
    fi
}

# True when the cluster of kind $1 (0 plaintext, 1 secure) has containers,
# running or not.
has_containers() {
    local saved=$SECURE out
    SECURE=$1
    use_compose
    out=$(compose ps -a -q 2>/dev/null || true)
    SECURE=$saved
    use_compose
    [ -n "$out" ]
}

# Sets SECURE (and COMPOSE) to the kind of cluster that has containers; with
# none (or both), the plaintext one.
use_compose_of_containers() {
    SECURE=0
    if ! has_containers 0 && has_containers 1; then SECURE=1; fi
    use_compose
}

# The secure cluster has run before: its volumes exist.
secure_volumes_exist() {
    docker volume inspect "$(secure_compose_project "$PROJECT")_broker-1-data" >/dev/null 2>&1
}

# The secure cluster's files on the host, kept where they exist: the CA, each
# broker's certificate (its host name broker-N, and localhost and 127.0.0.1
# for clients on the host), one for the image's healthcheck, admin's password,
# the first users' verifiers, admin's client settings.
prepare_secure() {
    require_security_cli
    local n tls=$SECURE_DIR/tls
    mkdir -p "$tls"
    chmod 700 "$SECURE_DIR" "$tls"
    if [ ! -s "$SECURE_DIR/admin.password" ] && secure_volumes_exist; then
        die "$SECURE_DIR/admin.password is missing, but the secure cluster's volumes (project $(secure_compose_project "$PROJECT")) already hold admin's credential made with it: remove them with \`scripts/compose.sh down -v --secure\`, then run this again"
    fi
    echo "==> secure cluster files in $SECURE_DIR/ (CA, certificates, admin's password, client settings)"
    ensure_ca "$tls"
    for n in "${BROKERS[@]}"; do
        ensure_cert "$tls" "broker-$n" "$tls" "broker-$n" localhost 127.0.0.1
    done
    ensure_cert "$tls" healthcheck "$tls" localhost
    ensure_password "$SECURE_DIR/admin.password"
    ensure_scram_bootstrap "$SECURE_DIR/bootstrap-users" "$SECURE_ADMIN" "$SECURE_DIR/admin.password"
    write_client_properties "$CLIENT_PROPERTIES" "$SECURE_ADMIN" "$SECURE_DIR/admin.password" "$tls/ca.pem"
}

client_address() { echo "127.0.0.1:$((9091 + $1))"; }

# The release binaries, their shared libraries and loader (as `ldd` lists them)
# and the configs, laid out as the image's root file system.
stage() {
    build_shipped "$PROFILE"
    local b
    command -v ldd >/dev/null || die "ldd not found: it lists the shared libraries the image needs (it comes with glibc)"

    [ "$SECURE" = 0 ] || prepare_secure

    echo "==> staging $CONTEXT/rootfs (binaries, shared libraries, configs)"
    rm -rf "$CONTEXT/rootfs" "$CONTEXT/rootfs-data" "$CONTEXT/rootfs-credentials" "$CONTEXT/rootfs-secure"
    mkdir -p "$CONTEXT/rootfs/usr/local/bin" "$CONTEXT/rootfs/etc/syncline" "$CONTEXT/rootfs-data" \
        "$CONTEXT/rootfs-credentials" "$CONTEXT/rootfs-secure"
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
    if [ "$SECURE" = 1 ]; then
        # docker/broker-N.toml with the security keys; the files they name.
        local n f
        for n in "${BROKERS[@]}"; do
            secure_broker_keys "INTERNAL:SSL,EXTERNAL:SASL_SSL,KAFKA:SASL_SSL" "$IMAGE_SECURE_DIR" "broker-$n" \
                "$IMAGE_SECURE_DIR/bootstrap-users" >>"$CONTEXT/rootfs/etc/syncline/broker-$n.toml"
        done
        for f in ca.pem broker-1.pem broker-1.key broker-2.pem broker-2.key broker-3.pem broker-3.key \
            healthcheck.pem healthcheck.key; do
            cp "$SECURE_DIR/tls/$f" "$CONTEXT/rootfs-secure/"
        done
        cp "$SECURE_DIR/bootstrap-users" "$CONTEXT/rootfs-secure/"
    fi
}

cmd_build() {
    use_compose
    stage
    echo "==> ${COMPOSE[*]} build"
    compose build
    # The brokers' keys are in the image now (and in $SECURE_DIR/tls/): none
    # stays in the build context.
    rm -rf "$CONTEXT/rootfs-secure"
    mkdir -p "$CONTEXT/rootfs-secure"
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
    case "${1:-}" in
    "") ;;
    --secure) SECURE=1 ;;
    *) die "unknown option $1 for up (only --secure)" ;;
    esac
    if has_containers "$((1 - SECURE))"; then
        die "the $([ "$SECURE" = 1 ] && echo plaintext || echo secure) compose cluster has containers: stop it with \`scripts/compose.sh down\`, then run this again (each kind keeps its own volumes)"
    fi
    use_compose
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
    if [ "$SECURE" = 1 ]; then
        cat <<EOF

The secure compose cluster is up (project $(secure_compose_project "$PROJECT")): brokers 1 2 3 serve clients with
SASL_SSL on 127.0.0.1:9092-9094 (Kafka's clients: 127.0.0.1:29092-29094) and each
other with mutual TLS (inside the network: broker-1:19092 ...); ACLs are on, with the
super user $SECURE_ADMIN, whose client settings are in $CLIENT_PROPERTIES
(the CA and certificates in $SECURE_DIR/tls/). Metrics on 127.0.0.1:9101-9103.

  export PATH="\$PWD/$BIN_DIR:\$PATH"
  syncline --command-config $CLIENT_PROPERTIES cluster describe
  syncline --command-config $CLIENT_PROPERTIES topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
  seq 1 5 | syncline --command-config $CLIENT_PROPERTIES produce orders --acks all

  scripts/compose.sh status | logs [N] | down [-v]
EOF
        return
    fi
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
    local args=(down --remove-orphans) secure=0 a
    for a in "$@"; do
        case "$a" in
        -v | --volumes) args+=(--volumes) ;;
        --secure) secure=1 ;;
        *) die "unknown option $a for down (-v removes the data volumes too; --secure: of the secure cluster)" ;;
        esac
    done
    if [ "$secure" = 1 ]; then
        SECURE=1
        use_compose
    else
        use_compose_of_containers
    fi
    compose "${args[@]}"
}

cmd_status() {
    use_compose_of_containers
    compose ps
    echo
    [ "$SECURE" = 0 ] || echo "secure cluster: SASL_SSL on the host's ports, client settings in $CLIENT_PROPERTIES"
    cli --bootstrap-server "$(client_address 1)" cluster describe ||
        echo "broker 1 does not answer on $(client_address 1): start the cluster with scripts/compose.sh up"
}

cmd_logs() {
    use_compose_of_containers
    if [ $# -gt 0 ]; then
        [[ " ${BROKERS[*]} " == *" $1 "* ]] || die "no broker $1: choose one of ${BROKERS[*]}"
        compose logs --tail 40 "broker-$1"
    else
        compose logs --tail 40
    fi
}

case "${1:-}" in
build)
    shift
    case "${1:-}" in
    "") ;;
    --secure) SECURE=1 ;;
    *) die "unknown option $1 for build (only --secure)" ;;
    esac
    cmd_build
    ;;
up)
    shift
    cmd_up "$@"
    ;;
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
