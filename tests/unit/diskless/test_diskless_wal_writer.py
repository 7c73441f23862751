"""WalWriter: buffering, upload triggers, per-coordinator commits, ordering, errors, backpressure.

The coordinator is a fake (another helper's component); the store is the real local store,
wrapped only to hold chosen uploads at a gate.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.diskless.object_store import ObjectStore
from kafka_ext.diskless.wal_writer import WRITE_AHEAD_MULTI_SEGMENT, AppendResult, WalWriter
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import read_batch_header
from kafka_ext.protocol.records import build_batch, decode_records, records_for

_Response: Any = registry()["DisklessCommitFileResponse"].cls
_Result: Any = _Response.DisklessCommitBatchResult

TOPIC = uuid.UUID(int=7)
OTHER_TOPIC = uuid.UUID(int=8)
FAR_MS = 60_000  # a max_ms that never fires within a test


def batch(
    *values: bytes, producer_id: int = -1, base_sequence: int = -1, timestamp_ms: int = 1_000
) -> memoryview:
    return memoryview(
        build_batch(
            records_for(values, timestamp_ms=timestamp_ms),
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=base_sequence,
        )
    )


class FakeCoordinators:
    """Assigns consecutive offsets per partition; can answer errors per partition or raise per coordinator."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.next_offset: dict[tuple[uuid.UUID, int], int] = {}
        self.errors: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        self.raises: dict[int, BaseException] = {}
        self.duplicates: set[tuple[uuid.UUID, int]] = set()
        self.gate: asyncio.Event | None = None

    @staticmethod
    def coordinator_of(topic_id: uuid.UUID, partition: int) -> int:
        return -1 if partition < 0 else partition % 3

    async def commit_file(self, request: Any) -> Any:
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        coordinator_id = self.coordinator_of(
            request.batches[0].topic_id, request.batches[0].partition_index
        )
        if coordinator_id in self.raises:
            raise self.raises[coordinator_id]
        results = []
        for entry in request.batches:
            tp = (entry.topic_id, entry.partition_index)
            if tp in self.errors:
                results.append(
                    _Result(
                        error_code=self.errors[tp],
                        assigned_base_offset=-1,
                        log_append_time=-1,
                        log_start_offset=-1,
                    )
                )
            elif tp in self.duplicates:
                results.append(
                    _Result(
                        assigned_base_offset=0,
                        log_append_time=5,
                        log_start_offset=0,
                        is_duplicate=True,
                    )
                )
            else:
                base = self.next_offset.get(tp, 0)
                self.next_offset[tp] = base + entry.last_offset + 1
                results.append(
                    _Result(assigned_base_offset=base, log_append_time=4_242, log_start_offset=0)
                )
        return _Response(batches=results)

    def coordinators_called(self) -> list[int]:
        return [
            self.coordinator_of(r.batches[0].topic_id, r.batches[0].partition_index)
            for r in self.requests
        ]


class GatedStore(ObjectStore):
    """The real local store whose uploads of chosen keys wait at a gate (a slow first upload)."""

    def __init__(self, root: Path) -> None:
        inner = ObjectStore.from_url(f"file://{root}")
        super().__init__(inner._store, inner.description)
        self.hold: Callable[[str], bool] = lambda key: False
        self.gate = asyncio.Event()
        self.put_keys: list[str] = []  # in order of completion
        self.put_done = asyncio.Event()

    async def put(self, key: str, data: bytes | memoryview) -> None:
        if self.hold(key):
            await self.gate.wait()
        await super().put(key, data)
        self.put_keys.append(key)
        self.put_done.set()


@pytest.fixture
def store(tmp_path: Path) -> GatedStore:
    return GatedStore(tmp_path / "objects")


@pytest.fixture
def coordinators() -> FakeCoordinators:
    return FakeCoordinators()


