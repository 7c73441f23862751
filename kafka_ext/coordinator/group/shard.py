"""GroupCoordinatorShard: the groups and committed offsets of one `__consumer_offsets` partition.

Mirrors Kafka's GroupCoordinatorShard with its GroupMetadataManager (classic and KIP-848
consumer groups) and OffsetMetadataManager (offsets, pending transactional offsets). State is
rebuilt by replaying the partition's records; offset and consumer group records are replayed
after every write, while classic group metadata lives in memory and its records are replayed
only at load (as in Kafka). A group id names a classic, a consumer or a share group (KIP-932,
share_group.py), never two of them.
Owned by the coordinator runtime; touched only on the event loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka_ext.coordinator.group.classic_group import ClassicGroup
from kafka_ext.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicMetadata,
)
from kafka_ext.coordinator.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupRecordKey,
    GroupMetadataKey,
    OffsetAndMetadata,
    OffsetCommitKey,
    assignment_of,
    decode_consumer_group_value,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from kafka_ext.coordinator.group.share_group import (
    ShareGroup,
    decode_share_group_key,
    replay_share_group,
)
from kafka_ext.protocol.errors import DecodeError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True, frozen=True)
class CommittedOffset:
    """A committed offset and the log offset of the record that committed it."""

    value: OffsetAndMetadata
    record_offset: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinatorShard:
    """Groups and offsets of one partition; see the module docstring."""

    def __init__(self, partition: int, on_loaded: Callable[[GroupCoordinatorShard], None] | None
                 = None, on_unloaded: Callable[[GroupCoordinatorShard], None] | None = None,
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.partition = partition
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.share_groups: dict[str, ShareGroup] = {}  # KIP-932 (share_group.py)
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group id -> partition -> offset written in its open transaction
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self.loaded = False
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._clock_ms = clock_ms

    # -- reads -------------------------------------------------------------------------------

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer_groups.get(group_id)

    def share_group(self, group_id: str) -> ShareGroup | None:
        return self.share_groups.get(group_id)

    def _note_simple_group(self, group_id: str) -> None:
        """An offset commit implies its group exists, if only as a simple (memberless) one."""
        if group_id not in self.consumer_groups:
            self.get_or_create_group(group_id)

    def get_or_create_group(self, group_id: str) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, self._clock_ms())
        return group

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self.offsets.get(group_id, {})

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        """Whether an open transaction wrote offsets for the group (for that partition)."""
        for by_group in self.pending_txn_offsets.values():
            pending = by_group.get(group_id)
            if pending and (tp is None or tp in pending):
                return True
        return False

    # -- replay ------------------------------------------------------------------------------

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        try:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetCommitKey):
                self._replay_offset(offset, producer_id, decoded, value)
            elif isinstance(decoded, GroupMetadataKey):
                self._replay_group(decoded.group_id, value)
            elif isinstance(decoded, ConsumerGroupRecordKey):
                self._replay_consumer_group(decoded, value)
            elif decoded is None:
                share_key = decode_share_group_key(key)
                if share_key is not None:
                    replay_share_group(self.share_groups, share_key, value, self._clock_ms())
        except DecodeError as exc:
            log.error("__consumer_offsets-%d: undecodable record at offset %d skipped: %s",
                      self.partition, offset, exc)

    def _replay_offset(self, offset: int, producer_id: int, key: OffsetCommitKey,
                       value: bytes | None) -> None:
        tp = (key.topic, key.partition)
        if producer_id != -1:
            if value is None:
                return  # tombstones are never transactional
            pending = self.pending_txn_offsets.setdefault(producer_id, {})
            pending.setdefault(key.group_id, {})[tp] = CommittedOffset(
                decode_offset_commit_value(value), offset)
            return
        if value is None:
            group_offsets = self.offsets.get(key.group_id)
            if group_offsets is not None:
                group_offsets.pop(tp, None)
                if not group_offsets:
                    del self.offsets[key.group_id]
            return
        self._note_simple_group(key.group_id)
        self.offsets.setdefault(key.group_id, {})[tp] = CommittedOffset(
            decode_offset_commit_value(value), offset)

    def _replay_group(self, group_id: str, value: bytes | None) -> None:
        if value is None:
            # Offsets go by their own tombstones (DeleteGroups and expiry write them), so an
            # empty classic group upgraded to a consumer group keeps its offsets.
            self.groups.pop(group_id, None)
            return
        self.groups[group_id] = ClassicGroup.from_record(
            group_id, decode_group_metadata_value(value), self._clock_ms())

    def _replay_consumer_group(self, key: ConsumerGroupRecordKey, value: bytes | None) -> None:
        """Apply one KIP-848 record (Kafka's GroupMetadataManager.replay for consumer groups)."""
        group_id, rtype = key.group_id, key.record_type
        group = self.consumer_groups.get(group_id)
        if value is None:
            if group is None:
                return
            if rtype == CONSUMER_GROUP_METADATA:
                del self.consumer_groups[group_id]
            elif rtype == CONSUMER_GROUP_PARTITION_METADATA:
                group.subscription_metadata = {}
            elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER and key.member_id is not None:
                group.target.pop(key.member_id, None)
            elif rtype == CONSUMER_GROUP_MEMBER_METADATA and key.member_id is not None:
                group.members.pop(key.member_id, None)
            elif rtype == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT and key.member_id is not None:
                member = group.members.get(key.member_id)
                if member is not None:
                    group.members[key.member_id] = dataclasses.replace(
                        member, member_epoch=0, previous_member_epoch=-1,
                        state=MemberState.STABLE, assigned={}, pending_revocation={})
            return
        if group is None:
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
            classic = self.groups.get(group_id)
            if classic is not None and not classic.members:
                del self.groups[group_id]  # an empty classic group upgraded to this one
        v = decode_consumer_group_value(rtype, value)
        if rtype == CONSUMER_GROUP_METADATA:
            group.group_epoch = v.epoch
        elif rtype == CONSUMER_GROUP_PARTITION_METADATA:
            group.subscription_metadata = {
                t.topic_id: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions)
                for t in v.topics}
        elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = v.assignment_epoch
        elif key.member_id is None:
            return
        elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target[key.member_id] = assignment_of(v.topic_partitions)
        elif rtype == CONSUMER_GROUP_MEMBER_METADATA:
            member = group.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            group.members[key.member_id] = dataclasses.replace(
                member, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                client_host=v.client_host,
                subscribed_topic_names=tuple(v.subscribed_topic_names),
                subscribed_topic_regex=v.subscribed_topic_regex or None,
                server_assignor=v.server_assignor, rebalance_timeout_ms=v.rebalance_timeout_ms)
        elif rtype == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            member = group.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            try:
                state = MemberState(v.state)
            except ValueError:
                state = MemberState.UNKNOWN
            group.members[key.member_id] = dataclasses.replace(
                member, member_epoch=v.member_epoch,
                previous_member_epoch=v.previous_member_epoch, state=state,
                assigned=assignment_of(v.assigned_partitions),
                pending_revocation=assignment_of(v.partitions_pending_revocation))

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, committed: bool,
                               offset: int) -> None:
        """COMMIT makes the producer's pending offsets visible unless a later plain commit of
        the same partition already replaced them; ABORT drops them."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending or not committed:
            return
        for group_id, by_partition in pending.items():
            self._note_simple_group(group_id)
            group_offsets = self.offsets.setdefault(group_id, {})
            for tp, txn_offset in by_partition.items():
                current = group_offsets.get(tp)
                if current is None or current.record_offset < txn_offset.record_offset:
                    group_offsets[tp] = txn_offset

    def on_loaded(self) -> None:
        self.loaded = True
        if self._on_loaded is not None:
            self._on_loaded(self)

    def on_unloaded(self) -> None:
        self.loaded = False
        if self._on_unloaded is not None:
            self._on_unloaded(self)

    def on_committed(self, committed_offset: int) -> None:
        """Group state lives in memory and is current after replay: nothing to apply."""
