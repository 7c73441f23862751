"""A consumer's side of the classic group protocol: Kafka's `ConsumerCoordinator`.

FindCoordinator locates the group's coordinator; JoinGroup (with KIP-394's member id round)
and SyncGroup make this member part of a generation, the leader computing the range assignment;
a heartbeat task keeps the membership alive and notices rebalances; OffsetCommit and
OffsetFetch keep the group's positions; LeaveGroup ends the membership. Eager rebalancing: a
member gives up all its partitions before it joins again.

KIP-253 (seed 001): the heartbeat carries the positions the coordinator asks for and asks for
the positions this member waits on, in the Heartbeat's tagged Topics (v4+); the consumer supplies
and takes them through `exchange_positions`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_ext.client.assignor import (
    CONSUMER_PROTOCOL_TYPE,
    RANGE_ASSIGNOR,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from kafka_ext.client.expansion import HeartbeatEntries
from kafka_ext.client.metadata import TopicPartition
from kafka_ext.client.network_client import NetworkClient
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

COORDINATOR_ROLE = "coordinator"  # the coordinator's own connection, beside the fetch one
GROUP_KEY_TYPE = 0
FIND_COORDINATOR_VERSION = 6
JOIN_GROUP_VERSION = 9
SYNC_GROUP_VERSION = 5
HEARTBEAT_VERSION = 4  # v4 is flexible: it carries KIP-253's tagged Topics
LEAVE_GROUP_VERSION = 5
OFFSET_COMMIT_VERSION = 9
OFFSET_FETCH_VERSION = 9
JOIN_EXTRA_TIMEOUT_MS = 5000  # beyond the rebalance timeout, as Kafka's JoinGroup waits

_COORDINATOR_GONE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                               ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
_MEMBER_GONE = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                          ErrorCode.FENCED_INSTANCE_ID})

_reg = registry()
_FindCoordinator = _reg["FindCoordinatorRequest"].cls
_JoinGroup = _reg["JoinGroupRequest"].cls
_SyncGroup = _reg["SyncGroupRequest"].cls
_Heartbeat = _reg["HeartbeatRequest"].cls
_LeaveGroup = _reg["LeaveGroupRequest"].cls
_OffsetCommit = _reg["OffsetCommitRequest"].cls
_OffsetFetch = _reg["OffsetFetchRequest"].cls

# The consumer's side of the KIP-253 exchange: our entries for the next Heartbeat, and a sink
# for the coordinator's answer.
PositionSource = Callable[[], HeartbeatEntries]
PositionSink = Callable[[HeartbeatEntries], None]


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class ConsumerCoordinator:
    """This member's place in group `group_id`. Owned by one consumer and its event loop.

    `needs_join` is set by the heartbeat task (a rebalance started, the member was forgotten)
    and cleared by `join()`; the consumer checks it on every poll.
    """

    def __init__(self, client: NetworkClient, group_id: str, *,
                 session_timeout_ms: int = 45_000, rebalance_timeout_ms: int = 300_000,
                 heartbeat_interval_ms: int = 3_000, retry_backoff_ms: int = 100,
                 group_instance_id: str | None = None) -> None:
        self.client = client
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.group_instance_id = group_instance_id
        self.member_id = ""
        self.generation_id = -1
        self.is_leader = False
        self.needs_join = True
        self.coordinator_id: int | None = None
        self.position_source: PositionSource | None = None
        self.position_sink: PositionSink | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None

    # -- finding the coordinator ---------------------------------------------------------------

    async def ensure_coordinator(self) -> int:
        """The coordinator's node id, asking any broker until one answers."""
        while self.coordinator_id is None:
            try:
                node_id = await self._find_coordinator()
            except KafkaError as exc:
                if not (exc.code.retriable or exc.code in _COORDINATOR_GONE):
                    raise
                log.debug("FindCoordinator for %s: %s", self.group_id, exc)
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            if node_id not in self.client.metadata.brokers:
                await self.client.refresh_metadata()
            self.coordinator_id = node_id
        return self.coordinator_id

    async def _find_coordinator(self) -> int:
        conn = await self.client.any_connection()
        version = conn.version_for(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION)
        request = _FindCoordinator(key=self.group_id, key_type=GROUP_KEY_TYPE,
                                   coordinator_keys=[self.group_id])
        answer = await conn.request(ApiKey.FIND_COORDINATOR, request, version=version)
        if version >= 4:
            entry = answer.coordinators[0]
            code, node_id, message = _code(entry.error_code), entry.node_id, entry.error_message
        else:
            code, node_id, message = _code(answer.error_code), answer.node_id, answer.error_message
        if code != ErrorCode.NONE:
            raise KafkaError(code, message or f"FindCoordinator {self.group_id}")
        return int(node_id)

    def coordinator_lost(self) -> None:
        """Forget the coordinator: the next request looks it up again."""
        if self.coordinator_id is not None:
            log.debug("coordinator of %s lost", self.group_id)
        self.coordinator_id = None

    async def _call(self, api_key: int, body: Any, *, highest: int, lowest: int = 0,
                    timeout_ms: int | None = None) -> tuple[Any, int]:
        """One request to the coordinator: (answer, version). Connection trouble forgets the
        coordinator and raises."""
        node_id = await self.ensure_coordinator()
        try:
            conn = await self.client.connection(node_id, COORDINATOR_ROLE)
            version = conn.version_for(api_key, highest, lowest)
            return await conn.request(api_key, body, version=version, timeout_ms=timeout_ms), version
        except KafkaError as exc:
            if exc.code in _COORDINATOR_GONE:
                self.coordinator_lost()
            raise

    # -- joining -------------------------------------------------------------------------------

    async def join(self, topics: Iterable[str],
                   partitions_of: Callable[[set[str]], Any]) -> dict[str, list[int]]:
        """Join the group and return this member's assignment (topic -> partitions).

        `partitions_of(topics)` is awaited by the leader for the readable partitions of every
        member's topics (topic -> partitions), after a metadata refresh.
        """
        self.stop_heartbeats()
        subscription = encode_subscription(topics)
        while True:
            try:
                joined = await self._join_once(subscription)
                if joined is None:
                    continue  # KIP-394: we have a member id now; join with it
                if joined.leader == self.member_id:
                    members = {m.member_id: _subscribed(m.metadata) for m in joined.members}
                    wanted = set().union(*members.values()) if members else set()
                    available = await partitions_of(wanted)
                    plan = range_assign(members, available)
                    assignments = {member: encode_assignment(a) for member, a in plan.items()}
                else:
                    assignments = {}
                assignment = await self._sync(assignments)
            except KafkaError as exc:
                if not self._recoverable(exc):
                    raise
                log.debug("joining %s: %s", self.group_id, exc)
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            if assignment is None:
                continue
            self.needs_join = False
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeats())
            return assignment

    def _recoverable(self, exc: KafkaError) -> bool:
        if exc.code in _MEMBER_GONE:
            self.member_id = "" if exc.code == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
            self.generation_id = -1
            return True
        if exc.code in _COORDINATOR_GONE:
            self.coordinator_lost()
            return True
        return exc.code in (ErrorCode.REBALANCE_IN_PROGRESS,
                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) or exc.code.retriable

    async def _join_once(self, subscription: bytes) -> Any:
        request = _JoinGroup(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=[_JoinGroup.JoinGroupRequestProtocol(name=RANGE_ASSIGNOR,
                                                           metadata=subscription)],
            reason=None)
        answer, _ = await self._call(
            ApiKey.JOIN_GROUP, request, highest=JOIN_GROUP_VERSION,
            timeout_ms=self.rebalance_timeout_ms + JOIN_EXTRA_TIMEOUT_MS)
        code = _code(answer.error_code)
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            return None
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"JoinGroup {self.group_id}")
        self.member_id = answer.member_id
        self.generation_id = answer.generation_id
        self.is_leader = answer.leader == answer.member_id
        return answer

    async def _sync(self, assignments: Mapping[str, bytes]) -> dict[str, list[int]] | None:
        request = _SyncGroup(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=RANGE_ASSIGNOR,
            assignments=[_SyncGroup.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in sorted(assignments.items())])
        answer, _ = await self._call(ApiKey.SYNC_GROUP, request, highest=SYNC_GROUP_VERSION,
                                     timeout_ms=self.rebalance_timeout_ms + JOIN_EXTRA_TIMEOUT_MS)
        code = _code(answer.error_code)
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"SyncGroup {self.group_id}")
        try:
            return decode_assignment(bytes(answer.assignment))
        except DecodeError as exc:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"undecodable assignment: {exc.message}") from exc

    # -- heartbeats ------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        """Heartbeat every interval until the membership ends or a rebalance starts."""
        while not self.needs_join:
            started = time.monotonic()
            try:
                await self.heartbeat()
            except KafkaError as exc:
                log.debug("heartbeat of %s: %s", self.group_id, exc)
                if exc.code in _MEMBER_GONE or exc.code == ErrorCode.REBALANCE_IN_PROGRESS:
                    self._recoverable(exc)
                    self.needs_join = True
                    return
                if not (exc.code.retriable or exc.code in _COORDINATOR_GONE):
                    self.needs_join = True
                    return
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            elapsed_s = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.heartbeat_interval_ms / 1000 - elapsed_s))

    async def heartbeat(self) -> None:
        """One Heartbeat, with KIP-253's positions when the consumer has any to exchange."""
        entries = self.position_source() if self.position_source is not None else {}
        Topic = _Heartbeat.HeartbeatRequestTopic
        Partition = Topic.HeartbeatRequestPartition
        request = _Heartbeat(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            topics=[Topic(topic=topic, partitions=[
                Partition(partition=p, need_position=need, position=position)
                for p, need, position in partitions]) for topic, partitions in entries.items()])
        answer, version = await self._call(ApiKey.HEARTBEAT, request, highest=HEARTBEAT_VERSION)
        code = _code(answer.error_code)
        if version >= 4 and self.position_sink is not None:
            self.position_sink({t.topic: [(p.partition, p.need_position, p.position)
                                          for p in t.partitions] for t in answer.topics or ()})
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"Heartbeat {self.group_id}")

    def stop_heartbeats(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None

    # -- leaving ---------------------------------------------------------------------------------

    async def leave(self) -> None:
        """Leave the group (a static member stays until its session ends, as in Kafka)."""
        self.stop_heartbeats()
        self.needs_join = True
        if not self.member_id or self.group_instance_id is not None:
            return
        request = _LeaveGroup(
            group_id=self.group_id, member_id=self.member_id,
            members=[_LeaveGroup.MemberIdentity(member_id=self.member_id, group_instance_id=None,
                                                reason="the consumer is closing")])
        try:
            answer, _ = await self._call(ApiKey.LEAVE_GROUP, request, highest=LEAVE_GROUP_VERSION)
            if _code(answer.error_code) != ErrorCode.NONE:
                log.debug("LeaveGroup %s: %s", self.group_id, _code(answer.error_code).name)
        except KafkaError as exc:
            log.debug("LeaveGroup %s: %s", self.group_id, exc)
        self.member_id = ""
        self.generation_id = -1

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int], *, in_group: bool) -> None:
        """Commit positions; `in_group=False` commits as a consumer with manual assignment
        (no generation). Raises KafkaError, after coordinator retries, for a refused commit."""
        if not offsets:
            return
        Topic = _OffsetCommit.OffsetCommitRequestTopic
        Partition = Topic.OffsetCommitRequestPartition
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(Partition(
                partition_index=tp.partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""))
        request = _OffsetCommit(
            group_id=self.group_id,
            generation_id_or_member_epoch=self.generation_id if in_group else -1,
            member_id=self.member_id if in_group else "",
            group_instance_id=self.group_instance_id if in_group else None,
            topics=[Topic(name=t, partitions=p) for t, p in by_topic.items()])
        while True:
            try:
                answer, _ = await self._call(ApiKey.OFFSET_COMMIT, request,
                                             highest=OFFSET_COMMIT_VERSION, lowest=2)
            except KafkaError as exc:
                if exc.code in _COORDINATOR_GONE:
                    await asyncio.sleep(self.retry_backoff_ms / 1000)
                    continue
                raise
            errors = {_code(p.error_code) for t in answer.topics for p in t.partitions}
            errors.discard(ErrorCode.NONE)
            if not errors:
                return
            if errors & _COORDINATOR_GONE or ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in errors:
                self.coordinator_lost()
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            if errors & (_MEMBER_GONE | {ErrorCode.REBALANCE_IN_PROGRESS}):
                self.needs_join = True
            error = min(errors)
            raise KafkaError(error, f"OffsetCommit {self.group_id} refused")

    async def fetch_committed(self, partitions: Iterable[TopicPartition]
                              ) -> dict[TopicPartition, int]:
        """The group's committed offsets of `partitions` (-1: none)."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = _OffsetFetch(
            group_id=self.group_id, require_stable=True,
            topics=[_OffsetFetch.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                    for t, p in by_topic.items()],
            groups=[_OffsetFetch.OffsetFetchRequestGroup(
                group_id=self.group_id, member_id=None, member_epoch=-1,
                topics=[_OffsetFetch.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in by_topic.items()])])
        while True:
            try:
                answer, version = await self._call(ApiKey.OFFSET_FETCH, request,
                                                   highest=OFFSET_FETCH_VERSION, lowest=1)
            except KafkaError as exc:
                if exc.code in _COORDINATOR_GONE:
                    await asyncio.sleep(self.retry_backoff_ms / 1000)
                    continue
                raise
            if version >= 8:
                group = answer.groups[0]
                code, topics = _code(group.error_code), group.topics
            else:
                code, topics = _code(answer.error_code), answer.topics
            codes = {code} | {_code(p.error_code) for t in topics for p in t.partitions}
            codes.discard(ErrorCode.NONE)
            if codes & (_COORDINATOR_GONE | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                              ErrorCode.UNSTABLE_OFFSET_COMMIT}):
                if codes & _COORDINATOR_GONE:
                    self.coordinator_lost()
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            if codes:
                raise KafkaError(min(codes), f"OffsetFetch {self.group_id}")
            return {TopicPartition(t.name, p.partition_index): p.committed_offset
                    for t in topics for p in t.partitions}


def _subscribed(metadata: bytes) -> list[str]:
    """A member's topics; a member whose subscription does not decode gets nothing."""
    try:
        return decode_subscription(bytes(metadata))
    except DecodeError:
        log.warning("a member's subscription does not decode; it gets no partitions")
        return []
