"""Leader and ISR changes of a partition (Kafka's PartitionChangeBuilder), as pure functions.

Every path that changes a partition's leader or ISR goes through `partition_change`: a broker
fenced or shutting down, a broker unfenced, an AlterPartition from the leader, a reassignment.
The rules are Kafka's:

- the ISR never becomes empty: when the last in-sync replica goes, it stays listed (with no
  leader) so that it, and only it, can lead again when it returns;
- the leader stays if it is still in the ISR and alive; otherwise the first replica, in
  replica order, that is in the ISR and alive leads;
- with `unclean.leader.election.enable` and no such replica, the first alive replica leads with
  an ISR of itself (acknowledged writes it missed are lost, and the caller says so in the log);
- otherwise the partition has no leader (-1) until an in-sync replica returns.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import PartitionImage
from kafka_ext.protocol.messages import registry

NO_LEADER = -1
LEADER_UNCHANGED = -2  # PartitionChangeRecord's Leader when it does not change


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False  # the leader was not in the ISR


def elect(replicas: tuple[int, ...], isr: tuple[int, ...], current_leader: int,
          alive: frozenset[int] | set[int], unclean_allowed: bool) -> LeaderAndIsr:
    """The leader and ISR for a partition whose target ISR is `isr` (not yet emptied)."""
    target = tuple(r for r in isr if r in alive) or isr[-1:]
    if current_leader in target and current_leader in alive:
        return LeaderAndIsr(current_leader, target)
    in_sync = next((r for r in replicas if r in target and r in alive), None)
    if in_sync is not None:
        return LeaderAndIsr(in_sync, target)
    if unclean_allowed:
        survivor = next((r for r in replicas if r in alive), None)
        if survivor is not None:
            return LeaderAndIsr(survivor, (survivor,), unclean=True)
    return LeaderAndIsr(NO_LEADER, target)


def partition_change(topic_id: uuid.UUID, part: PartitionImage, alive: frozenset[int] | set[int],
                     unclean_allowed: bool, *, target_isr: tuple[int, ...] | None = None,
                     replicas: tuple[int, ...] | None = None
                     ) -> tuple[Any, LeaderAndIsr] | None:
    """The PartitionChangeRecord moving `part` to the leader and ISR `elect` picks for the
    alive brokers (and `target_isr` / `replicas` when given); None when nothing changes."""
    new_replicas = part.replicas if replicas is None else replicas
    isr = part.isr if target_isr is None else target_isr
    isr = tuple(r for r in isr if r in new_replicas) or isr[-1:]
    chosen = elect(new_replicas, isr, part.leader, alive, unclean_allowed)
    if (chosen.leader == part.leader and chosen.isr == part.isr
            and new_replicas == part.replicas):
        return None
    record = registry()["PartitionChangeRecord"].cls(
        topic_id=topic_id, partition_id=part.partition_id,
        leader=chosen.leader if chosen.leader != part.leader else LEADER_UNCHANGED,
        isr=list(chosen.isr) if chosen.isr != part.isr else None,
        replicas=list(new_replicas) if new_replicas != part.replicas else None)
    return record, chosen
