"""Topics created because a Metadata request named them; mirrors Kafka's AutoTopicCreationManager.

Kafka's broker does not wait for the topic: it sends the creation to the controller and
answers LEADER_NOT_AVAILABLE (no partitions); a name whose creation is still in flight gets
UNKNOWN_TOPIC_OR_PARTITION; clients retry their Metadata request and see the topic once the
controller has committed it. So does this broker, also on one node where the commit takes a
millisecond: a client never sees a topic it did not create spring up fully formed in the answer
that asked for it (a topic deleted a moment ago stays absent from the next answer).

The creation goes to `broker.controller.create_topics`, the controller's one entry point for
new topics; on a cluster that call travels to the active controller, as Kafka's broker forwards
a CreateTopics request. `__consumer_offsets` and `__transaction_state` are created with their
coordinator's shape (coordinator/internal_topics.py), never with `num.partitions`.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka_ext.controller.quorum_controller import (
    DISKLESS_METADATA_TOPIC,
    RESERVED_TOPICS,
    TopicCreation,
    check_topic_name,
)
from kafka_ext.coordinator.internal_topics import coordinator_runtime
from kafka_ext.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# Created by the broker itself at start or by its diskless coordinator, never on request.
_NEVER_AUTO_CREATED = RESERVED_TOPICS | {DISKLESS_METADATA_TOPIC}


class AutoTopicCreationManager:
    """`broker.auto_topic_creation`; loop-owned. `_in_flight` holds the names sent to the
    controller and not answered yet."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker
        self._in_flight: set[str] = set()

    def create_topics(self, names: list[str]) -> list[tuple[str, ErrorCode]]:
        """Start creating the missing topics `names`; (name, error) to answer each with."""
        answers: list[tuple[str, ErrorCode]] = []
        creations: list[TopicCreation] = []
        for name in names:
            try:
                check_topic_name(name)
            except KafkaError:
                answers.append((name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            if name in _NEVER_AUTO_CREATED or name in self._in_flight:
                answers.append((name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            self._in_flight.add(name)
            creations.append(self._creatable_topic(name))
            answers.append((name, ErrorCode.LEADER_NOT_AVAILABLE))
        if creations:
            self._broker.spawn(self._send(creations))
        return answers

    def _creatable_topic(self, name: str) -> TopicCreation:
        """An internal topic as its coordinator creates it; any other with the broker's
        defaults (num.partitions, default.replication.factor)."""
        runtime = coordinator_runtime(self._broker, name)
        return TopicCreation(name) if runtime is None else runtime.topic_creation()

    async def _send(self, creations: list[TopicCreation]) -> None:
        try:
            results = await self._broker.controller.create_topics(creations, validate_only=False)
        except KafkaError as exc:  # the metadata log could not be written: clients retry
            log.warning("auto-creation of %s failed: %s", [c.name for c in creations], exc)
            return
        finally:
            self._in_flight.difference_update(c.name for c in creations)
        for result in results:
            if result.error == ErrorCode.NONE:
                log.info("auto-created topic %s with %d partition(s)", result.name,
                         result.num_partitions)
            elif result.error != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("auto-creation of topic %s failed: %s %s", result.name,
                            result.error.name, result.message)
