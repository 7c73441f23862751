"""Transaction markers: where a COMMIT/ABORT marker for one partition goes.

One function serves both the local transaction coordinator and the WriteTxnMarkers handler
(API 27, what other brokers' coordinators send), as Kafka's ReplicaManager does for both:
`__consumer_offsets` partitions go through the group coordinator, which must also make the
transaction's offsets visible or drop them; every other partition gets a control batch.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.coordinator.group.coordinator import GROUP_METADATA_TOPIC


async def write_txn_marker(broker: Any, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, committed: bool) -> None:
    """Write the marker ending `producer_id`'s transaction in one partition this broker leads.

    Raises KafkaError with the partition's error (NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, ...).
    """
    if topic == GROUP_METADATA_TOPIC:
        await broker.group_coordinator.complete_transaction(
            partition, producer_id, producer_epoch, coordinator_epoch, committed)
        return
    broker.replica_manager.append_control_batch(
        topic, partition, producer_id, producer_epoch, coordinator_epoch, committed)
