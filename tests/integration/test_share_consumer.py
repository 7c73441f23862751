"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share consumer).

One broker for the module. Each test makes its own topic and share group, sets the group to
start at the earliest offset (`share.auto.offset.reset`, a group config set with
IncrementalAlterConfigs as on Kafka 4.2), produces, and checks what the consumers got: every
record, in which delivery, acknowledged once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from tests.integration.clients import confluent_admin, create_topic, new_topic_name, wait_until
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module

LOCK_MS = 3000  # group.share.record.lock.duration.ms of this module's broker
DELIVERY_LIMIT = 3


METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share") / "data", {
        "prometheus.metrics.port": str(METRICS_PORT),
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.share.record.lock.duration.ms": str(LOCK_MS),
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
        "group.share.min.delivery.count.limit": "2",
        "group.share.heartbeat.interval.ms": "500",
    })
    yield from serve_for_module(b)


def share_group(bootstrap: str, prefix: str, **configs: str) -> str:
    """A new share group id that starts at the earliest offset, with `configs` on top."""
    group = new_topic_name(prefix)
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in {"share.auto.offset.reset": "earliest", **configs}.items()]
    admin = confluent_admin(bootstrap)  # kept: the futures die with their client
    futures = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)])
    for future in futures.values():
        future.result(20)
    return group


def produce(bootstrap: str, topic: str, count: int, pause_s: float = 0.0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i)
        if pause_s and i % 10 == 9:
            producer.poll(0)
            time.sleep(pause_s * 10)
    assert producer.flush(30) == 0


def produce_to_each(bootstrap: str, topic: str, partitions: tuple[int, ...], count: int
                    ) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in partitions:
        for i in range(count):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0


def scrape_metrics() -> dict[tuple[str, str], float]:
    """(name, labels) -> value of the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as got:
        text = got.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name, _, labels = name_labels.partition("{")
            samples[(name, labels.rstrip("}"))] = float(value)
    return samples


def share_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
    consumer.subscribe([topic])
    return consumer


def poll_records(consumer: ShareConsumer, timeout_s: float = 1.0) -> list[Any]:
    records = []
    for message in consumer.poll(timeout_s) or []:
        assert message.error() is None, message.error()
        records.append(message)
    return records


def test_several_consumers_share_one_partition_and_each_record_is_delivered_once(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("queue")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "workers")
    consumers = [share_consumer(broker.bootstrap, group, topic) for _ in range(3)]
    # Records arrive while the members wait for them, a few at a time, as on a work queue.
    producing = threading.Thread(target=produce, args=(broker.bootstrap, topic, 3000, 0.001))
    seen: Counter[int] = Counter()
    by_consumer: Counter[int] = Counter()
    producing.start()
    try:
        deadline = time.monotonic() + 60
        while sum(seen.values()) < 3000 and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                for message in poll_records(consumer, 0.2):
                    assert message.value() == b"%d" % message.offset()
                    assert message.delivery_count() == 1
                    seen[message.offset()] += 1
                    by_consumer[index] += 1
    finally:
        producing.join()
        for consumer in consumers:
            # Implicit mode: commit_sync accepts the last poll's records (librdkafka 2.16's
            # close() sends no acknowledgements for them: they would be delivered again).
            consumer.commit_sync()
            consumer.close()
    assert sorted(seen) == list(range(3000))
    assert set(seen.values()) == {1}, "a record was delivered twice"
    metrics = scrape_metrics()
    assert metrics[("kafka_server_sharegroupmetrics_recordacknowledgements_total",
                    'ackType="Accept"')] >= 3000
    assert metrics[("kafka_server_brokertopicmetrics_totalsharefetchrequests_total",
                    f'topic="{topic}"')] > 0
    assert len(by_consumer) >= 2, f"one consumer took everything: {by_consumer}"
    # Everything was acknowledged: a new member of the group gets nothing more.
    late = share_consumer(broker.bootstrap, group, topic)
    try:
        assert [(m.offset(), m.delivery_count()) for _ in range(4)
                for m in poll_records(late, 0.5)] == []
    finally:
        late.close()


def test_explicit_release_redelivers_and_reject_never_does(broker: BrokerProcess) -> None:
    topic = new_topic_name("explicit")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "explicit")
    produce(broker.bootstrap, topic, 10)
    consumer = share_consumer(broker.bootstrap, group, topic,
                              **{"share.acknowledgement.mode": "explicit"})
    try:
        first = wait_until(lambda: poll_records(consumer), 30, "the first delivery")
        assert [m.offset() for m in first] == list(range(10))
        for message in first:  # even offsets go back, odd ones are rejected
            consumer.acknowledge(message, AcknowledgeType.RELEASE if message.offset() % 2 == 0
                                 else AcknowledgeType.REJECT)
        consumer.commit_sync()
        again = wait_until(lambda: poll_records(consumer), 30, "the redelivery")
        assert [(m.offset(), m.delivery_count()) for m in again] == [
            (o, 2) for o in range(0, 10, 2)]
        for message in again:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        assert poll_records(consumer, 1.5) == []
    finally:
        consumer.close()


def test_a_record_released_up_to_the_delivery_limit_is_archived(broker: BrokerProcess) -> None:
    topic = new_topic_name("poison")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "poison")
    produce(broker.bootstrap, topic, 1)
    consumer = share_consumer(broker.bootstrap, group, topic,
                              **{"share.acknowledgement.mode": "explicit"})
    counts = []
    try:
        for _ in range(DELIVERY_LIMIT):
            got = wait_until(lambda: poll_records(consumer), 30, "a delivery")
            counts.append(got[0].delivery_count())
            consumer.acknowledge(got[0], AcknowledgeType.RELEASE)
            consumer.commit_sync()
        assert counts == list(range(1, DELIVERY_LIMIT + 1))
        assert poll_records(consumer, 1.5) == []  # archived: never delivered again
    finally:
        consumer.close()


def test_an_expired_lock_redelivers_to_another_member(broker: BrokerProcess) -> None:
    topic = new_topic_name("slow")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "slow")
    produce(broker.bootstrap, topic, 5)
    slow = share_consumer(broker.bootstrap, group, topic,
                          **{"share.acknowledgement.mode": "explicit"})
    other = share_consumer(broker.bootstrap, group, topic)
    try:
        held = wait_until(lambda: poll_records(slow), 30, "the slow member's delivery")
        assert [m.offset() for m in held] == list(range(5))
        started = time.monotonic()
        redelivered = wait_until(lambda: poll_records(other), 30, "the redelivery")
        assert time.monotonic() - started >= LOCK_MS / 1000 * 0.8  # not before the lock ended
        assert [(m.offset(), m.delivery_count()) for m in redelivered] == [
            (o, 2) for o in range(5)]
        # The slow member's lock is gone: its late acceptance is refused, not applied twice.
        for message in held:
            slow.acknowledge(message, AcknowledgeType.ACCEPT)
        slow.commit_sync()
    finally:
        other.close()
        slow.close()


_HOLDER = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import ShareConsumer
    consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([sys.argv[3]])
    while True:
        got = consumer.poll(1.0) or []
        if got:
            print(json.dumps([m.offset() for m in got]), flush=True)
            time.sleep(3600)  # holds its records until it is killed
""")


