"""Brokers as the active controller sees them: registration, heartbeats, fencing and the
leaderships that follow (Kafka's ClusterControlManager and BrokerHeartbeatManager).

Pure functions of the metadata image produce the records; `BrokerHeartbeats` keeps what only
the active controller knows, in memory: when each broker last sent a heartbeat, and on which
connection. A new active controller starts every broker's clock afresh, as Kafka's does, so a
failover fences nobody.

Beyond Kafka, a broker's session also ends broker.heartbeat.connection.loss.timeout.ms after the
connection its current incarnation heartbeats on closes, unless a heartbeat of that incarnation
arrives on another connection first: a process that dies closes its sockets at once, so a
kill -9 need not wait out broker.session.timeout.ms. A silent link (a host crash, a partition
that drops packets) closes nothing and still waits for the session (docs/cluster.md).

Leaders and ISRs change through controller/partition_change.py: a fenced or shutting-down
broker leaves the ISRs and its leaderships move to another in-sync replica; a partition whose
only in-sync replica it was goes offline (leader -1) until it returns.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kafka_ext.controller.image import BrokerRegistration, MetadataImage, PartitionImage
from kafka_ext.controller.partition_change import NO_LEADER, ElrRule, partition_change
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

class ElectionPolicy(Protocol):
    """What elections of a topic's partitions follow (the active controller resolves it)."""

    def unclean_allowed(self, topic: str) -> bool:
        """unclean.leader.election.enable of the topic."""

    def elr_rule(self, topic: str, unclean_shutdown: frozenset[int] = frozenset()
                 ) -> ElrRule | None:
        """KIP-966's rule for the topic, None when eligible leader replicas are off."""


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


# The "connection" of a combined node's broker to its own active controller: calls in process,
# which no socket can take away (BrokerHeartbeats.heard_on).
IN_PROCESS: Hashable = object()


def _new(record_type: str, **fields: Any) -> Any:
    return registry()[record_type].cls(**fields)


class BrokerHeartbeats:
    """What the active controller knows of each broker's session (monotonic ms), in memory:
    the last heartbeat, and the connection the current incarnation heartbeats on. Every method
    takes the time it is called at, so tests and simulations drive it on their own clock."""

    def __init__(self, session_timeout_ms: int, connection_loss_timeout_ms: int = -1) -> None:
        self.session_timeout_ms = session_timeout_ms
        # broker.heartbeat.connection.loss.timeout.ms; negative: a lost connection means nothing.
        self.connection_loss_timeout_ms = connection_loss_timeout_ms
        self._last_ms: dict[int, float] = {}
        self._heard: set[int] = set()  # brokers that heartbeat this controller's term
        # broker -> (connection, broker epoch): where its latest heartbeat or registration came.
        self._connections: dict[int, tuple[Hashable, int]] = {}
        # broker -> (when, broker epoch): that connection closed and none has replaced it yet.
        self._lost: dict[int, tuple[float, int]] = {}

    def touch(self, broker_id: int, now_ms: float) -> None:
        self._last_ms[broker_id] = now_ms
        self._heard.add(broker_id)

    def heard_on(self, broker_id: int, broker_epoch: int, connection: Hashable) -> None:
        """A heartbeat (or registration) of the broker's current incarnation `broker_epoch`
        arrived on `connection`: that is the one to watch now, and a loss of an earlier one is
        forgotten (the broker came back)."""
        self._connections[broker_id] = (connection, broker_epoch)
        self._lost.pop(broker_id, None)

    def connection_lost(self, connection: Hashable, now_ms: float) -> list[int]:
        """`connection` closed: the brokers whose latest heartbeat came on it (none when it was
        already replaced, a stale one) start their grace; returns them."""
        brokers = [b for b, (c, _) in self._connections.items() if c == connection]
        for broker_id in brokers:
            _, broker_epoch = self._connections.pop(broker_id)
            self._lost[broker_id] = (now_ms, broker_epoch)
        return brokers

    def reset(self, broker_ids: Iterator[int] | list[int], now_ms: float) -> None:
        """A new active controller gives every broker a full session from now; connections
        brokers opened to an earlier controller term tell it nothing."""
        self._last_ms = {b: now_ms for b in broker_ids}
        self._heard = set()
        self._connections = {}
        self._lost = {}

    def alive(self, image: MetadataImage, broker_id: int, now_ms: float) -> bool:
        """Whether the registered incarnation is known to live: it heartbeat this term and its
        session has not run out. (A restarted single node's old incarnation never heartbeat
        the new controller, so its replacement need not wait a session out.)"""
        return broker_id in self._heard and broker_id not in self.expired(image, now_ms)

    def connection_lost_ms(self, broker: BrokerRegistration) -> float | None:
        """When the heartbeat connection of the registered incarnation closed without another
        taking its place; None when it did not, or when connection loss is not watched."""
        lost = self._lost.get(broker.broker_id)
        if lost is None or self.connection_loss_timeout_ms < 0 or lost[1] != broker.broker_epoch:
            return None
        return lost[0]

    def _deadline_ms(self, broker: BrokerRegistration, now_ms: float) -> float:
        deadline = self._last_ms.setdefault(broker.broker_id, now_ms) + self.session_timeout_ms
        lost_ms = self.connection_lost_ms(broker)
        if lost_ms is not None:
            deadline = min(deadline, lost_ms + self.connection_loss_timeout_ms)
        return deadline

    def next_expiry_ms(self, image: MetadataImage, now_ms: float) -> float | None:
        """When the first session of an unfenced broker runs out, if any broker is unfenced."""
        return min((self._deadline_ms(b, now_ms) for b in image.brokers.values()
                    if not b.fenced), default=None)

    def expired(self, image: MetadataImage, now_ms: float) -> list[int]:
        """Unfenced brokers whose session timed out, or whose heartbeat connection closed
        longer ago than the grace without their coming back."""
        return [b.broker_id for b in image.brokers.values()
                if not b.fenced and now_ms > self._deadline_ms(b, now_ms)]


