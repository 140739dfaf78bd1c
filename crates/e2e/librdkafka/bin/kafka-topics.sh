#!/usr/bin/env bash
# Kafka's kafka-topics.sh as librdkafka's test suite runs it (test.c's
# test_kafka_topics(): KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server
# $BROKERS ...), done with syncline's CLI: --create, --alter (--partitions:
# add partitions; --config) and --delete of one --topic. BROKERS is the
# cluster's syncline listeners, SYNCLINE_BIN the CLI
# (crates/e2e/tests/e2e/librdkafka_suite.rs sets both). Anything else is refused.
set -euo pipefail

bootstrap="" op="" topic="" args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --bootstrap-server) bootstrap=$2; shift 2 ;;
    --create | --alter | --delete) op=${1#--}; shift ;;
    --topic) topic=$2; shift 2 ;;
    --partitions | --replication-factor | --config) args+=("$1" "$2"); shift 2 ;;
    *)
        echo "kafka-topics.sh (syncline): unsupported argument $1" >&2
        exit 2
        ;;
    esac
done
[ -n "$bootstrap" ] && [ -n "$op" ] && [ -n "$topic" ] || {
    echo "kafka-topics.sh (syncline): needs --bootstrap-server, --topic and one of --create, --alter, --delete" >&2
    exit 2
}
exec "${SYNCLINE_BIN:-syncline}" --bootstrap-server "$bootstrap" topic "$op" "$topic" ${args[@]+"${args[@]}"}
