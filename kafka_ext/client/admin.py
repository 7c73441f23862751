"""Our asyncio admin client: topics, partitions, offsets, and the proposals' admin calls.

Mirrors the parts of Kafka's `Admin` our tools and tests need: create and delete topics, add
partitions, describe topics (with each partition's mode, seed 002), list offsets. The proposals'
own calls: DeletePartitions (our key 1000, partition reduction: the highest-numbered partitions
become ReadOnly now and are deleted after a delay) and LeaderEpochsForPartition (our key 1001,
KIP-253). Topic changes go to the controller the metadata names (any broker forwards them); a
NOT_CONTROLLER answer refreshes the metadata and tries again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.client.connection import DEFAULT_REQUEST_TIMEOUT_MS
from kafka_ext.client.metadata import (
    ClusterMetadata,
    PartitionMode,
    TopicMetadata,
    TopicPartition,
    mode_of,
)
from kafka_ext.client.network_client import DEFAULT_RETRY_BACKOFF_MS, NetworkClient
from kafka_ext.client.offset_fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ListedOffset,
    leader_epochs_for_partition,
    list_offsets,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

CREATE_TOPICS_VERSION = 7
DELETE_TOPICS_VERSION = 5  # v6 names topics by id or name; names are all we use
CREATE_PARTITIONS_VERSION = 3
DELETE_PARTITIONS_VERSION = 0
CONTROLLER_ATTEMPTS = 5

_reg = registry()
_CreateTopics = _reg["CreateTopicsRequest"].cls
_DeleteTopics = _reg["DeleteTopicsRequest"].cls
_CreatePartitions = _reg["CreatePartitionsRequest"].cls
_DeletePartitions = _reg["DeletePartitionsRequest"].cls

OffsetSpec = int | str  # a timestamp in ms, or "earliest" / "latest"


class AdminError(KafkaError):
    """Some topics of a call failed; `errors` maps each to its code and message. The code of
    the exception is the first failure's."""

    def __init__(self, errors: Mapping[str, tuple[ErrorCode, str | None]]) -> None:
        first = next(iter(errors.values()))[0]
        detail = "; ".join(f"{name}: {code.name}" + (f" ({message})" if message else "")
                           for name, (code, message) in errors.items())
        super().__init__(first, detail)
        self.errors = dict(errors)


