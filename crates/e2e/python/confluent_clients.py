"""confluent-kafka (librdkafka) as the end-to-end tests drive it.

  confluent_clients.py produce BOOTSTRAP TOPIC COUNT
      An idempotent acks=all producer of COUNT values "m-00000"...; prints
      "ACK partition offset value" per acknowledged record and "FAIL value
      error" per failed one, then "DONE".
  confluent_clients.py consume BOOTSTRAP TOPIC GROUP
      A group member (manual commits after each poll batch and on revoke);
      prints "ASSIGN p,p,..." on every assignment and "MSG partition offset
      value" per record. Closing its stdin makes it commit, leave the group
      and exit.

Every line is flushed at once: the test reacts to them as they come.
"""

import sys
import threading

from confluent_kafka import Consumer, KafkaException, Producer


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(bootstrap, topic, count):
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )

    def delivered(err, msg):
        if err is not None:
            say(f"FAIL {msg.value().decode()} {err}")
        else:
            say(f"ACK {msg.partition()} {msg.offset()} {msg.value().decode()}")

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=f"m-{i:05d}".encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        # A few records in flight at a time, so that sends straddle a failover.
        producer.poll(0.002)
    remaining = producer.flush(90)
    say(f"DONE {remaining}")


def consume(bootstrap, topic, group):
    stop = threading.Event()

    def wait_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )

    def assigned(c, partitions):
        say("ASSIGN " + ",".join(str(p.partition) for p in sorted(partitions, key=lambda p: p.partition)))

    def revoked(c, partitions):
        try:
            c.commit(asynchronous=False)
        except KafkaException:
            # Nothing consumed since the last commit, or the generation moved on.
            pass

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    while not stop.is_set():
        msgs = consumer.consume(num_messages=100, timeout=0.2)
        for m in msgs:
            if m.error():
                say(f"ERROR {m.error()}")
                continue
            say(f"MSG {m.partition()} {m.offset()} {m.value().decode()}")
        if msgs:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as e:
                say(f"COMMITFAIL {e}")
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
