"""A stock client's consumer group member that reports its assignment, in-process or as a process.

`GroupMember` runs one subscribed consumer (kafka-python, confluent-kafka with eager or
cooperative-sticky assignment, or aiokafka) on its own thread, polling until closed, and keeps
`assignment` current. Run as a module
(`python -m tests.integration.group_member LIB BOOTSTRAP TOPIC GROUP`) the same member prints
each new assignment as a JSON line, so a test can SIGKILL it like a crashed application.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable

import aiokafka
import confluent_kafka
import kafka

SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms: a killed member is noticed soonest
HEARTBEAT_INTERVAL_MS = 500
POLL_TIMEOUT_S = 0.2

Report = Callable[[frozenset[int]], None]


def run_kafka_python(bootstrap: str, topic: str, group: str, report: Report,
                     stop: threading.Event) -> None:
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
    try:
        while not stop.is_set():
            consumer.poll(timeout_ms=int(POLL_TIMEOUT_S * 1000))
            report(frozenset(tp.partition for tp in consumer.assignment()))
    finally:
        consumer.close()


def run_confluent(bootstrap: str, topic: str, group: str, report: Report,
                  stop: threading.Event, strategy: str = "range,roundrobin") -> None:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "partition.assignment.strategy": strategy})
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            consumer.poll(POLL_TIMEOUT_S)
            report(frozenset(tp.partition for tp in consumer.assignment()))
    finally:
        consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str, report: Report,
                 stop: threading.Event) -> None:
    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        await consumer.start()
        try:
            while not stop.is_set():
                await consumer.getmany(timeout_ms=int(POLL_TIMEOUT_S * 1000))
                report(frozenset(tp.partition for tp in consumer.assignment()))
        finally:
            await consumer.stop()

    asyncio.run(run())


def run_confluent_cooperative(bootstrap: str, topic: str, group: str, report: Report,
                              stop: threading.Event) -> None:
    """Incremental cooperative rebalancing (KIP-429): the client side of it, over the classic
    protocol; the broker only passes the assignor's data through."""
    run_confluent(bootstrap, topic, group, report, stop, strategy="cooperative-sticky")


RUNNERS: dict[str, Callable[[str, str, str, Report, threading.Event], None]] = {
    "kafka-python": run_kafka_python,
    "confluent": run_confluent,
    "confluent-cooperative": run_confluent_cooperative,
    "aiokafka": run_aiokafka,
}


class GroupMember:
    """One consumer on a thread; `assignment` is the partitions it owns at its last poll."""

    def __init__(self, lib: str, bootstrap: str, topic: str, group: str) -> None:
        self.assignment: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(lib, bootstrap, topic, group),
                                        daemon=True, name=f"group-member-{lib}")
        self._thread.start()

    def _run(self, lib: str, bootstrap: str, topic: str, group: str) -> None:
        try:
            RUNNERS[lib](bootstrap, topic, group, self._report, self._stop)
        except BaseException as exc:  # handed to the test thread, which fails on it
            self.error = exc

    def _report(self, assignment: frozenset[int]) -> None:
        self.assignment = assignment

    def close(self) -> None:
        """Leave the group the way the library does on close (a LeaveGroup)."""
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the consumer did not close"
        if self.error is not None:
            raise self.error


def main(argv: list[str]) -> None:
    lib, bootstrap, topic, group = argv
    last: list[frozenset[int] | None] = [None]

    def report(assignment: frozenset[int]) -> None:
        if assignment != last[0]:
            last[0] = assignment
            print(json.dumps(sorted(assignment)), flush=True)

    RUNNERS[lib](bootstrap, topic, group, report, threading.Event())


if __name__ == "__main__":
    main(sys.argv[1:])
