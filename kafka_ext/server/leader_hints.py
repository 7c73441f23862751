"""KIP-951 leader hints: where a partition moved, told in the answer that refuses it.

A Produce (v10+) or Fetch (v16+) partition answered NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carries CurrentLeader (the leader's id and epoch in this broker's metadata
image), and the response carries NodeEndpoints for those leaders on the listener the request came
in on, so a client goes straight to the new leader instead of asking for Metadata first. Older
versions do not have the fields; the codec leaves them out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka_ext.protocol.errors import ErrorCode

HINTED_ERRORS = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                           int(ErrorCode.FENCED_LEADER_EPOCH)})


def add_leader_hints(ctx: Any, answers: Iterable[tuple[str, Any]],
                     endpoint_cls: Any) -> list[Any]:
    """Fill CurrentLeader on every (topic, partition answer) refused for leadership whose
    partition has a live leader; returns the NodeEndpoints of those leaders, on the listener
    the request came in on."""
    broker = ctx.broker
    image = broker.controller.image
    leaders: set[int] = set()
    for topic_name, answer in answers:
        if answer.error_code not in HINTED_ERRORS:
            continue
        topic = image.topics_by_name.get(topic_name)
        partition_id = getattr(answer, "index", None)
        if partition_id is None:
            partition_id = answer.partition_index
        part = topic.partitions.get(partition_id) if topic is not None else None
        if part is None or part.leader < 0:
            continue
        answer.current_leader.leader_id = part.leader
        answer.current_leader.leader_epoch = part.leader_epoch
        leaders.add(part.leader)
    if not leaders:
        return []
    return [endpoint_cls(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in broker.live_nodes(ctx.listener_name) if n.node_id in leaders]