def registration_records(image: MetadataImage, broker_id: int, incarnation_id: uuid.UUID,
                         broker_epoch: int, listeners: list[BrokerListener], rack: str | None,
                         log_dirs: list[uuid.UUID], heartbeat_alive: bool,
                         policy: ElectionPolicy, previous_broker_epoch: int = -1) -> list[Any]:
    """A (re)registration, fenced until the broker has caught up; DUPLICATE_BROKER_REGISTRATION
    while another incarnation of the id is alive (Kafka's rule). A broker known before that
    does not present the epoch of its registration (written at its clean shutdown) shut down
    uncleanly: it may have lost what it had not flushed, and leaves every ELR (KIP-966)."""
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
    unclean = known is not None and previous_broker_epoch != known.broker_epoch
    if unclean and image.elr_enabled:
        log.info("broker %d registers after an unclean shutdown (epoch %d, not %d): it leaves "
                 "the eligible leader replicas", broker_id, previous_broker_epoch,
                 known.broker_epoch if known is not None else -1)
    return [record, *_without(image, broker_id, policy,
                              frozenset({broker_id}) if unclean else frozenset())]


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


def alive_brokers(image: MetadataImage, *, without: int = NO_LEADER) -> set[int]:
    """Brokers that may lead or stay in an ISR: unfenced and not shutting down (KIP-841)."""
    return {b.broker_id for b in image.live_brokers()
            if not b.in_controlled_shutdown and b.broker_id != without}


def unfence_records(image: MetadataImage, broker_id: int, policy: ElectionPolicy) -> list[Any]:
    """The broker may lead again: unfenced, and leader of the leaderless partitions whose ISR
    it is in (of any it hosts, where unclean election is allowed)."""
    known = image.brokers[broker_id]
    records = [_new("UnfenceBrokerRecord", id=broker_id, epoch=known.broker_epoch)]
    alive = alive_brokers(image) | {broker_id}
    for topic_id, part in _partitions_of(image, broker_id):
        if part.leader == NO_LEADER:
            records += _changes(image, topic_id, part, alive, policy)
    return records


def fence_records(image: MetadataImage, broker_id: int, policy: ElectionPolicy) -> list[Any]:
    """Fence a broker (session expired, re-registered or shut down): it leaves every ISR it can
    leave and leads nothing any more."""
    known = image.brokers[broker_id]
    return [_new("FenceBrokerRecord", id=broker_id, epoch=known.broker_epoch),
            *_without(image, broker_id, policy)]


