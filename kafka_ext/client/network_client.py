"""The cluster-facing half of our client: bootstrap, one connection per broker, metadata.

Mirrors Kafka's `NetworkClient` with its `Metadata`: the producer, consumer and admin each own
one. Connections are opened on first use and keyed by node id and role, so the group
coordinator's requests (JoinGroup waits for a whole rebalance) never queue behind fetches to the
same broker, as Kafka keeps a separate coordinator connection. Metadata is refreshed on demand
(an error that means it is stale, or a topic we do not know) and when older than
`metadata_max_age_ms`; concurrent refreshes share one request.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from typing import Any

from kafka_ext.client.connection import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    BrokerConnection,
    BrokerConnectionError,
)
from kafka_ext.client.metadata import ClusterMetadata, cluster_from_response
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

METADATA_VERSION = 12  # v9+ carries our tagged partition fields (Mode); 13 is not served here
DEFAULT_METADATA_MAX_AGE_MS = 300_000  # Kafka's metadata.max.age.ms
DEFAULT_RETRY_BACKOFF_MS = 100

_Metadata = registry()["MetadataRequest"].cls


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (or a list of them) as (host, port) pairs."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server given")
    return out


class NetworkClient:
    """Connections and the metadata cache of one producer, consumer or admin.

    Not thread-safe; one event loop. `metadata` is an immutable snapshot, replaced by each
    refresh, so readers never see half an update.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], *,
                 client_id: str = "kafka-ext-client",
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
                 allow_auto_topic_creation: bool = False) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.metadata = ClusterMetadata()
        self.metadata_updated_at = 0.0  # time.monotonic() of the last refresh, 0 before any
        self.topics: set[str] = set()  # the topics every refresh asks about
        self._connections: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Future[BrokerConnection]] = {}
        self._refresh: asyncio.Future[ClusterMetadata] | None = None
        self._closed = False

    # -- connections --------------------------------------------------------------------------

    async def start(self) -> None:
        """Reach a bootstrap server and load the metadata of the topics of interest."""
        await self.refresh_metadata()

    async def connection(self, node_id: int, role: str = "") -> BrokerConnection:
        """The open connection to `node_id` for `role`, connecting if needed."""
        key = (node_id, role)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"node {node_id} is not in the metadata")
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            conn = BrokerConnection(broker.host, broker.port, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms, node_id=node_id)
            await conn.connect()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here; other waiters get it from the shield
            raise
        finally:
            del self._connecting[key]
        self._connections[key] = conn
        future.set_result(conn)
        return conn

    async def any_connection(self) -> BrokerConnection:
        """An open connection to some broker (the least busy one), else a new one: a known
        broker, then the bootstrap servers in turn."""
        open_ones = [c for (_, role), c in self._connections.items() if not c.closed and not role]
        if open_ones:
            return min(open_ones, key=lambda c: c.in_flight_count)
        errors: list[str] = []
        nodes = list(self.metadata.brokers)
        random.shuffle(nodes)
        for node_id in nodes:
            try:
                return await self.connection(node_id)
            except KafkaError as exc:
                errors.append(str(exc))
        for index, (host, port) in enumerate(self.bootstrap):
            conn = BrokerConnection(host, port, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    node_id=-1 - index)
            try:
                await conn.connect()
            except KafkaError as exc:
                errors.append(str(exc))
                continue
            self._connections[(conn.node_id, "")] = conn
            return conn
        raise BrokerConnectionError("no broker reachable: " + "; ".join(errors))

    async def call(self, node_id: int | None, api_key: int, body: Any, *, highest: int,
                   lowest: int = 0, role: str = "", timeout_ms: int | None = None) -> Any:
        """One request to `node_id` (None: any broker) at the newest common version."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id, role))
        version = conn.version_for(api_key, highest, lowest)
        return await conn.request(api_key, body, version=version, timeout_ms=timeout_ms)

    async def close_connection(self, node_id: int, role: str = "") -> None:
        conn = self._connections.pop((node_id, role), None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            await conn.close()

    # -- metadata -----------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Ask about these topics from now on; True when one was new."""
        before = len(self.topics)
        self.topics.update(topics)
        return len(self.topics) != before

    @property
    def metadata_age_ms(self) -> float:
        if not self.metadata_updated_at:
            return float("inf")
        return (time.monotonic() - self.metadata_updated_at) * 1000

    async def maybe_refresh_metadata(self) -> ClusterMetadata:
        """Refresh when the snapshot is older than metadata_max_age_ms."""
        if self.metadata_age_ms >= self.metadata_max_age_ms:
            return await self.refresh_metadata()
        return self.metadata

    async def refresh_metadata(self, *, all_topics: bool = False) -> ClusterMetadata:
        """Fetch metadata for the topics of interest (or every topic); a refresh already in
        flight is shared."""
        if self._refresh is not None and not all_topics:
            return await asyncio.shield(self._refresh)
        future: asyncio.Future[ClusterMetadata] = asyncio.get_running_loop().create_future()
        if not all_topics:
            self._refresh = future
        try:
            snapshot = await self._fetch_metadata(None if all_topics else frozenset(self.topics))
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            if self._refresh is future:
                self._refresh = None
        future.set_result(snapshot)
        return snapshot

    async def _fetch_metadata(self, topics: frozenset[str] | None) -> ClusterMetadata:
        request = _Metadata(
            topics=None if topics is None else [
                _Metadata.MetadataRequestTopic(topic_id=ZERO_UUID, name=t) for t in sorted(topics)],
            allow_auto_topic_creation=self.allow_auto_topic_creation,
            include_topic_authorized_operations=False)
        last_error: KafkaError | None = None
        for _ in range(max(1, len(self.bootstrap) + len(self.metadata.brokers))):
            try:
                conn = await self.any_connection()
                version = conn.version_for(ApiKey.METADATA, METADATA_VERSION, 1)
                response = await conn.request(ApiKey.METADATA, request, version=version)
            except BrokerConnectionError as exc:
                last_error = exc
                continue  # that broker is gone: the next call picks another
            except KafkaError as exc:
                if exc.code != ErrorCode.REQUEST_TIMED_OUT:
                    raise
                last_error = exc
                continue
            snapshot = cluster_from_response(response)
            self.metadata = self.metadata.merged(snapshot, topics)
            self.metadata_updated_at = time.monotonic()
            await self._drop_bootstrap_connections()
            return self.metadata
        assert last_error is not None
        raise last_error

    async def _drop_bootstrap_connections(self) -> None:
        """Once brokers are known by id, idle bootstrap connections (negative ids) go; a busy
        one goes at a later refresh."""
        if not self.metadata.brokers:
            return
        for key in [k for k, c in self._connections.items() if k[0] < 0 and not c.in_flight_count]:
            await self._connections.pop(key).close()
