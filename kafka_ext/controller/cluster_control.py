"""Brokers as the active controller sees them: registration, heartbeats, fencing and the
leaderships that follow (Kafka's ClusterControlManager and BrokerHeartbeatManager).

Pure functions of the metadata image produce the records; `BrokerHeartbeats` keeps what only
the active controller knows, in memory: when each broker last sent a heartbeat. A new active
controller starts every broker's clock afresh, as Kafka's does, so a failover fences nobody.

Until partitions replicate (issue 14) a partition has one replica: a fenced or shutting-down
broker's partitions go offline (leader -1) and come back when it is unfenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import BrokerRegistration, MetadataImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerListener:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


def _new(record_type: str, **fields: Any) -> Any:
    return registry()[record_type].cls(**fields)


class BrokerHeartbeats:
    """Last heartbeat per broker (monotonic ms); owned by the active controller."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._last_ms: dict[int, float] = {}
        self._heard: set[int] = set()  # brokers that heartbeat this controller's term

    def touch(self, broker_id: int, now_ms: float) -> None:
        self._last_ms[broker_id] = now_ms
        self._heard.add(broker_id)

    def reset(self, broker_ids: Iterator[int] | list[int], now_ms: float) -> None:
        """A new active controller gives every broker a full session from now."""
        self._last_ms = {b: now_ms for b in broker_ids}
        self._heard = set()

    def alive(self, image: MetadataImage, broker_id: int, now_ms: float) -> bool:
        """Whether the registered incarnation is known to live: it heartbeat this term and its
        session has not run out. (A restarted single node's old incarnation never heartbeat
        the new controller, so its replacement need not wait a session out.)"""
        return broker_id in self._heard and broker_id not in self.expired(image, now_ms)

    def expired(self, image: MetadataImage, now_ms: float) -> list[int]:
        """Unfenced brokers whose session timed out."""
        return [b.broker_id for b in image.brokers.values() if not b.fenced
                and now_ms - self._last_ms.setdefault(b.broker_id, now_ms)
                > self.session_timeout_ms]


def registration_records(image: MetadataImage, broker_id: int, incarnation_id: uuid.UUID,
                         broker_epoch: int, listeners: list[BrokerListener], rack: str | None,
                         log_dirs: list[uuid.UUID], heartbeat_alive: bool) -> list[Any]:
    """A (re)registration, fenced until the broker has caught up; DUPLICATE_BROKER_REGISTRATION
    while another incarnation of the id is alive (Kafka's rule)."""
    known = image.brokers.get(broker_id)
    if (known is not None and known.incarnation_id != incarnation_id and not known.fenced
            and heartbeat_alive):
        raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                         f"another broker is registered with id {broker_id}")
    if not listeners:
        raise KafkaError(ErrorCode.INVALID_REGISTRATION, "a broker registers at least one "
                         "listener")
    cls = registry()["RegisterBrokerRecord"].cls
    record = cls(broker_id=broker_id, incarnation_id=incarnation_id, broker_epoch=broker_epoch,
                 end_points=[cls.BrokerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                                security_protocol=lst.security_protocol)
                             for lst in listeners],
                 features=[], rack=rack, fenced=True, in_controlled_shutdown=False,
                 log_dirs=list(log_dirs))
    return [record, *_leaderships_of(image, broker_id, NO_LEADER)]


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int
                       ) -> BrokerRegistration:
    known = image.brokers.get(broker_id)
    if known is None:
        raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                         f"broker {broker_id} is not registered")
    if known.broker_epoch != broker_epoch:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"broker {broker_id} epoch {broker_epoch} is not {known.broker_epoch}")
    return known


def unfence_records(image: MetadataImage, broker_id: int) -> list[Any]:
    """The broker may lead again: unfenced, and leader of its offline partitions."""
    known = image.brokers[broker_id]
    records = [_new("UnfenceBrokerRecord", id=broker_id, epoch=known.broker_epoch)]
    for topic_id, partition, _ in _partitions_of(image, broker_id):
        part = image.topics_by_id[topic_id].partitions[partition]
        if part.leader == NO_LEADER:
            records.append(_leader_change(topic_id, partition, broker_id))
    return records


def fence_records(image: MetadataImage, broker_id: int) -> list[Any]:
    """Fence a broker (session expired or shut down): it leads nothing any more."""
    known = image.brokers[broker_id]
    return [_new("FenceBrokerRecord", id=broker_id, epoch=known.broker_epoch),
            *_leaderships_of(image, broker_id, NO_LEADER)]


def controlled_shutdown_records(image: MetadataImage, broker_id: int) -> list[Any]:
    """Controlled shutdown: marked as shutting down, and its leaderships move to another live
    replica (none with one replica: the partition waits offline for it)."""
    known = image.brokers[broker_id]
    records: list[Any] = []
    if not known.in_controlled_shutdown:
        records.append(_new("BrokerRegistrationChangeRecord", broker_id=broker_id,
                            broker_epoch=known.broker_epoch, fenced=0,
                            in_controlled_shutdown=1, log_dirs=[]))
    live = {b.broker_id for b in image.live_brokers()
            if b.broker_id != broker_id and not b.in_controlled_shutdown}
    for topic_id, partition, leads in _partitions_of(image, broker_id):
        if not leads:
            continue
        part = image.topics_by_id[topic_id].partitions[partition]
        successor = next((r for r in part.isr if r in live), NO_LEADER)
        records.append(_leader_change(topic_id, partition, successor))
    return records


def leads_anything(image: MetadataImage, broker_id: int) -> bool:
    return any(leads for _, _, leads in _partitions_of(image, broker_id))


def _leaderships_of(image: MetadataImage, broker_id: int, new_leader: int) -> Iterator[Any]:
    for topic_id, partition, leads in _partitions_of(image, broker_id):
        if leads:
            yield _leader_change(topic_id, partition, new_leader)


def _partitions_of(image: MetadataImage, broker_id: int) -> Iterator[tuple[uuid.UUID, int, bool]]:
    """(topic id, partition, whether the broker leads it) of every classic partition with a
    replica on the broker. Diskless partitions have no leader to move."""
    for topic in image.topics_by_id.values():
        for part in topic.partitions.values():
            if broker_id in part.replicas and not part.is_diskless:
                yield topic.topic_id, part.partition_id, part.leader == broker_id


def _leader_change(topic_id: uuid.UUID, partition: int, leader: int) -> Any:
    return _new("PartitionChangeRecord", topic_id=topic_id, partition_id=partition,
                leader=leader)
