"""kafka-python (a Kafka client of its own, pure Python) as the end-to-end
tests drive it: the same commands and output lines as confluent_clients.py.

  kafka_python_clients.py produce BOOTSTRAP TOPIC COUNT
      An idempotent acks=all producer of COUNT values "m-00000"...; prints
      "ACK partition offset value" per acknowledged record and "FAIL value
      error" per failed one, then "DONE".
  kafka_python_clients.py consume BOOTSTRAP TOPIC GROUP
      A group member (range assignor, a manual commit after each poll
      batch); prints "ASSIGN p,p,..." on every assignment and "MSG
      partition offset value" per record. Closing its stdin makes it commit,
      leave the group and exit.

Every line is flushed at once: the test reacts to them as they come.
"""

import logging
import sys
import threading

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import KafkaError


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(bootstrap, topic, count):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        delivery_timeout_ms=60000,
        request_timeout_ms=5000,
    )
    lock = threading.Lock()
    outcomes = []

    def acked(value):
        def ok(meta):
            with lock:
                outcomes.append(f"ACK {meta.partition} {meta.offset} {value}")
                say(outcomes[-1])

        def failed(err):
            with lock:
                outcomes.append(f"FAIL {value} {err!r}")
                say(outcomes[-1])

        return ok, failed

    for i in range(count):
        value = f"m-{i:05d}"
        ok, failed = acked(value)
        producer.send(topic, value=value.encode()).add_callback(ok).add_errback(failed)
        # A few records in flight at a time, so that sends straddle a failover.
        if i % 10 == 0:
            producer.flush(timeout=90)
    producer.flush(timeout=90)
    with lock:
        remaining = count - len(outcomes)
    producer.close()
    say(f"DONE {remaining}")


class Listener(ConsumerRebalanceListener):
    def __init__(self, consumer):
        self.consumer = consumer

    def on_partitions_revoked(self, revoked):
        # Nothing to commit: every batch read was committed right after its
        # poll. (The listener runs on the client's IO thread, where it must
        # not block on a commit.)
        pass

    def on_partitions_assigned(self, assigned):
        say("ASSIGN " + ",".join(str(p.partition) for p in sorted(assigned, key=lambda p: p.partition)))


def consume(bootstrap, topic, group):
    # The client's own account of its group membership, on stderr (the test
    # shows it when it fails).
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {group} %(name)s %(levelname)s %(message)s",
    )
    stop = threading.Event()

    def wait_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        partition_assignment_strategy=[RangePartitionAssignor],
    )
    # Bootstrapped before subscribing: kafka-python drops a subscription made
    # while its bootstrap Metadata request is in flight (the request carries
    # no topics, and its answer clears the pending update; see
    # crates/e2e/kafka-python/SELECTION.md), and then waits for the next
    # periodic refresh (5 minutes) with no assignment.
    consumer.bootstrap(timeout_ms=consumer.config["bootstrap_timeout_ms"])
    consumer.subscribe([topic], listener=Listener(consumer))
    # Joined before the poll loop, in one call that may take long.
    # kafka-python 3.0.12 loses a join that a poll's timeout cuts short when
    # no flag asks for the rejoin: its first leader assigns with a metadata
    # snapshot taken before the subscription, so the snapshot changes at once
    # and it rejoins; if a short poll times out during that second
    # JoinGroup/SyncGroup and the leader's new assignment snapshot meanwhile
    # matches, the next poll no longer sees a reason to rejoin and never
    # collects the SyncGroup answer (which the broker wrote: its debug log
    # shows it), so the member neither takes its partitions nor heartbeats
    # (kafka/coordinator/base.py, join_group_async). Later rebalances are
    # asked for by a flag (a heartbeat's REBALANCE_IN_PROGRESS) that stays
    # set until the join completes, so short polls are safe then.
    consumer._coordinator.ensure_active_group(timeout_ms=15000)
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=200, max_records=100)
        for tp, records in sorted(batches.items(), key=lambda kv: kv[0].partition):
            for m in records:
                say(f"MSG {m.partition} {m.offset} {m.value.decode()}")
        if batches:
            try:
                consumer.commit()
            except KafkaError as e:
                say(f"COMMITFAIL {e!r}")
    consumer.close()
    say("CLOSED")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        produce(args[0], args[1], int(args[2]))
    elif command == "consume":
        consume(args[0], args[1], args[2])
    else:
        sys.exit(f"unknown command {command!r}: produce or consume")
