"""Our own client (`kafka_ext.client`) against the real broker.

Producer and consumer round trips with content, order and offsets; keys in the partitions Java's
partitioner picks; every codec; acks 0/1; an idempotent resend after a lost answer stored once
(a TCP proxy swallows the answer); a group of two members splitting and taking over partitions;
commits surviving a restart; seeks by offset and time; the admin calls; pipelined requests on
one connection. Then the proposals: KIP-253 (the producer places keyed records again when
partitions were added; a lagging group of one and of two members returns every key in order
across an expansion; the console tools do too) and partition reduction (DeletePartitions,
ReadOnly partitions skipped by producers and still read, None partitions not read).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import confluent_kafka
import pytest

from kafka_ext.client import (
    Admin,
    AdminError,
    Consumer,
    ConsumerRecord,
    NewTopic,
    PartitionMode,
    Producer,
    TopicPartition,
)
from kafka_ext.client.connection import BrokerConnection
from kafka_ext.client.partitioner import partition_for_key
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import TimestampType
from tests.integration.conftest import BrokerProcess
from tests.integration.test_cli import kafka_ext, ok

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "200"}
DEADLINE_S = 60.0
FAST_GROUP: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200}
REDUCTION_OVERRIDES = {"delete.topic.partition.enable": "true"}


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1, configs)])


async def eventually(check: Callable[[], Awaitable[Any]], what: str,
                     timeout_s: float = DEADLINE_S) -> Any:
    """Await `check()` until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)


