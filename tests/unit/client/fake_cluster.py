"""A fake one-broker cluster for our client's unit tests, in franz-go's `kfake` spirit.

`FakeBroker` keeps partition logs, leader epochs, modes and the partition count the broker
checks Produce against; `FakeNetworkClient` stands in for `NetworkClient` and answers the
producer's and consumer's requests from it with our generated message classes. The metadata a
client sees is a separate `published` view, so a test can make the client's metadata lag
behind the broker (what KIP-253's INVALID_PARTITION_COUNT is about).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.client.connection import BrokerConnectionError
from kafka_ext.client.metadata import (
    BrokerInfo,
    ClusterMetadata,
    PartitionMetadata,
    PartitionMode,
    TopicMetadata,
    TopicPartition,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch, decode_records

NODE_ID = 1
_reg = registry()


@dataclass
class FakePartition:
    """One partition: its records (offset order), epochs and mode."""

    records: list[Record] = field(default_factory=list)
    leader_epoch: int = 0
    epoch_starts: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    mode: PartitionMode = PartitionMode.READ_WRITE
    prior_epochs: dict[int, int] = field(default_factory=dict)

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def end_offset_for_epoch(self, epoch: int) -> int:
        later = [start for e, start in self.epoch_starts if e > epoch]
        return min(later) if later else self.log_end_offset


class FakeBroker:
    """Partition logs and the broker's own view of each topic; one node, id NODE_ID."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FakePartition]] = {}
        self.published: ClusterMetadata = ClusterMetadata()
        self.produce_requests: list[Any] = []
        self.fetch_requests: list[Any] = []
        self.lose_answers = 0  # answers to drop (after applying the request) before a reply
        self.max_batches_per_fetch = 1_000_000
        self.serves_leader_epochs = True
        self._sequences: dict[tuple[int, TopicPartition, int], int] = {}
        self._next_sequence: dict[tuple[int, TopicPartition], int] = {}
        self._next_producer_id = 1000

    # -- set-up --------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        self.topics[name] = [FakePartition() for _ in range(partitions)]
        self.publish()

    def add_partitions(self, name: str, count: int, *, publish: bool = True) -> None:
        """KIP-253's controller: old partitions start a new epoch, new ones record the old."""
        parts = self.topics[name]
        priors = {p: part.leader_epoch for p, part in enumerate(parts)}
        for part in parts:
            part.leader_epoch += 1
            part.epoch_starts.append((part.leader_epoch, part.log_end_offset))
        while len(parts) < count:
            parts.append(FakePartition(prior_epochs=dict(priors)))
        if publish:
            self.publish()

    def set_mode(self, name: str, partition: int, mode: PartitionMode, *,
                 publish: bool = True) -> None:
        self.topics[name][partition].mode = mode
        if publish:
            self.publish()

    def publish(self) -> None:
        """Make the brokers' current state what Metadata answers."""
        topics = {}
        for name, parts in self.topics.items():
            topics[name] = TopicMetadata(name, {
                p: PartitionMetadata(name, p, NODE_ID, part.leader_epoch, (NODE_ID,), (NODE_ID,),
                                     mode=part.mode)
                for p, part in enumerate(parts)})
        self.published = ClusterMetadata({NODE_ID: BrokerInfo(NODE_ID, "fake", 9092)}, topics,
                                         NODE_ID)

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int | None = None) -> int:
        part = self.topics[topic][partition]
        offset = part.log_end_offset
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        part.records.append(Record(offset, stamp, key, value))
        return offset

    def values(self, topic: str, partition: int) -> list[bytes | None]:
        return [r.value for r in self.topics[topic][partition].records]

    # -- requests ------------------------------------------------------------------------------

    def handle(self, api_key: int, body: Any) -> Any:
        handler = {
            ApiKey.PRODUCE: self._produce,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.FETCH: self._fetch,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            ApiKey.LEADER_EPOCHS_FOR_PARTITION: self._leader_epochs,
        }[ApiKey(api_key)]
        answer = handler(body)
        if self.lose_answers:
            self.lose_answers -= 1
            raise BrokerConnectionError("answer lost (fake)")
        return answer

    def _init_producer_id(self, body: Any) -> Any:
        self._next_producer_id += 1
        return _reg["InitProducerIdResponse"].cls(throttle_time_ms=0, error_code=0,
                                                  producer_id=self._next_producer_id,
                                                  producer_epoch=0)

    def _produce(self, body: Any) -> Any:
        self.produce_requests.append(body)
        Response = _reg["ProduceResponse"].cls
        topics = []
        for t in body.topic_data:
            parts = self.topics[t.name]
            answers = []
            for p in t.partition_data:
                answers.append(self._append_batch(t.name, parts, t.partition_number, p))
            topics.append(Response.TopicProduceResponse(name=t.name, partition_responses=answers))
        return Response(responses=topics, throttle_time_ms=0)

    def _append_batch(self, topic: str, parts: list[FakePartition], count: int, data: Any) -> Any:
        Answer = _reg["ProduceResponse"].cls.PartitionProduceResponse
        if 0 <= count != len(parts):
            return Answer(index=data.index, error_code=ErrorCode.INVALID_PARTITION_COUNT,
                          base_offset=-1)
        part = parts[data.index]
        if part.mode != PartitionMode.READ_WRITE:
            return Answer(index=data.index, error_code=ErrorCode.PARTITION_NOT_WRITABLE,
                          base_offset=-1)
        header, records = decode_records(bytes(data.records))
        tp = TopicPartition(topic, data.index)
        key = (header.producer_id, tp, header.base_sequence)
        if header.producer_id >= 0 and key in self._sequences:
            return Answer(index=data.index, error_code=0, base_offset=self._sequences[key])
        if header.producer_id >= 0:
            expected = self._next_sequence.get((header.producer_id, tp), 0)
            if header.base_sequence != expected:
                return Answer(index=data.index, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              base_offset=-1)
            self._next_sequence[(header.producer_id, tp)] = expected + len(records)
        base = part.log_end_offset
        for record in records:
            part.records.append(Record(part.log_end_offset, record.timestamp, record.key,
                                       record.value, record.headers))
        if header.producer_id >= 0:
            self._sequences[key] = base
        return Answer(index=data.index, error_code=0, base_offset=base)

    def _list_offsets(self, body: Any) -> Any:
        Response = _reg["ListOffsetsResponse"].cls
        Topic = Response.ListOffsetsTopicResponse
        topics = []
        for t in body.topics:
            answers = []
            for p in t.partitions:
                part = self.topics[t.name][p.partition_index]
                if p.timestamp == -2:
                    offset = 0
                elif p.timestamp == -1:
                    offset = part.log_end_offset
                else:
                    offset = next((r.offset for r in part.records if r.timestamp >= p.timestamp), -1)
                answers.append(Topic.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=0, timestamp=-1, offset=offset,
                    leader_epoch=part.leader_epoch))
            topics.append(Topic(name=t.name, partitions=answers))
        return Response(throttle_time_ms=0, topics=topics)

    def _fetch(self, body: Any) -> Any:
        self.fetch_requests.append(body)
        Response = _reg["FetchResponse"].cls
        Topic = Response.FetchableTopicResponse
        topics = []
        for t in body.topics:
            answers = []
            for p in t.partitions:
                part = self.topics[t.topic][p.partition]
                chosen = part.records[p.fetch_offset:p.fetch_offset + self.max_batches_per_fetch]
                data = b"".join(build_batch([r], base_offset=r.offset) for r in chosen)
                answers.append(Topic.PartitionData(
                    partition_index=p.partition, error_code=0,
                    high_watermark=part.log_end_offset, last_stable_offset=part.log_end_offset,
                    log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
                    records=data))
            topics.append(Topic(topic=t.topic, partitions=answers))
        return Response(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)

    def _offset_for_leader_epoch(self, body: Any) -> Any:
        Response = _reg["OffsetForLeaderEpochResponse"].cls
        Topic = Response.OffsetForLeaderTopicResult
        return Response(throttle_time_ms=0, topics=[Topic(topic=t.topic, partitions=[
            Topic.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=p.leader_epoch,
                                 end_offset=self.topics[t.topic][p.partition]
                                 .end_offset_for_epoch(p.leader_epoch))
            for p in t.partitions]) for t in body.topics])

    def _leader_epochs(self, body: Any) -> Any:
        Response = _reg["LeaderEpochsForPartitionResponse"].cls
        Topic = Response.LeaderEpochsForPartitionResponseTopic
        Partition = Topic.LeaderEpochsForPartitionResponsePartition
        return Response(throttle_time_ms=0, topics=[Topic(topic=t.topic, partitions=[
            Partition(partition=p, error_code=0, prior_leader_epochs=[
                Partition.LeaderEpochsForPartitionPriorEpoch(partition=q, leader_epoch=e)
                for q, e in sorted(self.topics[t.topic][p].prior_epochs.items())])
            for p in t.partitions]) for t in body.topics])


