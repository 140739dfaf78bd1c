"""librdkafka (confluent-kafka) held to a client quota, as the end-to-end tests drive it.

  librdkafka_throttle.py produce BOOTSTRAP TOPIC CLIENT_ID WARM_UP MEASURED
      A producer (acks=1, 64 KiB records, as fast as librdkafka lets it) for
      WARM_UP + MEASURED seconds.
  librdkafka_throttle.py consume BOOTSTRAP TOPIC CLIENT_ID WARM_UP MEASURED
      A consumer of partition 0 from its start (assigned, no group), a record or
      two a fetch, for as long.

Both print "RATE B" (record bytes a second that arrived within the measured
span: acknowledged, or read) and "THROTTLE MAX_MS COUNT" from librdkafka's own
statistics: the largest throttle time any broker reported and how many
answers reported one (the "throttle" window of each broker's statistics).
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

RECORD = 64 << 10


class Stats:
    def __init__(self):
        self.max_ms = 0
        self.count = 0

    def __call__(self, text):
        for broker in json.loads(text).get("brokers", {}).values():
            throttle = broker.get("throttle", {})
            self.max_ms = max(self.max_ms, throttle.get("max", 0))
            self.count += throttle.get("cnt", 0)


def rate(arrivals, start, warm_up, measured):
    inside = [n for at, n in arrivals if start + warm_up <= at < start + warm_up + measured]
    return sum(inside) / measured


def produce(bootstrap, topic, client_id, warm_up, measured):
    stats = Stats()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 2 * RECORD,
            "statistics.interval.ms": 500,
            "stats_cb": stats,
        }
    )
    arrivals = []

    def delivered(err, msg):
        if err is None:
            arrivals.append((time.monotonic(), len(msg.value())))

    value = b"q" * RECORD
    start = time.monotonic()
    while time.monotonic() < start + warm_up + measured:
        try:
            producer.produce(topic, value=value, partition=0, on_delivery=delivered)
        except BufferError:
            pass
        producer.poll(0.01)
    producer.flush(30)
    time.sleep(1)  # one more statistics interval
    producer.poll(0)
    return rate(arrivals, start, warm_up, measured), stats


def consume(bootstrap, topic, client_id, warm_up, measured):
    stats = Stats()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": client_id,
            "enable.auto.commit": False,
            "fetch.max.bytes": 2 * RECORD,
            "message.max.bytes": 2 * RECORD,
            "max.partition.fetch.bytes": RECORD,
            "statistics.interval.ms": 500,
            "stats_cb": stats,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    arrivals = []
    start = time.monotonic()
    while time.monotonic() < start + warm_up + measured:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            arrivals.append((time.monotonic(), len(msg.value())))
    end = time.monotonic() + 1  # one more statistics interval
    while time.monotonic() < end:
        consumer.poll(0.1)
    consumer.close()
    return rate(arrivals, start, warm_up, measured), stats


def main():
    command, bootstrap, topic, client_id, warm_up, measured = sys.argv[1:7]
    run = {"produce": produce, "consume": consume}[command]
    got, stats = run(bootstrap, topic, client_id, float(warm_up), float(measured))
    print(f"RATE {got:.0f}")
    print(f"THROTTLE {stats.max_ms} {stats.count}")


if __name__ == "__main__":
    main()