async def read(consumer: Consumer, count: int, *, max_records: int | None = None,
               timeout_s: float = DEADLINE_S) -> list[ConsumerRecord]:
    """Poll until `count` records came (or fail at the deadline)."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"read {len(records)} of {count} records in {timeout_s}s")
        records += await consumer.poll(200, max_records=max_records)
    return records


# --- producing and consuming -------------------------------------------------------------------


async def test_round_trip_keeps_content_order_and_offsets(broker: BrokerProcess) -> None:
    topic = name("ours-round-trip")
    await create(broker.bootstrap, topic, 3)
    sent: dict[int, list[tuple[int, bytes, bytes, tuple[tuple[str, bytes | None], ...], int]]]
    sent = defaultdict(list)
    base_ms = 1_700_000_000_000
    async with Producer(broker.bootstrap) as producer:
        futures = []
        for i in range(300):
            key, value = b"key-%d" % (i % 10), b"value-%d" % i
            headers = (("n", b"%d" % i), ("empty", None))
            futures.append((key, value, headers, base_ms + i, await producer.enqueue(
                topic, value, key=key, headers=list(headers), timestamp_ms=base_ms + i)))
        for key, value, headers, stamp, future in futures:
            partition, offset = await future
            assert partition == partition_for_key(key, [0, 1, 2])
            sent[partition].append((offset, key, value, headers, stamp))
    async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        records = await read(consumer, 300)
    got: dict[int, list[Any]] = defaultdict(list)
    for r in records:
        assert r.timestamp_type == TimestampType.CREATE_TIME
        got[r.partition].append((r.offset, r.key, r.value, r.headers, r.timestamp))
    assert dict(got) == dict(sent)
    for rows in got.values():
        assert [row[0] for row in rows] == list(range(len(rows)))


async def test_keyed_records_land_where_javas_partitioner_puts_them(broker: BrokerProcess) -> None:
    topic = name("ours-murmur2")
    await create(broker.bootstrap, topic, 5)
    keys = [b"user-%d" % i for i in range(40)]
    stock: dict[bytes | None, int | None] = {}
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(topic, b"v", key=key,
                         on_delivery=lambda err, msg: stock.__setitem__(msg.key(), msg.partition()))
    assert producer.flush(30) == 0
    async with Producer(broker.bootstrap) as ours:
        placed: dict[bytes | None, int | None] = {
            key: (await ours.send(topic, b"v", key=key)).partition for key in keys}
    assert placed == stock


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_every_compression_codec_round_trips(broker: BrokerProcess, codec: str) -> None:
    topic = name(f"ours-{codec}")
    await create(broker.bootstrap, topic, 1)
    values = [b"%s record %d " % (codec.encode(), i) * 20 for i in range(200)]
    async with Producer(broker.bootstrap, compression=codec, linger_ms=20) as producer:
        offsets = [o for _, o in await asyncio.gather(*(producer.send(topic, v) for v in values))]
    assert offsets == list(range(200))
    async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [r.value for r in await read(consumer, 200)] == values


@pytest.mark.parametrize("acks", [0, 1])
async def test_acks_zero_and_one_deliver(broker: BrokerProcess, acks: int) -> None:
    topic = name(f"ours-acks{acks}")
    await create(broker.bootstrap, topic, 1)
    async with Producer(broker.bootstrap, acks=acks) as producer:
        results = await asyncio.gather(*(producer.send(topic, b"%d" % i) for i in range(20)))
    assert [o for _, o in results] == ([-1] * 20 if acks == 0 else list(range(20)))
    async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [r.value for r in await read(consumer, 20)] == [b"%d" % i for i in range(20)]


class AnswerSwallowingProxy:
    """A TCP relay in front of the broker that, when armed, lets one Produce request through
    and swallows its answer, then cuts the connection: the producer cannot know the batch was
    stored (asyncpg's adversity proxy does the same to its server)."""

    def __init__(self) -> None:
        self.target_port = 0
        self.armed = False
        self.cuts = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        sent: list[int] = []  # api key of each request forwarded, in order
        cut_at: list[int] = []

        async def upstream() -> None:
            while True:
                frame = await _frame(client_r)
                if frame is None:
                    break
                (api_key,) = struct.unpack_from(">h", frame, 4)
                if api_key == ApiKey.PRODUCE and self.armed:
                    self.armed = False
                    cut_at.append(len(sent))
                sent.append(api_key)
                broker_w.write(frame)
                await broker_w.drain()

        async def downstream() -> None:
            answered = 0
            while True:
                frame = await _frame(broker_r)
                if frame is None:
                    break
                if cut_at and answered == cut_at[0]:
                    self.cuts += 1
                    break  # the Produce answer: swallowed, and the connection cut
                answered += 1
                client_w.write(frame)
                await client_w.drain()

        try:
            await asyncio.wait([asyncio.ensure_future(upstream()),
                                asyncio.ensure_future(downstream())],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            client_w.close()
            broker_w.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readexactly(4)
        return head + await reader.readexactly(struct.unpack(">i", head)[0])
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def test_idempotent_resend_after_a_lost_answer_is_stored_once(broker_factory: Any) -> None:
    proxy = AnswerSwallowingProxy()
    port = await proxy.start()
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    proxy.target_port = broker.port
    try:
        topic = name("ours-idempotent")
        await create(f"127.0.0.1:{port}", topic, 1)
        async with Producer(f"127.0.0.1:{port}", retry_backoff_ms=50) as producer:
            assert await producer.send(topic, b"first") == (0, 0)
            proxy.armed = True
            assert await producer.send(topic, b"second") == (0, 1)  # sent twice, stored once
            assert await producer.send(topic, b"third") == (0, 2)
        assert proxy.cuts == 1
        async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            records = await read(consumer, 3)
            assert await consumer.poll(500) == []
        assert [(r.offset, r.value) for r in records] == [(0, b"first"), (1, b"second"),
                                                          (2, b"third")]
    finally:
        await proxy.close()


async def test_many_requests_in_flight_on_one_connection_are_answered_in_order(
        broker: BrokerProcess) -> None:
    conn = BrokerConnection("127.0.0.1", broker.port)
    await conn.connect()
    try:
        # Our client's name shows it the proposals' APIs.
        assert ApiKey.LEADER_EPOCHS_FOR_PARTITION in conn.api_versions
        Metadata = registry()["MetadataRequest"].cls
        ApiVersions = registry()["ApiVersionsRequest"].cls
        answers = await asyncio.gather(*(
            conn.request(ApiKey.METADATA, Metadata(topics=[], allow_auto_topic_creation=False),
                         version=12) if i % 2 else
            conn.request(ApiKey.API_VERSIONS, ApiVersions(client_software_name="kafka-ext-client",
                                                          client_software_version="0.1.0"),
                         version=3)
            for i in range(60)))
        assert all(hasattr(a, "brokers") == bool(i % 2) for i, a in enumerate(answers))
    finally:
        await conn.close()


# --- groups, commits, seeks --------------------------------------------------------------------


async def test_two_members_split_the_partitions_and_one_takes_over_when_the_other_leaves(
        broker_factory: Any) -> None:
    broker = broker_factory(GROUP_OVERRIDES)
    topic, group = name("ours-group"), name("group")
    await create(broker.bootstrap, topic, 4)
    async with Producer(broker.bootstrap) as producer:
        for i in range(40):
            await producer.enqueue(topic, b"before-%d" % i, partition=i % 4)
        await producer.flush()
    everything = {TopicPartition(topic, p) for p in range(4)}
    # Auto-commit commits what was returned before giving partitions up in a rebalance, so
    # the new owner goes on where the old one stopped: every record is returned once.
    first = Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                     auto_commit_interval_ms=60_000, **FAST_GROUP)
    second = Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                      auto_commit_interval_ms=60_000, **FAST_GROUP)
    try:
        first.subscribe([topic])
        assert len(await read(first, 40)) == 40
        assert first.assignment() == everything
        await first.commit()
        async with Producer(broker.bootstrap) as producer:
            for i in range(40):
                await producer.enqueue(topic, b"after-%d" % i, partition=i % 4)
            await producer.flush()
        second.subscribe([topic])
        seen: dict[str, list[ConsumerRecord]] = {"first": [], "second": []}

        async def split() -> bool:
            for label, consumer in (("first", first), ("second", second)):
                seen[label] += await consumer.poll(50)
            a, b = first.assignment(), second.assignment()
            return (len(a) == 2 and len(b) == 2 and a | b == everything
                    and len(seen["first"]) + len(seen["second"]) >= 40)

        await eventually(split, "two members with two partitions each and the 40 new records")
        values = [r.value or b"" for label in seen for r in seen[label]]
        assert sorted(values) == sorted(b"after-%d" % i for i in range(40))  # each once
        await second.close()

        async def took_over() -> bool:
            await first.poll(50)
            return first.assignment() == everything

        await eventually(took_over, "the remaining member to own every partition")
    finally:
        await first.close()
        await second.close()


