"""Replication throttles: which replicas a topic's throttle lists name, and the byte budget."""

from __future__ import annotations

import uuid

from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from kafka_ext.protocol.messages import registry
from kafka_ext.replication.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    UNLIMITED,
    ReplicationQuota,
    dynamic_broker_rate,
    throttled_partitions,
)
from kafka_ext.server.config import throttled_replica_list


def _image(configs: dict[tuple[int, str], dict[str, str]]) -> MetadataImage:
    image = MetadataImage()
    for name in ("orders", "events"):
        topic_id = uuid.uuid4()
        image = image.apply(image.offset + 1, "TopicRecord",
                            _record("TopicRecord", name=name, topic_id=topic_id))
        for p in range(3):
            image = image.apply(image.offset + 1, "PartitionRecord", _record(
                "PartitionRecord", partition_id=p, topic_id=topic_id, replicas=[p + 1, p + 2],
                isr=[p + 1, p + 2], leader=p + 1, leader_epoch=0, partition_epoch=0))
    for (rtype, rname), values in configs.items():
        for key, value in values.items():
            image = image.apply(image.offset + 1, "ConfigRecord", _record(
                "ConfigRecord", resource_type=rtype, resource_name=rname, name=key, value=value))
    return image


def _record(record_type: str, /, **fields: object) -> object:
    return registry()[record_type].cls(**fields)


def test_listed_pairs_and_star_name_the_throttled_replicas_of_a_broker() -> None:
    image = _image({(TOPIC_RESOURCE, "orders"): {LEADER_REPLICAS: "0:1,1:2,2:2"},
                    (TOPIC_RESOURCE, "events"): {LEADER_REPLICAS: "*",
                                                 FOLLOWER_REPLICAS: "1:3"}})
    assert throttled_partitions(image, LEADER_REPLICAS, 2) == {
        ("orders", 1), ("orders", 2), ("events", 0), ("events", 1)}  # * = replicas on 2
    assert throttled_partitions(image, FOLLOWER_REPLICAS, 3) == {("events", 1)}
    assert throttled_partitions(image, FOLLOWER_REPLICAS, 1) == frozenset()


def test_the_rate_is_the_brokers_own_then_the_cluster_default_then_static() -> None:
    assert dynamic_broker_rate(_image({}), 1, LEADER_RATE, 7) == 7
    image = _image({(BROKER_RESOURCE, ""): {LEADER_RATE: "100"},
                    (BROKER_RESOURCE, "2"): {LEADER_RATE: "200"}})
    assert dynamic_broker_rate(image, 1, LEADER_RATE) == 100
    assert dynamic_broker_rate(image, 2, LEADER_RATE) == 200


def test_the_budget_goes_into_debt_and_recovers_at_the_rate() -> None:
    now = [0.0]
    quota = ReplicationQuota(lambda: 1000, clock=lambda: now[0])
    assert not quota.exceeded()
    quota.record(1500)  # more than was available: in debt
    assert quota.exceeded() and quota.seconds_until_allowed() == 1.5
    now[0] = 1.0
    assert quota.exceeded()
    now[0] = 1.6
    assert not quota.exceeded()
    now[0] = 100.0  # idle time buys one second's worth, no more
    quota.record(1001)
    assert quota.exceeded()


def test_an_unlimited_rate_never_throttles() -> None:
    quota = ReplicationQuota(lambda: UNLIMITED)
    quota.record(1 << 40)
    assert not quota.enabled and not quota.exceeded()


def test_the_topic_config_accepts_pairs_or_star_only() -> None:
    assert throttled_replica_list(("0:1", "2:3")) is None
    assert throttled_replica_list(("*",)) is None
    assert throttled_replica_list(("0-1",)) is not None
    assert throttled_replica_list(("a:1",)) is not None
