"""ObjectStore over a local directory and over moto's S3 server (tests/s3_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_ext.diskless.object_store import ObjectNotFoundError, ObjectStore, ObjectStoreError
from tests.s3_server import ProxyMode, S3Server

# An outage must fail a store call within a few seconds; this only bounds a hung test.
OUTAGE_BOUND_S = 20.0


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3_store(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return ObjectStore.from_url(s3.url)


@pytest.fixture
def local_store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.from_url(f"file://{tmp_path}/objects")


async def _round_trip(store: ObjectStore) -> None:
    await store.put("wal/0000000000001-a", b"0123456789")
    await store.put("wal/0000000000002-b", memoryview(b"abc"))
    await store.put("other/x", b"zz")
    assert bytes(await store.get("wal/0000000000001-a")) == b"0123456789"
    assert bytes(await store.get_range("wal/0000000000001-a", 2, 5)) == b"234"
    listed = sorted(await store.list("wal/"), key=lambda info: info.key)
    assert [(info.key, info.size_bytes) for info in listed] == [
        ("wal/0000000000001-a", 10),
        ("wal/0000000000002-b", 3),
    ]
    assert all(info.last_modified_ms > 1_600_000_000_000 for info in listed)
    assert {info.key for info in await store.list()} == {
        "wal/0000000000001-a",
        "wal/0000000000002-b",
        "other/x",
    }
    await store.delete("wal/0000000000001-a")
    await store.delete("wal/0000000000001-a")  # already gone: not an error
    with pytest.raises(ObjectNotFoundError, match="wal/0000000000001-a"):
        await store.get("wal/0000000000001-a")
    assert [info.key for info in await store.list("wal/")] == ["wal/0000000000002-b"]


async def test_local_store_round_trips_objects(local_store: ObjectStore, tmp_path: Path) -> None:
    await _round_trip(local_store)
    assert (tmp_path / "objects" / "wal" / "0000000000002-b").read_bytes() == b"abc"


async def test_get_returns_a_view_of_the_stored_bytes(local_store: ObjectStore) -> None:
    await local_store.put("k", b"x" * 1000)
    view = await local_store.get("k")
    assert isinstance(view, memoryview) and view.readonly and len(view) == 1000


async def test_get_range_past_the_end_is_an_error(local_store: ObjectStore) -> None:
    await local_store.put("k", b"short")
    with pytest.raises(ObjectStoreError, match="k"):
        await local_store.get_range("k", 2, 100)


async def test_missing_key_is_object_not_found(local_store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError, match="wal/nope"):
        await local_store.get_range("wal/nope", 0, 4)


def test_unsupported_urls_are_rejected() -> None:
    for url in ("gs://bucket/x", "s3:///no-bucket", "file://"):
        with pytest.raises(ValueError, match="diskless storage url"):
            ObjectStore.from_url(url)


async def test_s3_store_round_trips_objects(s3_store: ObjectStore) -> None:
    await _round_trip(s3_store)


async def test_s3_keys_live_under_the_url_prefix(
    s3: S3Server, s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await s3_store.put("wal/0000000000003-c", b"prefixed")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    whole_bucket = ObjectStore.from_url(f"s3://{s3.bucket}")
    assert f"{s3.prefix}/wal/0000000000003-c" in {info.key for info in await whole_bucket.list()}


async def test_refused_s3_fails_fast_and_keeps_data(s3: S3Server, s3_store: ObjectStore) -> None:
    await s3_store.put("wal/0000000000004-d", b"kept")
    with s3.unreachable(ProxyMode.RESET):
        for call in (
            s3_store.put("wal/0000000000005-e", b"lost"),
            s3_store.get("wal/0000000000004-d"),
            s3_store.list("wal/"),
        ):
            with pytest.raises(ObjectStoreError):
                await asyncio.wait_for(call, OUTAGE_BOUND_S)
    assert bytes(await s3_store.get("wal/0000000000004-d")) == b"kept"


async def test_hanging_s3_times_out_with_an_error(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    store = ObjectStore.from_url(
        s3.url, request_timeout_ms=300, retry_timeout_ms=300, max_retries=1
    )
    with s3.unreachable(ProxyMode.BLACKHOLE):
        with pytest.raises(ObjectStoreError, match="wal/0000000000006-f"):
            await asyncio.wait_for(store.put("wal/0000000000006-f", b"x"), OUTAGE_BOUND_S)
    await store.put("wal/0000000000006-f", b"x")
    assert bytes(await store.get("wal/0000000000006-f")) == b"x"


def test_s3_server_counts_the_objects_under_a_url(s3: S3Server) -> None:
    url = f"s3://{s3.bucket}/counted"

    async def put_two() -> None:
        with s3.environ():
            store = ObjectStore.from_url(url)
        await store.put("wal/0000000000001-a", b"1")
        await store.put("wal/0000000000002-b", b"2")

    asyncio.run(put_two())
    assert S3Server.count_objects(url, s3.env) == 2
    assert S3Server.count_objects(url, s3.env, prefix="other/") == 0
