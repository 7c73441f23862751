"""Directory assignments (KIP-858): this broker tells the active controller which log dir each
of its replicas lives in, so that when a dir fails the controller knows which replicas went
with it and moves their leaderships and ISR places (controller/cluster_control.py
`offline_dir_records`).

ReplicaManager compares, with every metadata image and after a replica moves between dirs,
the dir the metadata records for each hosted replica with the dir its log is in, and queues
the differences here. They go out in one AssignReplicasToDirs (73) per turn of the event loop,
grouped by dir, and are retried after a pause while no controller answers; an assignment the
controller refuses for a partition that moved on is dropped (the next image says what holds).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.log_dirs import answer_assign_replicas_to_dirs

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker

log = logging.getLogger(__name__)

ASSIGN_VERSION = 0
RETRY_BACKOFF_S = 0.2
_reg = registry()
Replica = tuple[uuid.UUID, int]  # (topic id, partition)


class DirectoryAssignments:
    """Owned by the broker's event loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._queued: dict[Replica, uuid.UUID] = {}
        self._in_flight: dict[Replica, uuid.UUID] = {}
        self._sending: asyncio.Task[None] | None = None

    def assign(self, topic_id: uuid.UUID, partition: int, directory: uuid.UUID) -> None:
        """Have the controller record that our replica of (topic_id, partition) is in
        `directory`; repeated calls for what is already on its way cost nothing."""
        key = (topic_id, partition)
        if self._in_flight.get(key) == directory or self._queued.get(key) == directory:
            return
        self._queued[key] = directory
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send_queued())

    async def stop(self) -> None:
        if self._sending is not None:
            self._sending.cancel()

    async def _send_queued(self) -> None:
        while self._queued:
            await asyncio.sleep(0)  # the assignments of this turn go together
            self._in_flight, self._queued = self._queued, {}
            try:
                errors = await self._send(self._in_flight)
            except (KafkaError, ConnectionError, TimeoutError, OSError) as exc:
                log.info("AssignReplicasToDirs not answered (%s); retrying", exc)
                self._queued = {**self._in_flight, **self._queued}
                self._in_flight = {}
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            for (topic_id, partition), error in errors.items():
                if error != ErrorCode.NONE:
                    log.info("directory of %s-%d not recorded: %s", topic_id, partition,
                             error.name)
            self._in_flight = {}

    async def _send(self, assignments: dict[Replica, uuid.UUID]) -> dict[Replica, ErrorCode]:
        broker = self.broker
        Request = _reg["AssignReplicasToDirsRequest"].cls
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for (topic_id, partition), directory in assignments.items():
            by_dir.setdefault(directory, {}).setdefault(topic_id, []).append(partition)
        request = Request(
            broker_id=broker.node_id, broker_epoch=broker.lifecycle.broker_epoch,
            directories=[Request.DirectoryData(id=directory, topics=[
                Request.TopicData(topic_id=topic_id, partitions=[
                    Request.PartitionData(partition_index=p) for p in partitions])
                for topic_id, partitions in topics.items()])
                for directory, topics in by_dir.items()])
        response: Any = await broker.lifecycle.to_controller(
            ApiKey.ASSIGN_REPLICAS_TO_DIRS, ASSIGN_VERSION, request,
            answer_assign_replicas_to_dirs)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "AssignReplicasToDirs refused")
        return {(t.topic_id, p.partition_index): ErrorCode(p.error_code)
                for d in response.directories for t in d.topics for p in t.partitions}
