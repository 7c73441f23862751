"""A confluent-kafka consumer with `group.protocol=consumer` (KIP-848), run as a process.

`python -m tests.integration.kip848_member BOOTSTRAP TOPIC GROUP` consumes, commits every
message synchronously before reporting it, and prints JSON lines to stdout:
{"assignment": [partitions]} whenever its assignment changes, {"consumed": [partition, offset,
value]} per committed message. A line "close" on stdin closes the consumer (it leaves the group);
SIGKILL stands for a crash.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import confluent_kafka

POLL_TIMEOUT_S = 0.2


def consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """KIP-848 settings: the broker picks timeouts and assigns; `group.remote.assignor` asks
    for its uniform assignor (librdkafka 2.12+ has the protocol GA)."""
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "group.remote.assignor": "uniform", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _commit(consumer: confluent_kafka.Consumer, msg: Any) -> bool:
    """Commit the message's next offset; retried while the member still owns the partition
    (a commit racing an epoch bump answers STALE_MEMBER_EPOCH)."""
    tp = confluent_kafka.TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)
    for _ in range(50):
        try:
            consumer.commit(offsets=[tp], asynchronous=False)
            return True
        except confluent_kafka.KafkaException:
            owned = {(p.topic, p.partition) for p in consumer.assignment()}
            if (msg.topic(), msg.partition()) not in owned:
                return False
    return False


def run(bootstrap: str, topic: str, group: str) -> None:
    stop = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    consumer = confluent_kafka.Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    reported: list[int] | None = None
    try:
        while not stop.is_set():
            msg = consumer.poll(POLL_TIMEOUT_S)
            assignment = sorted(tp.partition for tp in consumer.assignment())
            if assignment != reported:
                reported = assignment
                _emit({"assignment": assignment})
            if msg is None or msg.error() is not None:
                continue
            if _commit(consumer, msg):
                _emit({"consumed": [msg.partition(), msg.offset(), msg.value().decode()]})
    finally:
        consumer.close()


if __name__ == "__main__":
    run(*sys.argv[1:4])
