"""KIP-951 leader hints: where a partition moved, told in the answer that refuses it.

A Produce (v10+) or Fetch (v16+) partition answered NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carries CurrentLeader (the leader's id and epoch in this broker's metadata
image), and the response carries NodeEndpoints for those leaders on the listener the request came
in on, so a client goes straight to the new leader instead of asking for Metadata first. Older
versions do not have the fields; the codec leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafka_ext.protocol.errors import ErrorCode

# (image, topic, partition) -> (leader, leader epoch), None for an unknown partition.
LeaderOf = Callable[[Any, str, int], "tuple[int, int] | None"]

HINTED_ERRORS = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                           int(ErrorCode.FENCED_LEADER_EPOCH)})


def add_leader_hints(ctx: Any, answers: Iterable[tuple[str, Any]], endpoint_cls: Any,
                     leader_of: LeaderOf | None = None) -> list[Any]:
    """Fill CurrentLeader on every (topic, partition answer) refused for leadership whose
    partition has a live leader (`leader_of` says who leads what, when not the partition
    leaders of the image); returns the NodeEndpoints of those leaders, on the listener the
    request came in on."""
    broker = ctx.broker
    image = broker.controller.image
    leaders: set[int] = set()
    for topic_name, answer in answers:
        if answer.error_code not in HINTED_ERRORS:
            continue
        partition_id = getattr(answer, "index", None)
        if partition_id is None:
            partition_id = answer.partition_index
        found = (leader_of or _partition_leader)(image, topic_name, partition_id)
        if found is None or found[0] < 0:
            continue
        answer.current_leader.leader_id, answer.current_leader.leader_epoch = found
        leaders.add(found[0])
    if not leaders:
        return []
    return [endpoint_cls(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in broker.live_nodes(ctx.listener_name) if n.node_id in leaders]


def _partition_leader(image: Any, topic: str, partition: int) -> tuple[int, int] | None:
    known = image.topics_by_name.get(topic)
    part = known.partitions.get(partition) if known is not None else None
    return None if part is None else (part.leader, part.leader_epoch)