async def test_committed_offsets_survive_a_consumer_restart(broker_factory: Any) -> None:
    broker = broker_factory(GROUP_OVERRIDES)
    topic, group = name("ours-commit"), name("group")
    await create(broker.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    async with Producer(broker.bootstrap) as producer:
        await asyncio.gather(*(producer.send(topic, b"%d" % i) for i in range(50)))
    async with Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, **FAST_GROUP) as consumer:
        consumer.subscribe([topic])
        first = await read(consumer, 25, max_records=25)
        assert [r.offset for r in first] == list(range(25))
        await consumer.commit()
        assert await consumer.committed(tp) == 25
    # Auto-commit commits on close what was returned.
    async with Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                        **FAST_GROUP) as consumer:
        consumer.subscribe([topic])
        second = await read(consumer, 10, max_records=10)
        assert [r.offset for r in second] == list(range(25, 35))
    async with Consumer(broker.bootstrap, group_id=group, auto_offset_reset="latest",
                        **FAST_GROUP) as consumer:
        consumer.subscribe([topic])
        third = await read(consumer, 15)
        assert [r.offset for r in third] == list(range(35, 50))


async def test_seek_by_offset_and_by_time(broker: BrokerProcess) -> None:
    topic = name("ours-seek")
    await create(broker.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    base_ms = 1_700_000_000_000
    async with Producer(broker.bootstrap) as producer:
        for i in range(20):
            await producer.enqueue(topic, b"%d" % i, timestamp_ms=base_ms + 1000 * i)
        await producer.flush()
    async with Consumer(broker.bootstrap) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 20  # auto_offset_reset=latest
        consumer.seek(tp, 12)
        assert [r.offset for r in await read(consumer, 3, max_records=3)] == [12, 13, 14]
        assert await consumer.seek_to_time(tp, base_ms + 5500) == {tp: 6}
        assert (await read(consumer, 1, max_records=1))[0].value == b"6"
        assert await consumer.seek_to_time(tp, base_ms + 10**9) == {tp: 20}
        assert await consumer.poll(300) == []
        consumer.seek_to_beginning(tp)
        assert (await read(consumer, 1, max_records=1))[0].offset == 0


# --- admin -------------------------------------------------------------------------------------


async def test_admin_creates_grows_describes_lists_offsets_and_deletes(broker: BrokerProcess
                                                                        ) -> None:
    topic = name("ours-admin")
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2, 1, {"retention.ms": "3600000"})])
        with pytest.raises(AdminError) as exists:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        assert exists.value.errors[topic][0] == ErrorCode.TOPIC_ALREADY_EXISTS
        described = (await admin.describe_topics([topic]))[topic]
        assert sorted(described.partitions) == [0, 1]
        assert {p.mode for p in described.partitions.values()} == {PartitionMode.READ_WRITE}
        await admin.create_partitions({topic: 3})

        async def grown() -> bool:
            return (await admin.describe_topics([topic]))[topic].partition_count == 3

        await eventually(grown, "three partitions")
        async with Producer(broker.bootstrap) as producer:
            await asyncio.gather(*(producer.send(topic, b"v", partition=2) for _ in range(4)))
        offsets = await admin.list_offsets({TopicPartition(topic, 2): "earliest",
                                            TopicPartition(topic, 1): "latest"})
        assert offsets[TopicPartition(topic, 2)].offset == 0
        assert offsets[TopicPartition(topic, 1)].offset == 0
        latest = await admin.list_offsets({TopicPartition(topic, 2): "latest"})
        assert latest[TopicPartition(topic, 2)].offset == 4
        await admin.delete_topics([topic])

        async def gone() -> bool:
            try:
                await admin.describe_topics([topic])
            except AdminError as exc:
                return exc.errors[topic][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return False

        await eventually(gone, "the topic to be deleted")


async def test_leader_epochs_for_partition_names_the_epochs_before_an_expansion(
        broker: BrokerProcess) -> None:
    topic = name("ours-epochs")
    await create(broker.bootstrap, topic, 2)
    async with Admin(broker.bootstrap) as admin:
        before = (await admin.describe_topics([topic]))[topic]
        await admin.create_partitions({topic: 4})
        priors = await admin.leader_epochs_for_partition(
            [TopicPartition(topic, p) for p in range(4)])
    expected = {p: before.partitions[p].leader_epoch for p in (0, 1)}
    assert priors == {TopicPartition(topic, 0): {}, TopicPartition(topic, 1): {},
                      TopicPartition(topic, 2): expected, TopicPartition(topic, 3): expected}


# --- KIP-253 -----------------------------------------------------------------------------------


async def test_producer_places_keyed_records_again_after_partitions_are_added(
        broker: BrokerProcess) -> None:
    topic = name("ours-kip253-producer")
    await create(broker.bootstrap, topic, 2)
    keys = [b"key-%d" % i for i in range(20)]
    async with Producer(broker.bootstrap) as producer:
        before = [await producer.send(topic, b"before", key=k) for k in keys]
        assert [p for p, _ in before] == [partition_for_key(k, [0, 1]) for k in keys]
        async with Admin(broker.bootstrap) as admin:
            await admin.create_partitions({topic: 4})
        # The producer's metadata still says 2: the broker refuses that count, the producer
        # refreshes and places the keys under 4.
        after = await asyncio.gather(*(producer.send(topic, b"after", key=k) for k in keys))
    assert [p for p, _ in after] == [partition_for_key(k, [0, 1, 2, 3]) for k in keys]


async def keyed_history(bootstrap: str, topic: str, *, keys: int = 12, before: int = 120,
                        after: int = 120) -> None:
    """Keyed records `key-i -> seq` on 2 partitions, then an expansion to 4, then more: a
    group that had not read anything yet is lagging when the partitions are added."""
    await create(bootstrap, topic, 2)
    async with Producer(bootstrap, linger_ms=0) as producer:
        for seq in range(before):
            await producer.send(topic, b"%d" % seq, key=b"key-%d" % (seq % keys))
        async with Admin(bootstrap) as admin:
            await admin.create_partitions({topic: 4})
        for seq in range(before, before + after):
            await producer.send(topic, b"%d" % seq, key=b"key-%d" % (seq % keys))


def assert_every_key_in_order(records: list[ConsumerRecord]) -> None:
    by_key: dict[bytes | None, list[int]] = defaultdict(list)
    for r in records:
        assert r.value is not None
        by_key[r.key].append(int(r.value))
    for key, seqs in by_key.items():
        assert seqs == sorted(seqs), f"{key!r} out of order: {seqs}"


async def test_one_lagging_member_reads_every_key_in_order_across_an_expansion(
        broker_factory: Any) -> None:
    broker = broker_factory(GROUP_OVERRIDES)
    topic = name("ours-kip253-one")
    await keyed_history(broker.bootstrap, topic)
    async with Consumer(broker.bootstrap, group_id=name("group"), auto_offset_reset="earliest",
                        max_partition_fetch_bytes=512, **FAST_GROUP) as consumer:
        consumer.subscribe([topic])
        records: list[ConsumerRecord] = []
        gated: set[TopicPartition] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(records) < 240 and time.monotonic() < deadline:
            records += await consumer.poll(200, max_records=3)
            gated |= consumer.gated_partitions()
    assert len(records) == 240
    assert gated == {TopicPartition(topic, 2), TopicPartition(topic, 3)}
    assert_every_key_in_order(records)


async def test_two_members_read_every_key_in_order_across_an_expansion(
        broker_factory: Any) -> None:
    """The new partitions' owner learns the old partitions' positions from the other member
    through the group coordinator (Heartbeat's tagged fields); commits are off, so that is the
    only way it can learn them."""
    broker = broker_factory(GROUP_OVERRIDES)
    topic, group = name("ours-kip253-two"), name("group")
    await keyed_history(broker.bootstrap, topic)
    members = [Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, max_partition_fetch_bytes=512, **FAST_GROUP)
               for _ in range(2)]
    returned: list[ConsumerRecord] = []  # in the order the two members returned them
    gated: set[TopicPartition] = set()
    try:
        for member in members:
            member.subscribe([topic])

        async def both_assigned() -> bool:
            for member in members:
                returned.extend(await member.poll(20, max_records=1))
                gated.update(member.gated_partitions())
            return all(len(m.assignment()) == 2 for m in members)

        await eventually(both_assigned, "two partitions for each member")

        def first_reads() -> list[ConsumerRecord]:
            # A member alone in an earlier generation may have read a few records that the
            # final owners read again (no commits): only the first read of each counts.
            seen: set[tuple[int, int]] = set()
            out = []
            for r in returned:
                if (r.partition, r.offset) not in seen:
                    seen.add((r.partition, r.offset))
                    out.append(r)
            return out

        async def read_all() -> bool:
            for member in members:
                returned.extend(await member.poll(20, max_records=3))
                gated.update(member.gated_partitions())
            return len(first_reads()) >= 240

        await eventually(read_all, "every record")
    finally:
        for member in members:
            await member.close()
    assert len(first_reads()) == 240
    assert gated == {TopicPartition(topic, 2), TopicPartition(topic, 3)}
    assert_every_key_in_order(first_reads())


