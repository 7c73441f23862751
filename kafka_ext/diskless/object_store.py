"""The object store that holds diskless WAL objects: a local directory or S3, through obstore.

obstore's calls are native async (a Rust runtime of its own), so nothing here blocks the event
loop. Every failure surfaces as `ObjectStoreError` naming the key, so callers need not know
obstore's exception types.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlparse

import obstore
from obstore.exceptions import BaseError as ObstoreBaseError
from obstore.exceptions import NotFoundError as ObstoreNotFoundError
from obstore.store import LocalStore, S3Store

# S3 requests give up quickly so that a produce waiting on an unreachable store gets a retriable
# error well inside a producer's request.timeout.ms (30 s by default) instead of hanging.
DEFAULT_CONNECT_TIMEOUT_MS = 2_000
DEFAULT_REQUEST_TIMEOUT_MS = 5_000  # a whole request; an 8 MiB PUT needs ~1.6 MB/s
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_TIMEOUT_MS = 5_000  # no retry starts after this long since the first attempt

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


class ObjectStoreError(OSError):
    """A store operation failed (unreachable, denied, missing, ...); the message names the key."""


class ObjectNotFoundError(ObjectStoreError):
    """The key does not exist (deleted by retention, or never uploaded)."""


@dataclass(slots=True, frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the store's prefix, size, and upload time."""

    key: str
    size_bytes: int
    last_modified_ms: int


class ObjectStore:
    """Async access to WAL objects under one prefix; safe to share between tasks of one loop."""

    __slots__ = ("_store", "description")

    def __init__(self, store: Any, description: str) -> None:
        self._store = store
        self.description = description

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS,
    ) -> ObjectStore:
        """`file:///dir` (created if missing) or `s3://bucket/prefix` configured from AWS_* env vars.

        S3 reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION /
        AWS_DEFAULT_REGION, AWS_ENDPOINT_URL / AWS_ENDPOINT and AWS_ALLOW_HTTP (for an http
        endpoint such as MinIO or moto); the timeouts bound how long an unreachable store hangs.
        """
        parsed = urlparse(url)
        if parsed.scheme == "file":
            path = unquote(parsed.path)
            if not path:
                raise ValueError(f"diskless storage url {url!r} has no directory")
            return cls(LocalStore(path, mkdir=True), url)
        if parsed.scheme in ("s3", "s3a"):
            if not parsed.netloc:
                raise ValueError(f"diskless storage url {url!r} has no bucket")
            return cls(
                _s3_store(
                    parsed.netloc,
                    parsed.path.strip("/"),
                    connect_timeout_ms=connect_timeout_ms,
                    request_timeout_ms=request_timeout_ms,
                    max_retries=max_retries,
                    retry_timeout_ms=retry_timeout_ms,
                ),
                url,
            )
        raise ValueError(f"diskless storage url {url!r}: only file:// and s3:// are supported")

    async def put(self, key: str, data: bytes | memoryview) -> None:
        """Write the whole object atomically (a reader sees all of it or nothing)."""
        try:
            await obstore.put_async(self._store, key, data)
        except (ObstoreBaseError, OSError) as exc:
            raise _wrap("put", key, exc) from exc

    async def get_range(self, key: str, start: int, end: int) -> memoryview:
        """Bytes [start, end) of the object, without copying obstore's buffer."""
        try:
            data = await obstore.get_range_async(self._store, key, start=start, end=end)
        except (ObstoreBaseError, OSError) as exc:
            raise _wrap("get_range", key, exc) from exc
        view = memoryview(data)
        if len(view) != end - start:
            raise ObjectStoreError(
                f"get_range {key}: asked for [{start}, {end}) but got {len(view)} bytes"
            )
        return view

    async def get(self, key: str) -> memoryview:
        """The whole object, without copying obstore's buffer."""
        try:
            result = await obstore.get_async(self._store, key)
            data = await result.bytes_async()
        except (ObstoreBaseError, OSError) as exc:
            raise _wrap("get", key, exc) from exc
        return memoryview(data)

    async def delete(self, key: str) -> None:
        """Remove the object; a key that is already gone is not an error."""
        try:
            await obstore.delete_async(self._store, key)
        except (ObstoreNotFoundError, FileNotFoundError):
            return
        except (ObstoreBaseError, OSError) as exc:
            raise _wrap("delete", key, exc) from exc

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with the path segment(s) `prefix`, in no set order."""
        infos: list[ObjectInfo] = []
        try:
            async for chunk in obstore.list(self._store, prefix or None):
                for meta in chunk:
                    infos.append(
                        ObjectInfo(
                            key=meta["path"],
                            size_bytes=meta["size"],
                            last_modified_ms=int(meta["last_modified"].timestamp() * 1000),
                        )
                    )
        except (ObstoreBaseError, OSError) as exc:
            raise _wrap("list", prefix or "/", exc) from exc
        return infos

    def __repr__(self) -> str:
        return f"ObjectStore({self.description})"


def _s3_store(
    bucket: str,
    prefix: str,
    *,
    connect_timeout_ms: int,
    request_timeout_ms: int,
    max_retries: int,
    retry_timeout_ms: int,
) -> Any:
    # obstore reads the AWS_* variables itself, but explicit client options replace the ones it
    # derived from the environment (allow_http among them), so AWS_ALLOW_HTTP is re-applied here.
    allow_http = os.environ.get("AWS_ALLOW_HTTP", "").strip().lower() in _TRUE_WORDS
    config: dict[str, Any] = {}
    endpoint = (
        os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or os.environ.get("AWS_ENDPOINT")
    )
    if endpoint:
        config["endpoint"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        config["region"] = region
    return S3Store(
        bucket,
        prefix=prefix or None,
        config=config,  # type: ignore[arg-type]
        client_options={
            "allow_http": allow_http,
            "connect_timeout": timedelta(milliseconds=connect_timeout_ms),
            "timeout": timedelta(milliseconds=request_timeout_ms),
        },
        retry_config={
            "max_retries": max_retries,
            "retry_timeout": timedelta(milliseconds=retry_timeout_ms),
            "backoff": {
                "init_backoff": timedelta(milliseconds=100),
                "max_backoff": timedelta(seconds=1),
                "base": 2,
            },
        },
    )


def _wrap(operation: str, key: str, exc: BaseException) -> ObjectStoreError:
    """Keep only the first line of obstore's message: the rest is a Rust debug dump."""
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    kind = (
        ObjectNotFoundError
        if isinstance(exc, ObstoreNotFoundError | FileNotFoundError)
        else ObjectStoreError
    )
    return kind(f"{operation} {key}: {first_line}")
