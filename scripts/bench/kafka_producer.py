"""librdkafka's producer (confluent-kafka) as scripts/bench.sh runs it against
the brokers' Kafka listeners: phase (k), the Kafka-protocol twin of (b).

  kafka_producer.py BOOTSTRAP TOPIC NUM_RECORDS RECORD_SIZE REPORT.json [KEY=VALUE...]

Produces NUM_RECORDS records of RECORD_SIZE random letters A-Z (one payload
for every record, no key, as `syncline perf produce` sends), as fast as
librdkafka takes them. KEY=VALUE are librdkafka settings, applied over the
defaults below (acks=all, idempotent, linger.ms=5, batch.size=131072: those of
bench.sh's own producer). After one warm-up record per partition (not
counted), throughput is counted from the first produce() to the last delivery
report; latency is librdkafka's per-record time from produce()
to the acknowledgement. Prints a line in `syncline perf produce`'s wording and
writes the figures as JSON with the same keys as its --json-report
(records_per_sec, bytes_per_sec, latency_ms). Any failed delivery, or a fatal
client error, stops the run with exit status 1.
"""

import json
import os
import random
import sys
import time

import confluent_kafka
from confluent_kafka import KafkaException, Producer

KAFKA_MB = 1024 * 1024  # as Kafka's tools (and syncline perf) print MB/sec


def fail(message):
    sys.stdout.flush()
    sys.stderr.write(f"kafka_producer.py: error: {message}\n")
    sys.stderr.flush()
    # Not sys.exit: destroying a producer with records in flight can wait for
    # them; nothing here needs a clean shutdown.
    os._exit(1)


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    if len(sys.argv) < 6:
        sys.stderr.write(__doc__)
        sys.exit(2)
    bootstrap, topic, report_path = sys.argv[1], sys.argv[2], sys.argv[5]
    num_records, record_size = int(sys.argv[3]), int(sys.argv[4])

    latencies = []  # seconds, one per acknowledged record
    state = {"acked": 0, "failed": 0, "last_ack": 0.0, "error": None}

    def delivered(err, msg):
        if err is not None:
            state["failed"] += 1
            if state["error"] is None:
                state["error"] = f"delivery to {msg.topic()}[{msg.partition()}] failed: {err}"
            return
        state["acked"] += 1
        state["last_ack"] = time.perf_counter()
        latencies.append(msg.latency())

    def client_error(err):
        if err.fatal():
            state["error"] = f"fatal client error: {err}"
        else:
            sys.stderr.write(f"    librdkafka: {err}\n")

    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 131072,
        # As the own producer's buffer.memory (Kafka's default, 32 MiB): room for
        # a few hundred batches ahead of the brokers.
        "queue.buffering.max.kbytes": 32768,
        "queue.buffering.max.messages": 1000000,
        "message.timeout.ms": 120000,
        "on_delivery": delivered,
        "error_cb": client_error,
    }
    for prop in sys.argv[6:]:
        key, sep, value = prop.partition("=")
        if not sep:
            fail(f"expected KEY=VALUE, got {prop!r}")
        config[key] = value
    try:
        producer = Producer(config)
    except KafkaException as e:
        fail(f"librdkafka refuses the configuration: {e}")

    # Metadata first, so that the wait for it is not counted in the run.
    try:
        metadata = producer.list_topics(topic, timeout=15)
    except KafkaException as e:
        fail(f"no metadata from {bootstrap}: {e}")
    partitions = metadata.topics[topic].partitions
    if metadata.topics[topic].error is not None or not partitions:
        fail(f"topic {topic} unavailable: {metadata.topics[topic].error}")

    value = bytes(random.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(record_size))
    # And one record per partition, not counted: librdkafka acquires its
    # producer id on a timer that first fires 500 ms after start (the broker
    # answers InitProducerId at once) and connects to each leader, neither of
    # which is throughput.
    for p in partitions:
        producer.produce(topic, value, partition=p)
    producer.flush(30)
    if state["error"] or state["acked"] != len(partitions):
        fail(state["error"] or "the warm-up records were not acknowledged within 30 s")
    state["acked"] = 0
    latencies.clear()

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i in range(num_records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                # The queue is full: serve delivery reports until there is room.
                poll(0.005)
        if i & 1023 == 0:
            poll(0)
            if state["error"]:
                fail(state["error"])
    deadline = time.monotonic() + 180
    while len(producer) > 0:
        if state["error"]:
            fail(state["error"])
        if time.monotonic() > deadline:
            fail(f"{len(producer)} records still unacknowledged 180 s after the last produce()")
        producer.flush(1)
    if state["error"]:
        fail(state["error"])
    if state["acked"] != num_records:
        fail(f"{state['acked']} of {num_records} records acknowledged")

    secs = max(state["last_ack"] - start, 1e-9)
    rate = state["acked"] / secs
    latencies.sort()
    ms = [x * 1000.0 for x in latencies]
    lat = {
        "avg": sum(ms) / len(ms),
        "max": ms[-1],
        "p50": percentile(ms, 0.50),
        "p95": percentile(ms, 0.95),
        "p99": percentile(ms, 0.99),
        "p99_9": percentile(ms, 0.999),
        "count": len(ms),
    }
    print(
        f"{state['acked']} records sent, {rate:.1f} records/sec ({rate * record_size / KAFKA_MB:.2f} MB/sec), "
        f"{lat['avg']:.2f} ms avg latency, {lat['max']:.2f} ms max latency, {lat['p50']:.2f} ms 50th, "
        f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p99_9']:.2f} ms 99.9th."
    )
    shown = {
        k: (str(v).lower() if isinstance(v, bool) else v)
        for k, v in config.items()
        if not callable(v) and k != "bootstrap.servers"
    }
    report = {
        "tool": "librdkafka producer (confluent-kafka)",
        "client": f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}",
        "config": shown,
        "topic": topic,
        "partitions": len(partitions),
        "acks": str(config["acks"]),
        "record_size": record_size,
        "records": state["acked"],
        "failed": state["failed"],
        "elapsed_s": secs,
        "records_per_sec": rate,
        "bytes_per_sec": rate * record_size,
        "latency_ms": lat,
    }
    with open(report_path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