async def test_a_member_reading_during_an_expansion_rejoins_and_keeps_every_key_in_order(
        broker_factory: Any) -> None:
    """The partitions are added while the member reads: it notices them at its next metadata
    refresh, rejoins, and gates the new ones until the old ones are read up to the expansion."""
    broker = broker_factory(GROUP_OVERRIDES)
    topic = name("ours-kip253-live")
    await create(broker.bootstrap, topic, 2)
    producer = Producer(broker.bootstrap, linger_ms=0)
    consumer = Consumer(broker.bootstrap, group_id=name("group"), auto_offset_reset="earliest",
                        max_partition_fetch_bytes=512, metadata_max_age_ms=300, **FAST_GROUP)
    records: list[ConsumerRecord] = []
    try:
        for seq in range(120):
            await producer.send(topic, b"%d" % seq, key=b"key-%d" % (seq % 12))
        consumer.subscribe([topic])
        records += await read(consumer, 30, max_records=3)  # lagging: 90 old records unread
        async with Admin(broker.bootstrap) as admin:
            await admin.create_partitions({topic: 4})
        await producer.topic_metadata(topic)
        for seq in range(120, 240):
            await producer.send(topic, b"%d" % seq, key=b"key-%d" % (seq % 12))
        records += await read(consumer, 240 - len(records), max_records=3)
        assert len(consumer.assignment()) == 4
    finally:
        await producer.close()
        await consumer.close()
    # Auto-commit committed what was returned before the rebalance: nothing is read twice.
    assert sorted(int(r.value or b"") for r in records) == list(range(240))
    assert_every_key_in_order(records)


