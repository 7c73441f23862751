"""Exactly-once consume-transform-produce loop with confluent-kafka, run as a subprocess.

Reads `input` in a consumer group with isolation.level=read_committed, writes b"out-" + value
to `output` and commits the consumed offsets in the same transaction (sendOffsetsToTransaction),
a few records per transaction. It rides out broker restarts as an application would: retriable
errors are retried, abortable ones abort the transaction and rewind to the committed offsets,
and fatal ones exit with status 2. Progress (records committed so far) is appended to a file.
Exits 0 once the committed offsets cover `expected` records.

usage: eos_copier.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID EXPECTED PROGRESS_FILE
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaException, TopicPartition

RECORDS_PER_TRANSACTION = 10
DEADLINE_S = 150.0


def _retry(what: str, operation: Callable[[], Any]) -> Any:
    """Run an operation again while it fails with a retriable error; re-raise anything else."""
    while True:
        try:
            return operation()
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable():
                raise
            print(f"{what}: retriable {error}; retrying", file=sys.stderr, flush=True)
            time.sleep(0.2)


def _rewind(consumer: confluent_kafka.Consumer) -> None:
    """Back to the committed offsets of the current assignment (after an abort)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    committed = _retry("committed", lambda: consumer.committed(assignment, timeout=10))
    for tp in committed:
        offset = tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def main(argv: list[str]) -> int:
    bootstrap, input_topic, output_topic, group, transactional_id = argv[:5]
    expected, progress_path = int(argv[5]), argv[6]
    # librdkafka debug contexts (e.g. "eos,protocol") for a failing run, from the environment.
    client: dict[str, Any] = ({"debug": os.environ["EOS_COPIER_DEBUG"]}
                              if "EOS_COPIER_DEBUG" in os.environ else {})
    # With the only broker down, librdkafka >= 2.10 re-bootstraps and decommissions the broker
    # it had learned; a group coordinator cached on that decommissioned handle then makes
    # send_offsets_to_transaction hang forever (librdkafka issue #5511). Keep learned brokers.
    client["metadata.recovery.strategy"] = "none"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": 45000, **client})
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
        "transaction.timeout.ms": 20000, "linger.ms": 5, **client})
    _retry("init_transactions", lambda: producer.init_transactions(30))
    consumer.subscribe([input_topic])
    deadline = time.monotonic() + DEADLINE_S
    done = 0
    while done < expected:
        if time.monotonic() > deadline:
            print(f"gave up at {done} of {expected}", file=sys.stderr, flush=True)
            return 3
        messages = consumer.consume(RECORDS_PER_TRANSACTION, timeout=0.5)
        records = [m for m in messages if m.error() is None]
        for m in messages:
            if m.error() is not None:
                print(f"consumer: {m.error()}", file=sys.stderr, flush=True)
        if not records:
            continue
        try:
            producer.begin_transaction()
            for m in records:
                while True:
                    try:
                        producer.produce(output_topic, key=m.key(), value=b"out-" + m.value())
                        break
                    except BufferError:
                        producer.poll(0.1)
            positions = consumer.position(consumer.assignment())
            _retry("send_offsets", lambda p=positions: producer.send_offsets_to_transaction(
                p, consumer.consumer_group_metadata(), 30))
            _retry("commit", lambda: producer.commit_transaction(30))
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                print(f"fatal: {error}", file=sys.stderr, flush=True)
                return 2
            if not error.txn_requires_abort():
                raise
            print(f"aborting: {error}", file=sys.stderr, flush=True)
            _retry("abort", lambda: producer.abort_transaction(30))
            _rewind(consumer)
            continue
        done = sum(tp.offset for tp in positions if tp.offset > 0)
        with open(progress_path, "a") as progress:
            progress.write(f"{done}\n")
    consumer.close()
    producer.flush(30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
