"""WalWriter: buffers the produced batches of all diskless partitions into shared WAL objects.

KIP-1163's produce path (issue 7 point 2): batches from any diskless partition are appended to
one open object; it is sealed when it reaches `max_bytes` or `max_ms` after its first batch,
uploaded, then committed with DisklessCommitFile to each coordinator owning some of its batches
(one request per coordinator, one randomly permuted OwnerIds list, KIP-1164 "WAL file
management"), and only then are the producers answered with the assigned offsets. Uploads of
successive objects overlap; commits happen strictly in object order, because a coordinator
checks idempotent sequences in the order it sees them. Batches stay opaque: the only copy is
joining them into the object.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.diskless.object_store import ObjectStore, ObjectStoreError
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import BatchHeader, read_batch_header

log = logging.getLogger(__name__)

_CommitFileRequest: Any = registry()["DisklessCommitFileRequest"].cls
_CommitBatch: Any = _CommitFileRequest.DisklessCommitBatch

WRITE_AHEAD_MULTI_SEGMENT = (
    1  # ObjectFormat of a WAL object: batches of many partitions back to back
)
WAL_PREFIX = "wal/"
PENDING_OBJECTS_BOUND = 4  # default bound on buffered + uploading bytes, in units of max_bytes
MIN_PENDING_BYTES = 32 << 20  # ...but never below this, so tiny objects still upload in parallel

# A coordinator that moved or is loading answers like a partition leader that moved: producers
# refresh metadata and retry on NOT_LEADER_OR_FOLLOWER, but not on the coordinator codes.
_PRODUCER_CODE: dict[ErrorCode, ErrorCode] = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_LEADER_OR_FOLLOWER,
}
_FIRST_EXTENSION_CODE = 1000  # our own codes, which stock producers do not know


def wal_object_key(now_ms: int) -> str:
    """`wal/<13-digit ms>-<uuid hex>`: unique, and sortable by creation time."""
    return f"{WAL_PREFIX}{now_ms:013d}-{uuid.uuid4().hex}"


def client_error_code(code: int) -> ErrorCode:
    """The code a client (producer, consumer, admin) should see for a coordinator's `code`.

    Coordinator moves become NOT_LEADER_OR_FOLLOWER; our own codes (>= 1000), which stock
    producers cannot read, become KAFKA_STORAGE_ERROR if retriable, else UNKNOWN_SERVER_ERROR.
    """
    try:
        known = ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    mapped = _PRODUCER_CODE.get(known, known)
    if mapped >= _FIRST_EXTENSION_CODE:
        return ErrorCode.KAFKA_STORAGE_ERROR if mapped.retriable else ErrorCode.UNKNOWN_SERVER_ERROR
    return mapped


@dataclass(slots=True, frozen=True)
class AppendResult:
    """What a coordinator assigned to one appended batch (a duplicate gets the original's)."""

    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


@dataclass(slots=True)
class _Entry:
    """One appended batch waiting in an object for its commit."""

    topic_id: uuid.UUID
    partition: int
    coordinator_id: int
    header: BatchHeader
    byte_offset: int
    size_bytes: int
    future: asyncio.Future[AppendResult]
    control_type: int = -1  # a transaction marker's type (0 ABORT, 1 COMMIT), else -1
    coordinator_epoch: int = -1  # a marker's transaction coordinator epoch


@dataclass(slots=True)
class _WalObject:
    """An object being filled, then uploaded and committed; `views` is dropped once joined."""

    created_ms: int
    entries: list[_Entry] = field(default_factory=list)
    views: list[memoryview] = field(default_factory=list)
    size_bytes: int = 0
    timer: asyncio.TimerHandle | None = None


class WalWriter:
    """The broker's single WAL buffer; used from one event loop only.

    Invariant: commits of object n+1 start only after every commit of object n has answered.
    Bytes of buffered and uploading objects stay under `max_pending_bytes`; appends beyond
    wait in arrival order, so a stalled store cannot eat memory.
    """

    def __init__(
        self,
        store: ObjectStore,
        commit_file: Callable[[Any], Awaitable[Any]],
        coordinator_of: Callable[[uuid.UUID, int], int],
        *,
        broker_id: int,
        max_bytes: int,
        max_ms: int,
        max_pending_bytes: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if max_bytes <= 0 or max_ms < 0:
            raise ValueError(f"max_bytes {max_bytes} and max_ms {max_ms} must be positive")
        self._store = store
        self._commit_file = commit_file
        self._coordinator_of = coordinator_of
        self.broker_id = broker_id
        self.max_bytes = max_bytes
        self.max_ms = max_ms
        self.max_pending_bytes = max_pending_bytes or max(
            PENDING_OBJECTS_BOUND * max_bytes, MIN_PENDING_BYTES
        )
        self._clock_ms = clock_ms or _wall_clock_ms
        self._open: _WalObject | None = None
        self._pending_bytes = 0  # buffered + uploading
        self._space_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._last_commit_done: asyncio.Future[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._closed = False
        self.objects_uploaded = 0
        self.bytes_uploaded = 0
        # Set by the broker's metrics (server/metrics.py): each object's upload and commit ms.
        self.observe_upload_ms: Callable[[float], None] = lambda ms: None
        self.observe_commit_ms: Callable[[float], None] = lambda ms: None

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered or uploading: what backpressure bounds."""
        return self._pending_bytes

    async def append(self, topic_id: uuid.UUID, partition: int, batch: memoryview, *,
                     control_type: int = -1, coordinator_epoch: int = -1) -> AppendResult:
        """Add one validated v2 batch; return its offsets once its coordinator committed it.
        A transaction marker (control batch) names its type and coordinator epoch, which the
        coordinator checks and records.

        Raises KafkaError: the coordinator's error for this batch (coordinator moves become
        NOT_LEADER_OR_FOLLOWER), KAFKA_STORAGE_ERROR when the upload failed.
        """
        coordinator_id = self._coordinator_of(topic_id, partition)
        if coordinator_id < 0:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{topic_id}-{partition} has no diskless coordinator",
            )
        header = read_batch_header(batch)
        size_bytes = header.size_bytes
        await self._reserve(size_bytes)
        if self._closed:
            self._release(size_bytes)
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the broker's WAL writer is closed")
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        wal_object = self._open
        if wal_object is None:
            wal_object = self._open = _WalObject(created_ms=self._clock_ms())
            wal_object.timer = asyncio.get_running_loop().call_later(
                self.max_ms / 1000, self._seal_if_open, wal_object
            )
        wal_object.entries.append(
            _Entry(
                topic_id,
                partition,
                coordinator_id,
                header,
                wal_object.size_bytes,
                size_bytes,
                future,
                control_type,
                coordinator_epoch,
            )
        )
        wal_object.views.append(batch[:size_bytes])
        wal_object.size_bytes += size_bytes
        if wal_object.size_bytes >= self.max_bytes:
            self._seal_if_open(wal_object)
        return await future

    async def close(self) -> None:
        """Stop accepting appends, upload what is buffered and wait for every object in flight."""
        self._closed = True
        if self._open is not None:
            self._seal_if_open(self._open)
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        self._wake_space_waiters()  # appends still waiting for space see the writer closed

    # -- backpressure ----------------------------------------------------------------------

    async def _reserve(self, size_bytes: int) -> None:
        """Wait (FIFO) until size_bytes fit under the bound; a lone oversized batch always fits."""
        if not self._space_waiters and self._fits(size_bytes):
            self._pending_bytes += size_bytes
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size_bytes, waiter)
        self._space_waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(size_bytes)  # space was granted just before the cancel
            else:
                self._space_waiters.remove(entry)
                self._wake_space_waiters()
            raise

    def _fits(self, size_bytes: int) -> bool:
        return (
            self._pending_bytes == 0 or self._pending_bytes + size_bytes <= self.max_pending_bytes
        )

    def _release(self, size_bytes: int) -> None:
        self._pending_bytes -= size_bytes
        self._wake_space_waiters()

    def _wake_space_waiters(self) -> None:
        while self._space_waiters:
            size_bytes, waiter = self._space_waiters[0]
            if not (self._closed or self._fits(size_bytes)):
                return
            self._space_waiters.popleft()
            if not waiter.done():
                self._pending_bytes += size_bytes
                waiter.set_result(None)

    # -- seal, upload, commit --------------------------------------------------------------

    def _seal_if_open(self, wal_object: _WalObject) -> None:
        """Close the open object (by size, age or close()) and start its upload."""
        if self._open is not wal_object:
            return
        self._open = None
        if wal_object.timer is not None:
            wal_object.timer.cancel()
        data = b"".join(wal_object.views)  # the one copy: the producers' buffers are freed after
        wal_object.views = []
        key = wal_object_key(wal_object.created_ms)
        previous_done = self._last_commit_done
        commit_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_commit_done = commit_done
        task = asyncio.get_running_loop().create_task(
            self._upload_and_commit(key, data, wal_object, previous_done, commit_done),
            name=f"diskless-wal-{key}",
        )
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _upload_and_commit(
        self,
        key: str,
        data: bytes,
        wal_object: _WalObject,
        previous_done: asyncio.Future[None] | None,
        commit_done: asyncio.Future[None],
    ) -> None:
        try:
            uploaded = await self._upload(key, data, wal_object)
            del data
            if previous_done is not None:
                await previous_done  # object order: never fails, see the finally below
            if uploaded:
                started = time.monotonic()
                await self._commit(key, wal_object)
                self.observe_commit_ms((time.monotonic() - started) * 1000)
        except Exception as exc:  # a bug: answer every waiter rather than leave producers hanging
            log.exception("diskless WAL object %s failed unexpectedly", key)
            _fail_all(wal_object, ErrorCode.UNKNOWN_SERVER_ERROR, f"{key}: {exc!r}")
        finally:
            commit_done.set_result(None)

    async def _upload(self, key: str, data: bytes, wal_object: _WalObject) -> bool:
        """Put the object; on failure answer all its batches KAFKA_STORAGE_ERROR (retriable)."""
        started = time.monotonic()
        try:
            await self._store.put(key, data)
        except ObjectStoreError as exc:
            log.warning("diskless WAL upload of %s (%d bytes) failed: %s", key, len(data), exc)
            _fail_all(wal_object, ErrorCode.KAFKA_STORAGE_ERROR, f"WAL upload failed: {exc}")
            return False
        finally:
            self._release(wal_object.size_bytes)
        self.observe_upload_ms((time.monotonic() - started) * 1000)
        self.objects_uploaded += 1
        self.bytes_uploaded += len(data)
        return True

    async def _commit(self, key: str, wal_object: _WalObject) -> None:
        """One DisklessCommitFile per coordinator, concurrently; delete the object if none took it."""
        by_coordinator: dict[int, list[int]] = {}
        for index, entry in enumerate(wal_object.entries):
            by_coordinator.setdefault(entry.coordinator_id, []).append(index)
        owner_ids = list(by_coordinator)
        random.shuffle(owner_ids)  # KIP-1164: the first owner is random, spreading file ownership
        # return_exceptions: every coordinator's commit must finish before the next object's start
        outcomes = await asyncio.gather(
            *(
                self._commit_to(
                    key, wal_object, owner_ids, coordinator_id, by_coordinator[coordinator_id]
                )
                for coordinator_id in owner_ids
            ),
            return_exceptions=True,
        )
        unknown = False
        for coordinator_id, outcome in zip(owner_ids, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # a bug in a commit path: answered, and logged
                log.error(
                    "commit of %s to coordinator %d failed unexpectedly",
                    key,
                    coordinator_id,
                    exc_info=outcome,
                )
                _fail(
                    wal_object.entries,
                    by_coordinator[coordinator_id],
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"commit of {key} to coordinator {coordinator_id}: {outcome!r}",
                )
                unknown = True
            elif outcome is None:
                unknown = True
        if not unknown and not any(outcomes):
            await self._delete_rejected(key)

    async def _commit_to(
        self,
        key: str,
        wal_object: _WalObject,
        owner_ids: list[int],
        coordinator_id: int,
        indexes: list[int],
    ) -> bool | None:
        """Commit this coordinator's batches and answer their producers.

        Returns whether it accepted any batch, or None when the call failed and the answer is
        unknown (the coordinator may have committed: the object must then stay).
        """
        entries = wal_object.entries
        request = _CommitFileRequest(
            object_key=key,
            object_format=WRITE_AHEAD_MULTI_SEGMENT,
            file_size=wal_object.size_bytes,
            owner_ids=owner_ids,
            batches=[_commit_batch(index, entries[index]) for index in indexes],
        )
        try:
            response = await self._commit_file(request)
        except KafkaError as exc:
            _fail(
                entries,
                indexes,
                client_error_code(exc.code),
                f"commit of {key} to coordinator {coordinator_id}: {exc}",
            )
            return None
        except (OSError, TimeoutError) as exc:
            _fail(
                entries,
                indexes,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"commit of {key} to coordinator {coordinator_id}: {exc!r}",
            )
            return None
        results = response.batches
        if len(results) != len(indexes):
            _fail(
                entries,
                indexes,
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"coordinator {coordinator_id} answered {len(results)} results for {len(indexes)} batches of {key}",
            )
            return None
        accepted = False
        for index, result in zip(indexes, results, strict=True):
            future = entries[index].future
            if future.done():  # the producer went away
                accepted = accepted or (result.error_code == 0 and not result.is_duplicate)
                continue
            if result.error_code != 0:
                code = client_error_code(result.error_code)
                future.set_exception(
                    KafkaError(
                        code, result.error_message or f"coordinator answered {result.error_code}"
                    )
                )
                continue
            accepted = accepted or not result.is_duplicate
            future.set_result(
                AppendResult(
                    result.assigned_base_offset, result.log_append_time, result.log_start_offset
                )
            )
        return accepted

    async def _delete_rejected(self, key: str) -> None:
        """Best effort: the orphan scanner removes it later if this fails."""
        try:
            await self._store.delete(key)
        except ObjectStoreError as exc:
            log.warning("could not delete rejected WAL object %s: %s", key, exc)


def _commit_batch(request_id: int, entry: _Entry) -> Any:
    header = entry.header
    return _CommitBatch(
        magic=header.magic,
        request_id=request_id,
        topic_id=entry.topic_id,
        partition_index=entry.partition,
        byte_offset=entry.byte_offset,
        size=entry.size_bytes,
        base_offset=0,
        last_offset=header.last_offset_delta,
        batch_max_timestamp=header.max_timestamp,
        timestamp_type=int(header.timestamp_type),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_sequence=header.last_sequence,
        is_transactional=header.is_transactional,
        control_type=entry.control_type,
        coordinator_epoch=entry.coordinator_epoch,
    )


def _fail(entries: list[_Entry], indexes: list[int], code: ErrorCode, message: str) -> None:
    """One exception per waiter: a shared one would collect every waiter's traceback."""
    for index in indexes:
        future = entries[index].future
        if not future.done():
            future.set_exception(KafkaError(code, message))


def _fail_all(wal_object: _WalObject, code: ErrorCode, message: str) -> None:
    _fail(wal_object.entries, list(range(len(wal_object.entries))), code, message)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