def test_a_consumer_killed_mid_batch_has_its_records_redelivered(broker: BrokerProcess) -> None:
    """kill -9 closes the member's connection: its locks are released at once, long before
    they would expire, and another member gets exactly those records."""
    topic = new_topic_name("killed")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "killed", **{"share.record.lock.duration.ms": "60000"})
    produce(broker.bootstrap, topic, 20)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, broker.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = json.loads(holder.stdout.readline())
        assert held == list(range(20))
    finally:
        holder.kill()
        holder.wait(10)
    survivor = share_consumer(broker.bootstrap, group, topic)
    try:
        started = time.monotonic()
        got = wait_until(lambda: poll_records(survivor), 30, "the killed member's records")
        assert time.monotonic() - started < 30  # well before the 60 s lock would end
        assert [(m.offset(), m.delivery_count()) for m in got] == [(o, 2) for o in range(20)]
    finally:
        survivor.close()


def test_growing_the_topic_keeps_the_locks_on_its_existing_partitions(
        broker: BrokerProcess) -> None:
    """librdkafka's 0171 do_test_partition_increase_during_consume: records acquired before
    CreatePartitions are acknowledged after it, once, and never delivered again."""
    topic = new_topic_name("grow")
    create_topic(broker.bootstrap, topic)
    group = share_group(broker.bootstrap, "grow", **{"share.record.lock.duration.ms": "60000"})
    produce(broker.bootstrap, topic, 10)
    consumer = share_consumer(broker.bootstrap, group, topic,
                              **{"share.acknowledgement.mode": "explicit"})
    try:
        held = wait_until(lambda: poll_records(consumer), 30, "the first delivery")
        assert [m.offset() for m in held] == list(range(10))
        admin = confluent_admin(broker.bootstrap)
        for future in admin.create_partitions([NewPartitions(topic, 2)]).values():
            future.result(20)
        wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
                   == 2, 30, "the grown topic")
        for message in held:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        assert [(m.partition(), m.offset(), m.delivery_count())
                for m in poll_records(consumer, 2.0)] == []
    finally:
        consumer.close()


def test_a_share_partition_still_loading_does_not_hold_up_the_others(
        broker: BrokerProcess) -> None:
    """librdkafka's 0179 do_test_destroy_with_explicit_ack, as Kafka 4.2 answers it: a new
    group's first ShareFetch hands out the records of the first share-partition that is
    loaded, without waiting for the second; that one's records come with the next fetch."""
    topic = new_topic_name("loading")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = share_group(broker.bootstrap, "loading")
    produce_to_each(broker.bootstrap, topic, (0, 1), 10)
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        first = wait_until(lambda: poll_records(consumer), 30, "the first delivery")
        second = wait_until(lambda: poll_records(consumer), 30, "the second delivery")
        assert [len(first), len(second)] == [10, 10]
        assert {m.partition() for m in first} != {m.partition() for m in second}
        assert sorted((m.partition(), m.offset()) for m in first + second) == [
            (p, o) for p in (0, 1) for o in range(10)]
    finally:
        consumer.close()
