"""Replication throttles (Kafka's ReplicationQuotaManager, KIP-73): a reassignment's copying
may be held to a byte rate so that it does not crowd out clients.

Each broker has two budgets, changed at run time with IncrementalAlterConfigs on its broker
resource: `leader.replication.throttled.rate` for what it sends as leader and
`follower.replication.throttled.rate` for what it fetches as follower. They apply only to the
replicas a topic lists in `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas` ("partition:broker" pairs, or "*"), and only while
that replica is out of sync: a replica in the ISR is never slowed, or acks=all would be.
Over budget, the leader answers a throttled replica's fetch without data and the follower
leaves throttled partitions out of its next fetches until the budget has recovered.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNLIMITED = (1 << 63) - 1
BURST_S = 1.0  # idle time buys at most this long's worth of bytes
TopicPartition = tuple[str, int]


def throttled_partitions(image: MetadataImage, config: str, broker_id: int
                         ) -> frozenset[TopicPartition]:
    """The partitions whose replica on `broker_id` the topic config `config` throttles."""
    found: set[TopicPartition] = set()
    for (resource_type, name), configs in image.configs.items():
        listed = configs.get(config) if resource_type == TOPIC_RESOURCE else None
        topic = image.topics_by_name.get(name) if listed else None
        if topic is None or listed is None:
            continue
        if listed.strip() == "*":
            found.update((name, p) for p, part in topic.partitions.items()
                         if broker_id in part.replicas)
            continue
        for item in listed.split(","):
            partition, _, broker = item.strip().partition(":")
            if broker.strip() == str(broker_id) and partition.strip().isdigit():
                found.add((name, int(partition)))
    return frozenset(found)


def dynamic_broker_rate(image: MetadataImage, broker_id: int, config: str,
                        static: int = UNLIMITED) -> int:
    """A dynamic broker config in bytes/s: this broker's own value, else the cluster default
    (broker resource ""), else the static one."""
    for name in (str(broker_id), ""):
        value = image.configs.get((BROKER_RESOURCE, name), {}).get(config)
        if value:
            return int(value)
    return static


class ReplicationQuota:
    """One byte budget (a token bucket that may go into debt); event loop only."""

    __slots__ = ("rate", "clock", "_tokens", "_last_s")

    def __init__(self, rate: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self._tokens = 0.0
        self._last_s = clock()

    def _refill(self) -> int:
        rate = max(self.rate(), 1)
        now = self.clock()
        self._tokens = min(self._tokens + (now - self._last_s) * rate, rate * BURST_S)
        self._last_s = now
        return rate

    @property
    def enabled(self) -> bool:
        return self.rate() < UNLIMITED

    def exceeded(self) -> bool:
        """Whether throttled replicas must wait: the budget is in debt."""
        if not self.enabled:
            return False
        self._refill()
        return self._tokens < 0

    def seconds_until_allowed(self) -> float:
        rate = self._refill()
        return max(-self._tokens / rate, 0.0)

    def record(self, nbytes: int) -> None:
        if nbytes and self.enabled:
            self._refill()
            self._tokens -= nbytes
