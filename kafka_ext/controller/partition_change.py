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

With eligible leader replicas (KIP-966, `eligible.leader.replicas.version` 1, an `ElrRule`):

- while the ISR is below the topic's min.insync.replicas, the high watermark does not move
  (replication/partition.py), so the replicas that leave the ISR then hold every committed
  record: they become the partition's eligible leader replicas (ELR), and the ISR may become
  empty. Those that were in the ISR or the ELR and are neither any more (an unclean shutdown
  took them out of the ELR) are the last known ELR;
- with no alive in-sync replica, the first alive ELR member, in replica order, leads, with an
  ISR of itself: a clean election, no acknowledged write lost;
- a broker whose last shutdown was unclean (it may have lost what it had not flushed) leaves
  every ELR when it registers again;
- an ISR back at min.insync.replicas, or an unclean election, empties both.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import PartitionImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

NO_LEADER = -1
LEADER_UNCHANGED = -2  # PartitionChangeRecord's Leader when it does not change


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False  # the leader was not in the ISR (nor the ELR)


@dataclass(frozen=True, slots=True)
class ElrRule:
    """KIP-966 in force for a partition: its topic's min.insync.replicas, and the brokers whose
    last shutdown was unclean (they leave the ELR)."""

    min_isr: int
    unclean_shutdown: frozenset[int] = frozenset()


def elect(replicas: tuple[int, ...], isr: tuple[int, ...], current_leader: int,
          alive: frozenset[int] | set[int], unclean_allowed: bool,
          elr: tuple[int, ...] | None = None) -> LeaderAndIsr:
    """The leader and ISR for a partition whose target ISR is `isr`. `elr`: its eligible
    leader replicas when KIP-966 is in force (the ISR may then become empty), else None (the
    ISR keeps its last member)."""
    target = tuple(r for r in isr if r in alive)
    if elr is None:
        target = target or isr[-1:]
    if current_leader in target and current_leader in alive:
        return LeaderAndIsr(current_leader, target)
    in_sync = next((r for r in replicas if r in target and r in alive), None)
    if in_sync is not None:
        return LeaderAndIsr(in_sync, target)
    eligible = next((r for r in replicas if r in (elr or ()) and r in alive), None)
    if eligible is not None:
        return LeaderAndIsr(eligible, (eligible,))
    if unclean_allowed:
        survivor = next((r for r in replicas if r in alive), None)
        if survivor is not None:
            return LeaderAndIsr(survivor, (survivor,), unclean=True)
    return LeaderAndIsr(NO_LEADER, target)


def partition_change(topic_id: uuid.UUID, part: PartitionImage, alive: frozenset[int] | set[int],
                     unclean_allowed: bool, *, target_isr: tuple[int, ...] | None = None,
                     replicas: tuple[int, ...] | None = None,
                     adding: tuple[int, ...] | None = None,
                     removing: tuple[int, ...] | None = None,
                     leader: int | None = None,
                     elr: ElrRule | None = None) -> tuple[Any, LeaderAndIsr] | None:
    """The PartitionChangeRecord moving `part` to the leader and ISR `elect` picks for the
    alive brokers (and `target_isr` / `replicas` / reassignment state when given; `leader`
    forces a leader the caller checked is alive and in the ISR; `elr`: KIP-966 is in force),
    and its ELR; None when nothing changes."""
    new_replicas = part.replicas if replicas is None else replicas
    new_adding = part.adding_replicas if adding is None else adding
    new_removing = part.removing_replicas if removing is None else removing
    # KIP-858: directories follow their replicas; a new replica has none yet.
    new_directories = part.directories
    if part.directories and new_replicas != part.replicas:
        new_directories = tuple(part.directory_of(r) for r in new_replicas)
    isr = part.isr if target_isr is None else target_isr
    isr = tuple(r for r in isr if r in new_replicas) or (isr[-1:] if elr is None else ())
    candidates = None if elr is None else tuple(
        r for r in part.elr if r in new_replicas and r not in elr.unclean_shutdown)
    chosen = (LeaderAndIsr(leader, isr) if leader is not None
              else elect(new_replicas, isr, part.leader, alive, unclean_allowed, candidates))
    new_elr, new_last_known = eligible_replicas(part, chosen, new_replicas, elr)
    if (chosen.leader == part.leader and chosen.isr == part.isr
            and new_replicas == part.replicas and new_adding == part.adding_replicas
            and new_removing == part.removing_replicas and new_elr == part.elr
            and new_last_known == part.last_known_elr):
        return None
    record = registry()["PartitionChangeRecord"].cls(
        topic_id=topic_id, partition_id=part.partition_id,
        leader=chosen.leader if chosen.leader != part.leader else LEADER_UNCHANGED,
        isr=list(chosen.isr) if chosen.isr != part.isr else None,
        replicas=list(new_replicas) if new_replicas != part.replicas else None,
        adding_replicas=list(new_adding) if new_adding != part.adding_replicas else None,
        removing_replicas=list(new_removing) if new_removing != part.removing_replicas else None,
        directories=list(new_directories) if new_directories != part.directories else None)
    _set_elr(record, part, new_elr, new_last_known)
    return record, chosen


