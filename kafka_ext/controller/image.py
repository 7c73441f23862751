"""MetadataImage: the cluster's state as of one offset of `__cluster_metadata`; never mutated.

Mirrors Kafka's MetadataImage/MetadataDelta: `apply` returns a new image that shares every part
the record did not touch, so request handlers can keep reading the image they started with.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

# ConfigResource types on the wire (DescribeConfigs and ConfigRecord).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(slots=True, frozen=True)
class PartitionImage:
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(slots=True, frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage]

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first else 0


@dataclass(slots=True, frozen=True)
class MetadataImage:
    offset: int = -1
    topics_by_name: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    # (resource type, resource name) -> {config name: value}; "" name = cluster default.
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), {})

    def apply(self, offset: int, record_name: str, record: Any) -> MetadataImage:
        """The image after one record; unknown record types leave it unchanged."""
        apply = _APPLIERS.get(record_name)
        image = apply(self, record) if apply else self
        return replace(image, offset=offset)


def _put_topic(image: MetadataImage, topic: TopicImage) -> MetadataImage:
    by_name = dict(image.topics_by_name)
    by_id = dict(image.topics_by_id)
    by_name[topic.name] = topic
    by_id[topic.topic_id] = topic
    return replace(image, topics_by_name=by_name, topics_by_id=by_id)


def _apply_topic(image: MetadataImage, record: Any) -> MetadataImage:
    return _put_topic(image, TopicImage(record.name, record.topic_id, {}))


def _apply_partition(image: MetadataImage, record: Any) -> MetadataImage:
    topic = image.topics_by_id[record.topic_id]
    partitions = dict(topic.partitions)
    partitions[record.partition_id] = PartitionImage(
        record.partition_id, tuple(record.replicas), tuple(record.isr), record.leader,
        record.leader_epoch, record.partition_epoch)
    return _put_topic(image, replace(topic, partitions=partitions))


def _apply_partition_change(image: MetadataImage, record: Any) -> MetadataImage:
    topic = image.topics_by_id[record.topic_id]
    old = topic.partitions[record.partition_id]
    changes: dict[str, Any] = {"partition_epoch": old.partition_epoch + 1}
    if record.isr is not None:
        changes["isr"] = tuple(record.isr)
    if record.replicas is not None:
        changes["replicas"] = tuple(record.replicas)
    if record.leader != -2:  # -2: leader unchanged
        changes["leader"] = record.leader
        changes["leader_epoch"] = old.leader_epoch + 1
    partitions = dict(topic.partitions)
    partitions[record.partition_id] = replace(old, **changes)
    return _put_topic(image, replace(topic, partitions=partitions))


def _apply_remove_topic(image: MetadataImage, record: Any) -> MetadataImage:
    topic = image.topics_by_id.get(record.topic_id)
    if topic is None:
        return image
    by_name = dict(image.topics_by_name)
    by_id = dict(image.topics_by_id)
    del by_name[topic.name]
    del by_id[topic.topic_id]
    configs = dict(image.configs)
    configs.pop((TOPIC_RESOURCE, topic.name), None)
    return replace(image, topics_by_name=by_name, topics_by_id=by_id, configs=configs)


def _apply_config(image: MetadataImage, record: Any) -> MetadataImage:
    key = (record.resource_type, record.resource_name)
    configs = dict(image.configs)
    values = dict(configs.get(key, {}))
    if record.value is None:
        values.pop(record.name, None)
    else:
        values[record.name] = record.value
    configs[key] = values
    return replace(image, configs=configs)


def _apply_feature_level(image: MetadataImage, record: Any) -> MetadataImage:
    features = dict(image.features)
    features[record.name] = record.feature_level
    return replace(image, features=features)


_APPLIERS = {
    "TopicRecord": _apply_topic,
    "PartitionRecord": _apply_partition,
    "PartitionChangeRecord": _apply_partition_change,
    "RemoveTopicRecord": _apply_remove_topic,
    "ConfigRecord": _apply_config,
    "FeatureLevelRecord": _apply_feature_level,
}
