"""kafka-python's lost subscription, made to happen every time (why
syncline_cluster.py's kafka_consumer_factory bootstraps each consumer before it
subscribes; SELECTION.md).

    target/kafka-clients/bin/python crates/e2e/kafka-python/metadata_race.py HOST:PORT

HOST:PORT is any Kafka listener (scripts/cluster.sh up: 127.0.0.1:29092) of a
cluster that creates topics on first use. Ten records go to a new topic; then a
consumer (api_version given, as the suite's fixtures give it, group_id None)
bootstraps through a local proxy that holds each of the broker's answers back
for DELAY seconds, and subscribe() runs while the bootstrap's Metadata request
(built before the subscription, so without the topic) is in flight. Its answer
clears the pending update (kafka/cluster.py update_metadata), the consumer is
assigned nothing and reads nothing until its next refresh, metadata_max_age_ms
(300 s) later. The same consumer bootstrapped first (KafkaConsumer.bootstrap)
reads all ten. Prints one line per case; exits 1 unless exactly that happens.
Nothing here depends on the broker beyond correct answers: Kafka's would do the
same.
"""

import os
import socket
import sys
import threading
import time

from kafka import KafkaConsumer, KafkaProducer

DELAY = 0.3
API_VERSION = (3, 0)


def pump(src, dst, delay):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def slow_proxy(host, port):
    """A proxy whose answers from host:port come DELAY late; its address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def accept():
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection((host, port))
            threading.Thread(target=pump, args=(client, upstream, 0), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, DELAY), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return "127.0.0.1:%d" % listener.getsockname()[1]


def consume(broker, proxy, bootstrap_first):
    topic = "metadata_race_%d_%d" % (os.getpid(), bootstrap_first)
    producer = KafkaProducer(bootstrap_servers=broker, api_version=API_VERSION)
    for i in range(10):
        producer.send(topic, b"m%d" % i).get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=proxy, api_version=API_VERSION,
                             group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000)
    if bootstrap_first:
        consumer.bootstrap(timeout_ms=10000)
    # ApiVersions is answered after DELAY; then Metadata is in flight for DELAY.
    time.sleep(1.5 * DELAY)
    consumer.subscribe([topic])
    read = sum(1 for _ in consumer)
    assigned = sorted(tp.partition for tp in consumer.assignment())
    consumer.close()
    print("%-35s assigned partitions %s, read %d of 10" % (
        "bootstrapped, then subscribed:" if bootstrap_first else "subscribed during the bootstrap:",
        assigned, read))
    return read


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    broker = sys.argv[1]
    host, port = broker.rsplit(":", 1)
    proxy = slow_proxy(host, int(port))
    raced = consume(broker, proxy, bootstrap_first=False)
    bootstrapped = consume(broker, proxy, bootstrap_first=True)
    sys.exit(0 if (raced, bootstrapped) == (0, 10) else 1)


if __name__ == "__main__":
    main()