def eligible_replicas(part: PartitionImage, chosen: LeaderAndIsr, replicas: tuple[int, ...],
                      elr: ElrRule | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ELR, last known ELR) of `part` once its ISR is `chosen.isr` (module docstring), in
    replica order."""
    if elr is None or chosen.unclean or len(chosen.isr) >= elr.min_isr:
        return (), ()
    were = set(part.isr) | set(part.elr)
    eligible = tuple(r for r in replicas if r in were and r not in chosen.isr
                     and r not in elr.unclean_shutdown)
    last_known = tuple(r for r in replicas if (r in were or r in part.last_known_elr)
                       and r not in chosen.isr and r not in eligible)
    return eligible, last_known


def _set_elr(record: Any, part: PartitionImage, elr: tuple[int, ...],
             last_known: tuple[int, ...]) -> None:
    """The record's ELR fields: null when unchanged."""
    record.eligible_leader_replicas = list(elr) if elr != part.elr else None
    record.last_known_elr = list(last_known) if last_known != part.last_known_elr else None


# -- reassignments (KIP-455) -----------------------------------------------------------------
#
# A reassignment to target replicas T lists the partition's replicas as T followed by the
# current replicas T drops (`removing`); `adding` are the members of T that were not replicas
# before it. The adding replicas fetch like any follower and join the ISR when they catch up;
# once every member of T is in the ISR the reassignment completes: the replicas become T, the
# removed ones leave the ISR, and a leader that was removed hands over to a member of T.


def reassign(topic_id: uuid.UUID, part: PartitionImage, target: tuple[int, ...] | None,
             alive: frozenset[int] | set[int], unclean_allowed: bool,
             elr: ElrRule | None = None) -> tuple[Any, LeaderAndIsr] | None:
    """The change starting a reassignment of `part` to `target`, or cancelling the one in
    progress (`target` None, or the replicas from before it); it completes at once when the
    ISR already holds every target. KafkaError NO_REASSIGNMENT_IN_PROGRESS or
    INVALID_REPLICA_ASSIGNMENT; the target's brokers are the caller's to check."""
    if target is None or (part.is_reassigning and target == part.original_replicas):
        if not part.is_reassigning:
            raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                             f"partition {part.partition_id} is not being reassigned")
        original = part.original_replicas
        if not any(r in original for r in part.isr):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"cancelling would leave partition {part.partition_id} with no "
                             f"in-sync replica among {list(original)}")
        return partition_change(topic_id, part, alive, unclean_allowed, replicas=original,
                                adding=(), removing=(), elr=elr)
    if not target or len(set(target)) != len(target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"partition {part.partition_id}: empty or duplicate replicas "
                         f"{list(target)}")
    if set(target) <= set(part.isr):  # nothing to copy
        return partition_change(topic_id, part, alive, unclean_allowed, replicas=target,
                                adding=(), removing=(), elr=elr)
    removing = tuple(r for r in part.replicas if r not in target)
    adding = tuple(r for r in target if r not in part.original_replicas)
    return partition_change(topic_id, part, alive, unclean_allowed,
                            replicas=target + removing, adding=adding, removing=removing,
                            elr=elr)


def isr_change(topic_id: uuid.UUID, part: PartitionImage, new_isr: tuple[int, ...],
               alive: frozenset[int] | set[int], unclean_allowed: bool,
               elr: ElrRule | None = None) -> Any | None:
    """The record setting the ISR a leader proposed (AlterPartition), and the ELR that
    follows from it; when it completes a reassignment in progress, the same record makes the
    target the replicas."""
    if part.is_reassigning and set(part.target_replicas) <= set(new_isr):
        change = partition_change(topic_id, part, alive, unclean_allowed, target_isr=new_isr,
                                  replicas=part.target_replicas, adding=(), removing=(),
                                  elr=elr)
        return change[0] if change is not None else None
    new_elr, new_last_known = eligible_replicas(part, LeaderAndIsr(part.leader, new_isr),
                                                part.replicas, elr)
    if new_isr == part.isr and new_elr == part.elr and new_last_known == part.last_known_elr:
        return None
    record = registry()["PartitionChangeRecord"].cls(
        topic_id=topic_id, partition_id=part.partition_id, leader=LEADER_UNCHANGED,
        isr=list(new_isr) if new_isr != part.isr else None)
    _set_elr(record, part, new_elr, new_last_known)
    return record


# -- leader elections (ElectLeaders) -----------------------------------------------------------

PREFERRED = 0  # ElectLeaders' ElectionType
UNCLEAN = 1


def elect_leader(topic_id: uuid.UUID, part: PartitionImage, election_type: int,
                 alive: frozenset[int] | set[int], elr: ElrRule | None = None) -> Any:
    """The record of an asked-for election: PREFERRED moves leadership to the first replica
    when it is alive and in sync; UNCLEAN gives a partition without a leader one, in sync if it
    can, else any alive replica. KafkaError ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE
    or ELIGIBLE_LEADERS_NOT_AVAILABLE otherwise."""
    if election_type == PREFERRED:
        preferred = part.replicas[0]
        if part.leader == preferred:
            raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED, "")
        if preferred not in alive or preferred not in part.isr:
            raise KafkaError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                             f"the preferred leader {preferred} is not alive and in sync "
                             f"(ISR {list(part.isr)})")
        change = partition_change(topic_id, part, alive, False, leader=preferred, elr=elr)
    else:
        if part.leader != NO_LEADER and part.leader in alive:
            raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED, "")
        change = partition_change(topic_id, part, alive, True, elr=elr)
        if change is None or change[1].leader == NO_LEADER:
            raise KafkaError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                             f"no replica of {list(part.replicas)} is alive")
    assert change is not None
    return change[0]