def test_console_tools_keep_every_key_in_order_across_an_expansion(broker_factory: Any) -> None:
    broker = broker_factory(GROUP_OVERRIDES)
    topic = name("ours-kip253-console")
    ok(kafka_ext("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic,
                 "--partitions", "2", "--replication-factor", "1"))

    def produce(seqs: range) -> None:
        lines = b"".join(b"key-%d:%d\n" % (seq % 8, seq) for seq in seqs)
        ok(kafka_ext("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     "--timeout", "0", stdin=lines))

    produce(range(80))
    ok(kafka_ext("topics", "--bootstrap-server", broker.bootstrap, "--alter", "--topic", topic,
                 "--partitions", "4"))
    produce(range(80, 160))
    out = ok(kafka_ext("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
                       topic, "--group", name("group"), "--from-beginning", "--max-messages",
                       "160", "--property", "print.key=true", "--property", "key.separator=:",
                       "--consumer-property", "max.partition.fetch.bytes=256"))
    rows = [line.split(":") for line in out.splitlines()]
    assert len(rows) == 160
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, seq in rows:
        by_key[key].append(int(seq))
    assert all(seqs == sorted(seqs) for seqs in by_key.values()), by_key


# --- partition reduction -----------------------------------------------------------------------

async def test_deleted_partitions_turn_readonly_and_producers_skip_them(
        broker_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka_ext.client.producer")
    broker = broker_factory(REDUCTION_OVERRIDES)
    topic = name("ours-reduce")
    await create(broker.bootstrap, topic, 4)
    async with Producer(broker.bootstrap) as producer:
        stale = Producer(broker.bootstrap)  # learns the topic now, before the reduction
        await stale.start()
        await stale.topic_metadata(topic)
        await producer.send(topic, b"old", partition=3)
        async with Admin(broker.bootstrap) as admin:
            results = await admin.delete_partitions({topic: [2, 3]}, delay_ms=600_000)
            assert {p: r.mode for p, r in results[topic].items()} == {
                2: PartitionMode.READ_ONLY, 3: PartitionMode.READ_ONLY}
            described = (await admin.describe_topics([topic]))[topic]
            assert [described.partitions[p].mode for p in range(4)] == [
                PartitionMode.READ_WRITE, PartitionMode.READ_WRITE, PartitionMode.READ_ONLY,
                PartitionMode.READ_ONLY]
        keys = [b"k%d" % i for i in range(30)]
        fresh = await asyncio.gather(*(producer.send(topic, b"new", key=k) for k in keys),
                                     *(producer.send(topic, b"new") for _ in range(30)))
        assert {p for p, _ in fresh} <= {0, 1}
        # A producer that had not heard: refused for the ReadOnly partitions, it moves its keys.
        moved = await asyncio.gather(*(stale.send(topic, b"stale", key=k) for k in keys))
        assert [p for p, _ in moved] == [partition_for_key(k, [0, 1]) for k in keys]
        assert "PARTITION_NOT_WRITABLE" in caplog.text  # it was refused before it moved them
        await stale.close()
        with pytest.raises(KafkaError) as refused:
            await producer.send(topic, b"explicit", partition=3)
        assert refused.value.code == ErrorCode.PARTITION_NOT_WRITABLE
    async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 3)])  # ReadOnly partitions are still read
        assert [r.value for r in await read(consumer, 1)] == [b"old"]


async def test_a_group_does_not_read_partitions_deleted_at_once(broker_factory: Any) -> None:
    broker = broker_factory({**REDUCTION_OVERRIDES, **GROUP_OVERRIDES})
    topic = name("ours-reduce-now")
    await create(broker.bootstrap, topic, 3)
    async with Producer(broker.bootstrap) as producer:
        for p in range(3):
            await producer.send(topic, b"v%d" % p, partition=p)
    async with Admin(broker.bootstrap) as admin:
        await admin.delete_partitions({topic: [2]}, delay_ms=0)

        async def reduced() -> bool:
            meta = (await admin.describe_topics([topic]))[topic]
            return 2 not in meta.readable_partitions

        await eventually(reduced, "partition 2 to be None or gone")
    async with Consumer(broker.bootstrap, group_id=name("group"), auto_offset_reset="earliest",
                        **FAST_GROUP) as consumer:
        consumer.subscribe([topic])
        records = await read(consumer, 2)
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assert sorted(r.value or b"" for r in records) == [b"v0", b"v1"]