def writer_for(store: ObjectStore, coordinators: FakeCoordinators, **kwargs: Any) -> WalWriter:
    options: dict[str, Any] = {"broker_id": 1, "max_bytes": 1 << 20, "max_ms": 5}
    options.update(kwargs)
    return WalWriter(store, coordinators.commit_file, coordinators.coordinator_of, **options)


async def test_object_is_uploaded_when_it_reaches_max_bytes(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    first, second = batch(b"a"), batch(b"b", b"c")
    writer = writer_for(store, coordinators, max_bytes=len(first) + len(second), max_ms=FAR_MS)
    results = await asyncio.gather(writer.append(TOPIC, 0, first), writer.append(TOPIC, 0, second))
    assert results == [AppendResult(0, 4_242, 0), AppendResult(1, 4_242, 0)]
    [request] = coordinators.requests
    data = bytes(await store.get(request.object_key))
    assert data == bytes(first) + bytes(second)
    assert request.file_size == len(data) and request.object_format == WRITE_AHEAD_MULTI_SEGMENT
    assert [(b.byte_offset, b.size) for b in request.batches] == [
        (0, len(first)),
        (len(first), len(second)),
    ]
    assert writer.objects_uploaded == 1 and writer.bytes_uploaded == len(data)
    await writer.close()


async def test_object_is_uploaded_max_ms_after_its_first_batch(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    writer = writer_for(store, coordinators, max_bytes=1 << 30, max_ms=5)
    assert await writer.append(TOPIC, 0, batch(b"only")) == AppendResult(0, 4_242, 0)
    [request] = coordinators.requests
    assert (
        request.object_key.startswith("wal/")
        and len(request.object_key) == len("wal/") + 13 + 1 + 32
    )
    await writer.close()


async def test_commit_batch_fields_come_from_the_batch_header(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = batch(b"x", b"y", b"z", producer_id=77, base_sequence=10, timestamp_ms=123_456)
    writer = writer_for(store, coordinators)
    await writer.append(OTHER_TOPIC, 4, produced)
    [entry] = coordinators.requests[0].batches
    header = read_batch_header(produced)
    assert (entry.magic, entry.topic_id, entry.partition_index) == (2, OTHER_TOPIC, 4)
    assert (entry.base_offset, entry.last_offset) == (0, 2)
    assert (entry.batch_max_timestamp, entry.timestamp_type) == (123_456, 0)
    assert (entry.producer_id, entry.producer_epoch, entry.base_sequence, entry.last_sequence) == (
        77,
        0,
        10,
        12,
    )
    assert entry.size == header.size_bytes and entry.request_id == 0
    await writer.close()


async def test_batches_are_grouped_per_coordinator_with_one_permuted_owner_list(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = {partition: batch(b"p%d" % partition) for partition in range(6)}
    total = sum(len(b) for b in produced.values())
    writer = writer_for(store, coordinators, max_bytes=total, max_ms=FAR_MS)
    coordinators.next_offset = {(TOPIC, partition): 100 * partition for partition in range(6)}
    results = await asyncio.gather(*(writer.append(TOPIC, p, b) for p, b in produced.items()))
    assert [r.base_offset for r in results] == [100 * p for p in range(6)]
    assert sorted(coordinators.coordinators_called()) == [0, 1, 2]
    keys = {r.object_key for r in coordinators.requests}
    owner_lists = {tuple(r.owner_ids) for r in coordinators.requests}
    assert len(keys) == 1 and len(owner_lists) == 1 and sorted(next(iter(owner_lists))) == [0, 1, 2]
    for request in coordinators.requests:
        coordinator_id = coordinators.coordinator_of(TOPIC, request.batches[0].partition_index)
        assert {b.partition_index % 3 for b in request.batches} == {coordinator_id}
        # RequestId maps each result back to its batch's position in the object
        object_bytes = bytes(await store.get(request.object_key))
        for entry in request.batches:
            piece = object_bytes[entry.byte_offset : entry.byte_offset + entry.size]
            assert piece == bytes(produced[entry.partition_index])
            assert entry.request_id == entry.partition_index
    await writer.close()


async def test_owner_lists_are_randomly_permuted(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    random.seed(1164)
    orders = set()
    for _ in range(12):
        pair = [batch(b"a"), batch(b"b"), batch(b"c")]
        writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in pair), max_ms=FAR_MS)
        coordinators.requests.clear()
        await asyncio.gather(*(writer.append(TOPIC, p, b) for p, b in enumerate(pair)))
        orders.add(tuple(coordinators.requests[0].owner_ids))
        await writer.close()
    assert len(orders) > 1 and all(sorted(order) == [0, 1, 2] for order in orders)


async def test_commits_keep_object_order_when_uploads_overlap(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    first, second = batch(b"first"), batch(b"second")
    writer = writer_for(
        store, coordinators, max_bytes=1, max_ms=FAR_MS, max_pending_bytes=1 << 20
    )  # an object per batch
    first_key: list[str] = []

    def hold_first_upload(key: str) -> bool:
        if first_key:
            return False
        first_key.append(key)
        return True

    store.hold = hold_first_upload
    first_append = asyncio.ensure_future(writer.append(TOPIC, 0, first))
    second_append = asyncio.ensure_future(writer.append(TOPIC, 0, second))
    await store.put_done.wait()
    assert store.put_keys != first_key  # the second object is uploaded while the first waits
    for _ in range(5):
        await asyncio.sleep(0)
    assert (
        coordinators.requests == [] and not second_append.done()
    )  # its commit waits for the first's
    store.gate.set()
    assert (await first_append, await second_append) == (
        AppendResult(0, 4_242, 0),
        AppendResult(1, 4_242, 0),
    )
    assert [r.object_key for r in coordinators.requests] == [first_key[0], store.put_keys[0]]
    assert store.put_keys[1] == first_key[0]
    await writer.close()


async def test_upload_failure_answers_kafka_storage_error_and_commits_nothing(
    coordinators: FakeCoordinators, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.s3_server import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    unreachable = ObjectStore.from_url("s3://bucket/prefix", max_retries=0)
    writer = writer_for(unreachable, coordinators)
    outcomes = await asyncio.gather(
        writer.append(TOPIC, 0, batch(b"a")),
        writer.append(TOPIC, 1, batch(b"b")),
        return_exceptions=True,
    )
    assert all(
        isinstance(o, KafkaError) and o.code == ErrorCode.KAFKA_STORAGE_ERROR for o in outcomes
    )
    assert ErrorCode.KAFKA_STORAGE_ERROR.retriable
    assert (
        coordinators.requests == [] and writer.objects_uploaded == 0 and writer.pending_bytes == 0
    )
    await writer.close()


async def test_commit_errors_are_answered_per_batch_and_mapped(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    coordinators.errors[(TOPIC, 0)] = ErrorCode.NOT_COORDINATOR
    coordinators.errors[(TOPIC, 3)] = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    coordinators.errors[(TOPIC, 1)] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    coordinators.errors[(TOPIC, 4)] = ErrorCode.DISKLESS_COORDINATOR_ERROR
    produced = [batch(b"%d" % p) for p in range(6)]
    writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in produced), max_ms=FAR_MS)
    outcomes = await asyncio.gather(
        *(writer.append(TOPIC, p, b) for p, b in enumerate(produced)), return_exceptions=True
    )
    codes = [o.code if isinstance(o, KafkaError) else o for o in outcomes]
    assert codes == [
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        AppendResult(0, 4_242, 0),
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.KAFKA_STORAGE_ERROR,  # our own code, which stock producers cannot read
        AppendResult(0, 4_242, 0),
    ]
    assert len(await store.list("wal/")) == 1  # batches were accepted: the object stays
    await writer.close()


async def test_a_failing_commit_call_fails_only_that_coordinators_batches(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    coordinators.raises[1] = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "moving")
    coordinators.raises[2] = ConnectionResetError("peer went away")
    produced = [batch(b"%d" % p) for p in range(3)]
    writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in produced), max_ms=FAR_MS)
    outcomes = await asyncio.gather(
        *(writer.append(TOPIC, p, b) for p, b in enumerate(produced)), return_exceptions=True
    )
    assert outcomes[0] == AppendResult(0, 4_242, 0)
    assert [o.code for o in outcomes[1:] if isinstance(o, KafkaError)] == [
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    ] * 2
    await writer.close()


async def test_an_object_no_coordinator_accepted_is_deleted(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    coordinators.errors[(TOPIC, 0)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    coordinators.duplicates.add((TOPIC, 1))
    produced = [batch(b"a"), batch(b"b")]
    writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in produced), max_ms=FAR_MS)
    outcomes = await asyncio.gather(
        *(writer.append(TOPIC, p, b) for p, b in enumerate(produced)), return_exceptions=True
    )
    assert (
        isinstance(outcomes[0], KafkaError)
        and outcomes[0].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert outcomes[1] == AppendResult(0, 5, 0)  # a duplicate gets the original's offsets
    await writer.close()
    assert store.put_keys and await store.list("wal/") == []


async def test_an_object_whose_commit_outcome_is_unknown_is_kept(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    coordinators.raises[0] = TimeoutError("no answer")  # the coordinator may have committed it
    writer = writer_for(store, coordinators)
    with pytest.raises(KafkaError):
        await writer.append(TOPIC, 0, batch(b"a"))
    await writer.close()
    assert [info.key for info in await store.list("wal/")] == store.put_keys


async def test_appends_wait_when_pending_bytes_reach_the_bound(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = [batch(b"%d" % i) for i in range(4)]
    size = len(produced[0])
    writer = writer_for(store, coordinators, max_bytes=1, max_ms=FAR_MS, max_pending_bytes=2 * size)
    store.hold = lambda key: True  # the store stalls
    appends = [asyncio.ensure_future(writer.append(TOPIC, 0, b)) for b in produced]
    for _ in range(10):
        await asyncio.sleep(0)
    assert writer.pending_bytes == 2 * size  # two objects uploading, two appends waiting
    assert not any(a.done() for a in appends) and store.put_keys == []
    store.gate.set()
    results = await asyncio.gather(*appends)
    assert [r.base_offset for r in results] == [0, 1, 2, 3]  # waiting appends kept their order
    assert writer.pending_bytes == 0 and writer.objects_uploaded == 4
    await writer.close()


async def test_a_cancelled_waiting_append_frees_its_place(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = [batch(b"%d" % i) for i in range(3)]
    size = len(produced[0])
    writer = writer_for(store, coordinators, max_bytes=1, max_ms=FAR_MS, max_pending_bytes=size)
    store.hold = lambda key: True
    first = asyncio.ensure_future(writer.append(TOPIC, 0, produced[0]))
    second = asyncio.ensure_future(writer.append(TOPIC, 0, produced[1]))
    third = asyncio.ensure_future(writer.append(TOPIC, 0, produced[2]))
    for _ in range(5):
        await asyncio.sleep(0)
    second.cancel()
    store.gate.set()
    assert (await first).base_offset == 0 and (await third).base_offset == 1
    assert second.cancelled() and writer.pending_bytes == 0
    await writer.close()


async def test_close_flushes_the_buffer_and_later_appends_fail(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    writer = writer_for(store, coordinators, max_bytes=1 << 30, max_ms=FAR_MS)
    pending = asyncio.ensure_future(writer.append(TOPIC, 0, batch(b"last")))
    await asyncio.sleep(0)
    await writer.close()
    assert await pending == AppendResult(0, 4_242, 0)
    with pytest.raises(KafkaError) as raised:
        await writer.append(TOPIC, 0, batch(b"late"))
    assert raised.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_partition_without_coordinator_is_refused_before_buffering(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    writer = writer_for(store, coordinators)
    with pytest.raises(KafkaError) as raised:
        await writer.append(TOPIC, -1, batch(b"x"))
    assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and writer.pending_bytes == 0
    await writer.close()


async def test_uploaded_object_holds_the_producers_batches_intact(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = [batch(b"v%d" % i, b"w%d" % i) for i in range(3)]
    writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in produced), max_ms=FAR_MS)
    await asyncio.gather(*(writer.append(TOPIC, i, b) for i, b in enumerate(produced)))
    data = await store.get(coordinators.requests[0].object_key)
    pos = 0
    for i in range(3):
        header, records = decode_records(data, pos)
        assert [r.value for r in records] == [b"v%d" % i, b"w%d" % i]
        pos += header.size_bytes
    await writer.close()


async def test_close_refuses_appends_waiting_for_space(
    store: GatedStore, coordinators: FakeCoordinators
) -> None:
    produced = [batch(b"%d" % i) for i in range(2)]
    writer = writer_for(
        store, coordinators, max_bytes=1, max_ms=FAR_MS, max_pending_bytes=len(produced[0])
    )
    store.hold = lambda key: True
    first = asyncio.ensure_future(writer.append(TOPIC, 0, produced[0]))
    waiting = asyncio.ensure_future(writer.append(TOPIC, 0, produced[1]))
    for _ in range(5):
        await asyncio.sleep(0)
    closing = asyncio.ensure_future(writer.close())
    for _ in range(5):
        await asyncio.sleep(0)
    store.gate.set()
    await closing
    assert (await first).base_offset == 0
    with pytest.raises(KafkaError) as raised:
        await waiting
    assert raised.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and writer.pending_bytes == 0


async def test_store_outage_fails_appends_retriably_then_recovers(
    tmp_path: Path, coordinators: FakeCoordinators, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.s3_server import run_s3_server

    with run_s3_server(tmp_path) as s3:
        for key, value in s3.env.items():
            monkeypatch.setenv(key, value)
        writer = writer_for(ObjectStore.from_url(s3.url), coordinators)
        assert (await writer.append(TOPIC, 0, batch(b"before"))).base_offset == 0
        with s3.unreachable():
            with pytest.raises(KafkaError) as raised:
                await writer.append(TOPIC, 0, batch(b"during"))
            assert (
                raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR and raised.value.code.retriable
            )
        assert (await writer.append(TOPIC, 0, batch(b"after"))).base_offset == 1
        await writer.close()
        committed = [r.object_key for r in coordinators.requests]
        listed = {info.key for info in await ObjectStore.from_url(s3.url).list("wal/")}
        assert len(committed) == 2 and set(committed) == listed


async def test_an_unexpected_commit_failure_is_answered_and_others_still_commit(
    store: GatedStore, coordinators: FakeCoordinators, caplog: pytest.LogCaptureFixture
) -> None:
    coordinators.raises[1] = RuntimeError("a bug in the coordinator")
    produced = [batch(b"a"), batch(b"b")]
    writer = writer_for(store, coordinators, max_bytes=sum(len(b) for b in produced), max_ms=FAR_MS)
    outcomes = await asyncio.gather(
        *(writer.append(TOPIC, p, b) for p, b in enumerate(produced)), return_exceptions=True
    )
    assert outcomes[0] == AppendResult(0, 4_242, 0)
    assert (
        isinstance(outcomes[1], KafkaError) and outcomes[1].code == ErrorCode.UNKNOWN_SERVER_ERROR
    )
    assert "failed unexpectedly" in caplog.text
    following = asyncio.ensure_future(writer.append(TOPIC, 0, batch(b"next")))
    await asyncio.sleep(0)
    await writer.close()  # flushes the next object, whose commit is not blocked
    assert (await following).base_offset == 1