class FakeConnection:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def version_for(self, api_key: int, highest: int, lowest: int = 0) -> int:
        if api_key == ApiKey.LEADER_EPOCHS_FOR_PARTITION and not self.broker.serves_leader_epochs:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "not offered (fake)")
        return highest

    async def request(self, api_key: int, body: Any, *, version: int,
                      timeout_ms: int | None = None, expect_response: bool = True) -> Any:
        answer = self.broker.handle(api_key, body)
        return answer if expect_response else None


class FakeNetworkClient:
    """What the producer and consumer use of `NetworkClient`, answered by a FakeBroker."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.metadata = broker.published
        self.metadata_max_age_ms = 1e12
        self.metadata_age_ms = 0.0
        self.retry_backoff_ms = 1
        self.request_timeout_ms = 1000
        self.refreshes = 0
        self.topics: set[str] = set()

    async def start(self) -> None:
        self.metadata = self.broker.published

    async def close(self) -> None:
        pass

    def add_topics(self, topics: Iterable[str]) -> bool:
        before = len(self.topics)
        self.topics.update(topics)
        return len(self.topics) != before

    async def refresh_metadata(self, *, all_topics: bool = False) -> ClusterMetadata:
        self.refreshes += 1
        self.metadata = self.broker.published
        return self.metadata

    async def maybe_refresh_metadata(self) -> ClusterMetadata:
        return self.metadata

    async def connection(self, node_id: int, role: str = "") -> FakeConnection:
        return FakeConnection(self.broker)

    async def any_connection(self) -> FakeConnection:
        return FakeConnection(self.broker)

    async def call(self, node_id: int | None, api_key: int, body: Any, *, highest: int,
                   lowest: int = 0, role: str = "", timeout_ms: int | None = None) -> Any:
        conn = FakeConnection(self.broker)
        version = conn.version_for(api_key, highest, lowest)
        return await conn.request(api_key, body, version=version)
