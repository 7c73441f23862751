"""KIP-227 fetch sessions: the session cache, and how Fetch requests move sessions along."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_ext.controller.image import MetadataImage, PartitionImage, TopicImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.fetch import _resolve
from kafka_ext.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    SESSIONLESS_ID,
    CachedPartition,
    FetchSessionCache,
)

_Request = registry()["FetchRequest"].cls
ORDERS_ID = uuid.UUID(int=0x0DE5)
AUDIT_ID = uuid.UUID(int=0xA0D1)


def _image() -> MetadataImage:
    image = MetadataImage()
    for name, topic_id in (("orders", ORDERS_ID), ("audit", AUDIT_ID)):
        partitions = {p: PartitionImage(p, (1,), (1,), 1, 0, 0) for p in range(3)}
        topic = TopicImage(name, topic_id, partitions)
        image.topics_by_name[name] = topic
        image.topics_by_id[topic_id] = topic
    return image


def _ctx(cache: FetchSessionCache, api_version: int = 12) -> Any:
    """The two things `_resolve` reads from the broker: its session cache and metadata image."""
    broker = SimpleNamespace(fetch_sessions=cache, controller=SimpleNamespace(image=_image()))
    return SimpleNamespace(broker=broker, api_version=api_version)


def _request(session_id: int, epoch: int, topics: dict[str, dict[int, int]] | None = None,
             forgotten: dict[str, list[int]] | None = None, *, by_id: bool = False) -> Any:
    """A FetchRequest naming {topic: {partition: fetch_offset}}; by_id fills topic ids (v13+)."""
    ids = {"orders": ORDERS_ID, "audit": AUDIT_ID}

    def topic_fields(name: str) -> dict[str, Any]:
        return {"topic_id": ids.get(name, uuid.UUID(int=0xDEAD))} if by_id else {"topic": name}

    return _Request(
        session_id=session_id, session_epoch=epoch,
        topics=[_Request.FetchTopic(**topic_fields(name), partitions=[
            _Request.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1024)
            for p, offset in partitions.items()]) for name, partitions in (topics or {}).items()],
        forgotten_topics_data=[_Request.ForgottenTopic(**topic_fields(name), partitions=parts)
                               for name, parts in (forgotten or {}).items()])


def _positions(targets: list[Any]) -> dict[tuple[str, int], int]:
    return {(t.topic, t.partition): t.cached.fetch_offset for t in targets}


def _error_of(call: Any) -> ErrorCode:
    with pytest.raises(KafkaError) as caught:
        call()
    return caught.value.code


# -- FetchSessionCache -------------------------------------------------------------------------


def test_create_gives_a_positive_id_expecting_epoch_one() -> None:
    cache = FetchSessionCache()
    session = cache.create()
    assert 0 < session.session_id <= 0x7FFFFFFF
    assert session.epoch == 1
    assert len(cache) == 1
    assert cache.lookup(session.session_id, 1) is session


def test_session_ids_are_distinct() -> None:
    cache = FetchSessionCache(max_sessions=500)
    ids = {cache.create().session_id for _ in range(500)}
    assert len(ids) == 500 and SESSIONLESS_ID not in ids


def test_lookup_with_the_wrong_epoch_is_invalid_fetch_session_epoch() -> None:
    cache = FetchSessionCache()
    session = cache.create()
    assert _error_of(lambda: cache.lookup(session.session_id, 2)) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    assert cache.lookup(session.session_id, 1) is session  # still usable with the right epoch


def test_lookup_of_an_unknown_id_is_fetch_session_id_not_found() -> None:
    cache = FetchSessionCache()
    assert _error_of(lambda: cache.lookup(12345, 1)) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_remove_forgets_the_session() -> None:
    cache = FetchSessionCache()
    session = cache.create()
    cache.remove(session.session_id)
    cache.remove(session.session_id)  # twice is harmless
    assert len(cache) == 0
    assert _error_of(lambda: cache.lookup(session.session_id, 1)) == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND)


class _Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_the_least_recently_used_idle_session_is_evicted_at_max_sessions() -> None:
    clock = _Clock()
    cache = FetchSessionCache(max_sessions=2, min_evictable_idle_s=60, clock_s=clock)
    first, second = cache.create(), cache.create()
    assert first is not None and second is not None
    clock.now_s += 30
    cache.lookup(first.session_id, 1)  # first is now the most recently used
    clock.now_s += 31  # second has been idle 61 s, first 31 s
    third = cache.create()
    assert third is not None
    assert len(cache) == 2
    assert _error_of(lambda: cache.lookup(second.session_id, 1)) == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert cache.lookup(first.session_id, 1) is first  # lookup alone never moves the epoch
    assert cache.lookup(third.session_id, 1) is third


def test_a_full_cache_of_busy_sessions_refuses_a_new_one_instead_of_evicting() -> None:
    clock = _Clock()
    cache = FetchSessionCache(max_sessions=2, min_evictable_idle_s=60, clock_s=clock)
    first, _ = cache.create(), cache.create()
    clock.now_s += 59
    assert cache.create() is None
    assert len(cache) == 2
    assert first is not None and cache.lookup(first.session_id, 1) is first


def test_a_cache_of_zero_sessions_never_creates_one() -> None:
    assert FetchSessionCache(max_sessions=0).create() is None


# -- CachedPartition -------------------------------------------------------------------------


def test_note_answer_reports_the_first_answer_as_a_change() -> None:
    cached = CachedPartition(fetch_offset=0, max_bytes=1024)
    assert cached.note_answer(10, 10, 0) is True
    assert (cached.high_watermark, cached.last_stable_offset, cached.log_start_offset) == (
        10, 10, 0)


def test_note_answer_reports_no_change_for_the_same_answer() -> None:
    cached = CachedPartition(fetch_offset=0, max_bytes=1024)
    cached.note_answer(10, 10, 0)
    assert cached.note_answer(10, 10, 0) is False


@pytest.mark.parametrize("answer", [(11, 10, 0), (10, 11, 0), (10, 10, 1)])
def test_note_answer_detects_each_changed_field(answer: tuple[int, int, int]) -> None:
    cached = CachedPartition(fetch_offset=0, max_bytes=1024)
    cached.note_answer(10, 10, 0)
    assert cached.note_answer(*answer) is True
    assert cached.note_answer(*answer) is False


# -- Fetch requests against the cache (fetch._resolve) ---------------------------------------


def test_full_fetch_with_epoch_zero_creates_a_session() -> None:
    cache = FetchSessionCache()
    session, targets, incremental = _resolve(
        _ctx(cache), _request(SESSIONLESS_ID, INITIAL_EPOCH, {"orders": {0: 5, 1: 7}}), False)
    assert session is not None and not incremental
    assert session.epoch == 1
    assert cache.lookup(session.session_id, 1) is session
    assert _positions(targets) == {("orders", 0): 5, ("orders", 1): 7}
    assert {t.topic_id for t in targets} == {ORDERS_ID}
    assert list(session.partitions) == [("orders", 0), ("orders", 1)]


def test_incremental_fetch_with_the_right_epoch_reuses_the_session() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    session, _, _ = _resolve(ctx, _request(0, INITIAL_EPOCH, {"orders": {0: 5, 1: 7}}), False)
    assert session is not None
    # The next request names only what moved, plus a new partition.
    again, targets, incremental = _resolve(
        ctx, _request(session.session_id, 1, {"orders": {0: 9}, "audit": {2: 3}}), False)
    assert again is session and incremental
    assert session.epoch == 2
    assert _positions(targets) == {("orders", 0): 9, ("orders", 1): 7, ("audit", 2): 3}
    assert {(t.topic, t.topic_id) for t in targets} == {("orders", ORDERS_ID),
                                                        ("audit", AUDIT_ID)}


def test_incremental_fetch_drops_forgotten_partitions() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    session, _, _ = _resolve(ctx, _request(0, 0, {"orders": {0: 1, 1: 2, 2: 3}}), False)
    assert session is not None
    _, targets, _ = _resolve(ctx, _request(session.session_id, 1, {},
                                           forgotten={"orders": [0, 2]}), False)
    assert _positions(targets) == {("orders", 1): 2}
    _, targets, _ = _resolve(ctx, _request(session.session_id, 2), False)
    assert _positions(targets) == {("orders", 1): 2}


def test_incremental_fetch_with_the_wrong_epoch_is_invalid_fetch_session_epoch() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    session, _, _ = _resolve(ctx, _request(0, 0, {"orders": {0: 1}}), False)
    assert session is not None
    assert _error_of(lambda: _resolve(ctx, _request(session.session_id, 5), False)) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    assert session.epoch == 1  # a rejected request does not move the session


def test_incremental_fetch_of_an_unknown_session_is_fetch_session_id_not_found() -> None:
    ctx = _ctx(FetchSessionCache())
    assert _error_of(lambda: _resolve(ctx, _request(4242, 1, {"orders": {0: 1}}), False)) == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND)


def test_epoch_minus_one_closes_the_session_and_fetches_sessionless() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    session, _, _ = _resolve(ctx, _request(0, 0, {"orders": {0: 1, 1: 1}}), False)
    assert session is not None
    closed, targets, incremental = _resolve(
        ctx, _request(session.session_id, FINAL_EPOCH, {"audit": {0: 4}}), False)
    assert closed is None and not incremental
    assert _positions(targets) == {("audit", 0): 4}  # only what this request names
    assert len(cache) == 0
    assert _error_of(lambda: cache.lookup(session.session_id, 1)) == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND)


def test_epoch_zero_with_a_session_id_replaces_that_session() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    old, _, _ = _resolve(ctx, _request(0, 0, {"orders": {0: 1}}), False)
    assert old is not None
    new, targets, incremental = _resolve(ctx, _request(old.session_id, 0, {"audit": {1: 2}}),
                                         False)
    assert new is not None and new.session_id != old.session_id and not incremental
    assert _positions(targets) == {("audit", 1): 2}
    assert len(cache) == 1


def test_sessionless_requests_leave_the_cache_alone() -> None:
    cache = FetchSessionCache()
    session, targets, incremental = _resolve(
        _ctx(cache), _request(SESSIONLESS_ID, FINAL_EPOCH, {"orders": {0: 3}}), False)
    assert session is None and not incremental
    assert _positions(targets) == {("orders", 0): 3}
    assert len(cache) == 0


def test_fetch_before_v7_never_opens_a_session() -> None:
    cache = FetchSessionCache()
    session, targets, _ = _resolve(_ctx(cache, api_version=6),
                                   _request(0, INITIAL_EPOCH, {"orders": {0: 3}}), False)
    assert session is None and len(cache) == 0
    assert _positions(targets) == {("orders", 0): 3}


def test_session_epoch_wraps_from_int32_max_to_one() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache)
    session, _, _ = _resolve(ctx, _request(0, 0, {"orders": {0: 1}}), False)
    assert session is not None
    session.epoch = 0x7FFFFFFF
    _resolve(ctx, _request(session.session_id, 0x7FFFFFFF), False)
    assert session.epoch == 1


def test_topic_ids_resolve_to_names_and_unknown_ids_are_flagged() -> None:
    cache = FetchSessionCache()
    ctx = _ctx(cache, api_version=13)
    unknown_id = uuid.UUID(int=0xDEAD)
    session, targets, _ = _resolve(
        ctx, _request(0, 0, {"orders": {0: 1}, "ghost": {0: 2}}, by_id=True), True)
    assert session is not None
    known = [t for t in targets if not t.unknown_topic_id]
    flagged = [t for t in targets if t.unknown_topic_id]
    assert [(t.topic, t.topic_id, t.partition) for t in known] == [("orders", ORDERS_ID, 0)]
    assert [(t.topic_id, t.partition) for t in flagged] == [(unknown_id, 0)]
    # An incremental request forgets by topic id too.
    _, targets, _ = _resolve(ctx, _request(session.session_id, 1, {},
                                           forgotten={"orders": [0]}, by_id=True), True)
    assert _positions(targets) == {}