@dataclass(slots=True, frozen=True)
class NewTopic:
    """A topic to create; -1 partitions or replication factor take the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class PartitionDeletion:
    """One partition's result of DeletePartitions: its mode after the call, or an error."""

    mode: PartitionMode
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class Admin:
    """Cluster administration; `async with Admin(...)` or `start()`/`close()`. One event loop."""

    def __init__(self, bootstrap_servers: str | Iterable[str], *,
                 client_id: str = "kafka-ext-admin",
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS) -> None:
        self._client = NetworkClient(bootstrap_servers, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms,
                                     retry_backoff_ms=retry_backoff_ms)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self._client.start()
            self._started = True

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    # -- describing ------------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterMetadata:
        """Brokers, controller and every topic."""
        await self.start()
        return await self._client.refresh_metadata(all_topics=True)

    async def describe_topics(self, names: Iterable[str] | None = None
                              ) -> dict[str, TopicMetadata]:
        """Topics with their partitions, leaders, replicas and modes (None: every topic).
        Raises AdminError for names the cluster does not have."""
        await self.start()
        if names is None:
            return dict((await self._client.refresh_metadata(all_topics=True)).topics)
        wanted = list(names)
        self._client.add_topics(wanted)
        metadata = await self._client.refresh_metadata()
        found = {n: metadata.topics[n] for n in wanted if n in metadata.topics}
        errors = {n: (found[n].error if n in found else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                  for n in wanted if n not in found or found[n].error != ErrorCode.NONE}
        if errors:
            raise AdminError(errors)
        return found

    async def list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec], *,
                           read_committed: bool = False) -> dict[TopicPartition, ListedOffset]:
        """Each partition's offset for a timestamp, "earliest" or "latest"."""
        await self.start()
        timestamps = {TopicPartition(*tp): _timestamp(spec) for tp, spec in specs.items()}
        return await list_offsets(self._client, timestamps, read_committed=read_committed)

    async def leader_epochs_for_partition(self, partitions: Iterable[TopicPartition]
                                          ) -> dict[TopicPartition, dict[int, int]]:
        """KIP-253's LeaderEpochsForPartition (key 1001): each partition's prior partitions'
        leader epochs when it was added (empty for a topic's original partitions)."""
        await self.start()
        return await leader_epochs_for_partition(self._client,
                                                 [TopicPartition(*tp) for tp in partitions])

    # -- changing --------------------------------------------------------------------------------

    async def create_topics(self, topics: Iterable[NewTopic], *, timeout_ms: int = 30_000,
                            validate_only: bool = False) -> None:
        """Create topics; AdminError names the ones that failed (TOPIC_ALREADY_EXISTS, ...)."""
        Topic = _CreateTopics.CreatableTopic
        request = _CreateTopics(topics=[
            Topic(name=t.name, num_partitions=t.num_partitions,
                  replication_factor=t.replication_factor, assignments=[],
                  configs=[Topic.CreatableTopicConfig(name=k, value=v)
                           for k, v in t.configs.items()])
            for t in topics], timeout_ms=timeout_ms, validate_only=validate_only)
        answer = await self._to_controller(ApiKey.CREATE_TOPICS, request,
                                           CREATE_TOPICS_VERSION, timeout_ms)
        _raise_for({t.name: (_code(t.error_code), t.error_message) for t in answer.topics})

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> None:
        request = _DeleteTopics(topic_names=list(names), timeout_ms=timeout_ms, topics=[])
        answer = await self._to_controller(ApiKey.DELETE_TOPICS, request,
                                           DELETE_TOPICS_VERSION, timeout_ms)
        _raise_for({t.name: (_code(t.error_code), t.error_message) for t in answer.responses})

    async def create_partitions(self, counts: Mapping[str, int], *, timeout_ms: int = 30_000,
                                validate_only: bool = False) -> None:
        """Grow topics to these partition counts (KIP-253: the existing partitions start a new
        leader epoch, and each new partition records the previous ones)."""
        request = _CreatePartitions(topics=[
            _CreatePartitions.CreatePartitionsTopic(name=name, count=count, assignments=None)
            for name, count in counts.items()], timeout_ms=timeout_ms, validate_only=validate_only)
        answer = await self._to_controller(ApiKey.CREATE_PARTITIONS, request,
                                           CREATE_PARTITIONS_VERSION, timeout_ms)
        _raise_for({r.name: (_code(r.error_code), r.error_message) for r in answer.results})

    async def delete_partitions(self, partitions: Mapping[str, Iterable[int]], *,
                                delay_ms: int = 0, timeout_ms: int = 60_000
                                ) -> dict[str, dict[int, PartitionDeletion]]:
        """Partition reduction's DeletePartitions (key 1000): remove these partitions (each
        topic's highest-numbered ones). They take no more writes at once (ReadOnly) and are
        deleted after `delay_ms` (0: now). Returns each partition's mode after the call and its
        error; a request-level error raises KafkaError."""
        request = _DeletePartitions(
            timeout_ms=timeout_ms, delete_partitions_delay_ms=delay_ms,
            topics=[_DeletePartitions.DeletePartitionsTopic(name=name, partitions=sorted(p))
                    for name, p in partitions.items()])
        answer = await self._to_controller(ApiKey.DELETE_PARTITIONS, request,
                                           DELETE_PARTITIONS_VERSION, timeout_ms)
        code = _code(answer.error_code)
        if code != ErrorCode.NONE:
            raise KafkaError(code, answer.error_message or "DeletePartitions")
        return {t.name: {p.partition_index: PartitionDeletion(
            mode_of(p.status_code), _code(p.error_code), p.error_message) for p in t.partitions}
            for t in answer.responses}

    async def _to_controller(self, api_key: int, request: Any, highest: int,
                             timeout_ms: int) -> Any:
        """Send to the controller the metadata names (else any broker), again after a refresh
        when the answer is NOT_CONTROLLER everywhere."""
        await self.start()
        for attempt in range(CONTROLLER_ATTEMPTS):
            metadata = self._client.metadata
            node = metadata.controller_id if metadata.controller_id in metadata.brokers else None
            answer = await self._client.call(node, api_key, request, highest=highest,
                                             timeout_ms=timeout_ms + self._client.request_timeout_ms)
            if not _says_not_controller(answer) or attempt == CONTROLLER_ATTEMPTS - 1:
                return answer
            await asyncio.sleep(self._client.retry_backoff_ms / 1000)
            await self._client.refresh_metadata()
        raise AssertionError("unreachable")


def _says_not_controller(answer: Any) -> bool:
    codes = [getattr(answer, "error_code", 0)]
    for name in ("topics", "responses", "results"):
        codes += [getattr(e, "error_code", 0) for e in getattr(answer, name, None) or ()]
    return ErrorCode.NOT_CONTROLLER in codes


def _raise_for(results: Mapping[str, tuple[ErrorCode, str | None]]) -> None:
    errors = {name: result for name, result in results.items() if result[0] != ErrorCode.NONE}
    if errors:
        raise AdminError(errors)


def _timestamp(spec: OffsetSpec) -> int:
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if isinstance(spec, int):
        return spec
    raise ValueError(f"offset spec must be a timestamp, 'earliest' or 'latest', not {spec!r}")
