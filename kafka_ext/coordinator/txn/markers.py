"""Transaction markers: where a COMMIT/ABORT marker for one partition goes.

One function serves both the local transaction coordinator and the WriteTxnMarkers handler
(API 27, what other brokers' coordinators send), as Kafka's ReplicaManager does for both:
`__consumer_offsets` partitions go through the group coordinator, which must also make the
transaction's offsets visible or drop them; every other partition gets a control batch. A
partition another broker leads gets its marker in a WriteTxnMarkers request to that broker
(Kafka's TransactionMarkerChannelManager). A diskless partition has no leader holding its data:
this broker writes its marker through its own WAL and the partition's Diskless coordinator.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_ext.coordinator.group.coordinator import GROUP_METADATA_TOPIC
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

MARKER_REQUEST_TIMEOUT_S = 30.0


async def write_txn_marker(broker: Any, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, committed: bool,
                           *, local_only: bool = False) -> None:
    """Write the marker ending `producer_id`'s transaction in one partition: here when this
    broker leads it, else on its leader (not with `local_only`: a WriteTxnMarkers request).

    Raises KafkaError with the partition's error (NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, ...).
    """
    known = broker.controller.image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    if part is not None and part.is_diskless:
        await broker.diskless.write_marker(topic, partition, producer_id, producer_epoch,
                                           coordinator_epoch, committed)
        return
    if not local_only and part is not None and part.leader != broker.node_id:
        if part.leader < 0:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"{topic}-{partition} has no leader")
        await _send_marker(broker, part.leader, topic, partition, producer_id, producer_epoch,
                           coordinator_epoch, committed)
        return
    if topic == GROUP_METADATA_TOPIC:
        await broker.group_coordinator.complete_transaction(
            partition, producer_id, producer_epoch, coordinator_epoch, committed)
        return
    replicas = broker.replica_manager
    offset = replicas.append_control_batch(topic, partition, producer_id, producer_epoch,
                                           coordinator_epoch, committed)
    # As Kafka writes markers with acks=all: the transaction is complete only once every
    # in-sync replica has its marker (a new leader must not lose it).
    hosted = replicas.leader_partition(topic, partition)
    if hosted.high_watermark <= offset:
        try:
            await asyncio.wait_for(replicas.wait_for_high_watermark(hosted, offset + 1),
                                   MARKER_REQUEST_TIMEOUT_S)
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the marker in {topic}-{partition} "
                             "did not reach every in-sync replica in time") from None


async def _send_marker(broker: Any, leader: int, topic: str, partition: int, producer_id: int,
                       producer_epoch: int, coordinator_epoch: int, committed: bool) -> None:
    cls = registry()["WriteTxnMarkersRequest"].cls
    request = cls(markers=[cls.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=committed,
        topics=[cls.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
        coordinator_epoch=coordinator_epoch)])
    try:
        response = await broker.broker_channels.request(
            leader, ApiKey.WRITE_TXN_MARKERS, 1, request, MARKER_REQUEST_TIMEOUT_S)
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise KafkaError(ErrorCode.NETWORK_EXCEPTION,
                         f"marker for {topic}-{partition} not sent to broker {leader}: {exc}"
                         ) from None
    for marker in response.markers:
        for result in marker.topics:
            for p in result.partitions:
                if p.error_code:
                    raise KafkaError(ErrorCode(p.error_code),
                                     f"broker {leader} refused the marker for "
                                     f"{topic}-{partition}")
