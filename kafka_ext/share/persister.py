"""The share-partition state persister (KIP-932): what a share-partition leader keeps durable.

A share-partition (one share group reading one topic-partition) keeps its start offset and the
state of its in-flight records on the share coordinator, in `__share_group_state`, through
Initialize/Read/Write/Delete/ReadShareGroupStateSummary (keys 83-87). This module is the
interface both sides agree on; `SharePersister` is what a broker holds (`broker.share_persister`):
it finds the coordinator of each key and sends it the request, or calls the local share
coordinator when this broker is it. The share-partition leader (`share_partition.py`) and the
group coordinator (initialize, describe/alter/delete offsets, delete groups) are its callers.

Every call raises `KafkaError` with the coordinator's error code for its key; the caller decides
what a code means for its client (Kafka's persister does the same, per partition).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from kafka_ext.storage.checkpoints import kafka_uuid_to_str


class DeliveryState(enum.IntEnum):
    """A record's state in a share-partition (Kafka's RecordState). ACQUIRED is never
    persisted: an acquired record is written as AVAILABLE with its delivery count."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


# StartOffset/StateEpoch of a key the group coordinator has not initialized with an offset:
# the share-partition leader resolves it with `share.auto.offset.reset` and writes it back.
UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True, order=True)
class SharePartitionKey:
    """A share-partition: the state's key on the share coordinator."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """FindCoordinator's key (key type SHARE = 2) and the hash key of its state partition:
        "groupId:topicId:partition" with the topic id in Kafka's base64 form, as Kafka's share
        coordinator places it."""
        return f"{self.group_id}:{kafka_uuid_to_str(self.topic_id)}:{self.partition}"


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets [first_offset, last_offset] share one delivery state and delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """The persisted state of a share-partition as ReadShareGroupState returns it."""

    state_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    """ReadShareGroupStateSummary: what DescribeShareGroupOffsets shows."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1  # v1+; -1 when unknown


class SharePersister(Protocol):
    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        """InitializeShareGroupState: (re)start the key's state at `start_offset` with
        `state_epoch`, dropping any state batches it had."""

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ShareState:
        """ReadShareGroupState by the partition's leader at `leader_epoch` (a stale epoch is
        FENCED_LEADER_EPOCH); an uninitialized key raises UNKNOWN_TOPIC_OR_PARTITION."""

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        """WriteShareGroupState: the new start offset and the batches whose state changed
        (merged into the coordinator's snapshot over what it had); a stale state epoch is
        FENCED_STATE_EPOCH, a stale leader epoch FENCED_LEADER_EPOCH."""

    async def delete(self, key: SharePartitionKey) -> None:
        """DeleteShareGroupState: forget the key (group or topic deleted, offsets deleted)."""

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1
                           ) -> ShareStateSummary:
        """ReadShareGroupStateSummary; an uninitialized key raises
        UNKNOWN_TOPIC_OR_PARTITION."""
