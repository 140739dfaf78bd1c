"""kafka-python (a Kafka client of its own, pure Python) as the end-to-end
tests drive it: the same commands and output lines as confluent_clients.py.

  kafka_python_clients.py produce BOOTSTRAP TOPIC COUNT
      An idempotent acks=all producer of COUNT values "m-00000"...; prints
      "ACK partition offset value" per acknowledged record and "FAIL value
      error" per failed one, then "DONE".
  kafka_python_clients.py consume BOOTSTRAP TOPIC GROUP
      A group member (range assignor, manual commits after each poll batch,
      sent on revoke too); prints "ASSIGN p,p,..." on every assignment and "MSG
      partition offset value" per record. Closing its stdin makes it commit,
      leave the group and exit.

Every line is flushed at once: the test reacts to them as they come.
"""

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
        # Called on the client's IO thread, where it must not block: the
        # commit is sent, not awaited. Every batch read was committed already
        # (after each poll), so this one only narrows the window.
        self.consumer.commit_async()

    def on_partitions_assigned(self, assigned):
        say("ASSIGN " + ",".join(str(p.partition) for p in sorted(assigned, key=lambda p: p.partition)))


def consume(bootstrap, topic, group):
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
    consumer.subscribe([topic], listener=Listener(consumer))
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