def unregister_records(image: MetadataImage, broker_id: int, policy: ElectionPolicy) -> list[Any]:
    """UnregisterBroker: the broker leaves every ISR and leadership as when fenced, then its
    registration goes (BROKER_ID_NOT_REGISTERED when it has none)."""
    known = image.brokers.get(broker_id)
    if known is None:
        raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                         f"Broker ID {broker_id} is not currently registered")
    return [*_without(image, broker_id, policy),
            _new("UnregisterBrokerRecord", broker_id=broker_id, broker_epoch=known.broker_epoch)]


def controlled_shutdown_records(image: MetadataImage, broker_id: int,
                                policy: ElectionPolicy) -> list[Any]:
    """Controlled shutdown: marked as shutting down; its leaderships move to another alive
    in-sync replica and it leaves the ISRs (a partition it is the last in-sync replica of keeps
    it in the ISR with no leader, as Kafka's controller leaves it)."""
    known = image.brokers[broker_id]
    records: list[Any] = []
    if not known.in_controlled_shutdown:
        records.append(_new("BrokerRegistrationChangeRecord", broker_id=broker_id,
                            broker_epoch=known.broker_epoch, fenced=0,
                            in_controlled_shutdown=1, log_dirs=[]))
    alive = alive_brokers(image, without=broker_id)
    for topic_id, part in _partitions_of(image, broker_id):
        records += _changes(image, topic_id, part, alive, policy)
    return records


def leads_anything(image: MetadataImage, broker_id: int) -> bool:
    return any(part.leader == broker_id for _, part in _partitions_of(image, broker_id))


def _without(image: MetadataImage, broker_id: int, policy: ElectionPolicy,
             unclean_shutdown: frozenset[int] = frozenset()) -> list[Any]:
    alive = alive_brokers(image, without=broker_id)
    records: list[Any] = []
    for topic_id, part in _partitions_of(image, broker_id):
        records += _changes(image, topic_id, part, alive, policy, unclean_shutdown)
    return records


def offline_dir_records(image: MetadataImage, broker_id: int, policy: ElectionPolicy
                        ) -> list[Any]:
    """After a broker reported log dirs offline (KIP-858): its replicas assigned to them leave
    the ISRs, and where one led, an in-sync replica elsewhere takes over."""
    alive = alive_brokers(image)
    records: list[Any] = []
    for topic_id, part in _partitions_of(image, broker_id):
        if broker_id in image.replicas_on_offline_dirs(part):
            records += _changes(image, topic_id, part, alive, policy)
    return records


def eligible_brokers(image: MetadataImage, part: PartitionImage, alive: set[int]) -> set[int]:
    """The alive brokers that may lead `part` or be in its ISR: not those whose replica of it
    is in a log dir that went offline."""
    offline = image.replicas_on_offline_dirs(part)
    return alive - offline if offline else alive


def _changes(image: MetadataImage, topic_id: uuid.UUID, part: PartitionImage, alive: set[int],
             policy: ElectionPolicy, unclean_shutdown: frozenset[int] = frozenset()
             ) -> list[Any]:
    topic = image.topics_by_id[topic_id]
    change = partition_change(topic_id, part, eligible_brokers(image, part, alive),
                              policy.unclean_allowed(topic.name),
                              elr=policy.elr_rule(topic.name, unclean_shutdown))
    if change is None:
        return []
    record, chosen = change
    if chosen.unclean:
        log.warning("unclean leader election: broker %d leads %s-%d without being in sync; "
                    "acknowledged writes it missed are lost", chosen.leader, topic.name,
                    part.partition_id)
    return [record]


def _partitions_of(image: MetadataImage, broker_id: int
                   ) -> Iterator[tuple[uuid.UUID, PartitionImage]]:
    """(topic id, partition) of every classic partition with a replica on the broker.
    Diskless partitions have no leader to move."""
    for topic in image.topics_by_id.values():
        for part in topic.partitions.values():
            if broker_id in part.replicas and not part.is_diskless:
                yield topic.topic_id, part
