"""Share groups, pure parts: the simple assignor, reconciliation, records and their replay."""

from __future__ import annotations

import uuid

from kafka_ext.coordinator.group.assignors import AssignmentMember
from kafka_ext.coordinator.group.share_group import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    InitTopic,
    ShareGroup,
    ShareGroupMember,
    SharePartitionMetadata,
    SimpleAssignor,
    current_assignment_record,
    decode_share_group_key,
    epoch_record,
    group_tombstones,
    member_metadata_record,
    metadata_hash,
    reconcile,
    replay_share_group,
    share_partitions_record,
    target_epoch_record,
    target_member_record,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _flat(assignment: dict[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def _members(*ids: str, topics: frozenset[uuid.UUID] = frozenset({T1})) -> list[AssignmentMember]:
    return [AssignmentMember(m, topics) for m in ids]


def test_members_outnumbering_partitions_share_each_partition() -> None:
    out = SimpleAssignor().assign(_members("a", "b", "c"), {T1: [0]}, {})
    assert all(a == {T1: frozenset({0})} for a in out.values())
    out = SimpleAssignor().assign(_members("a", "b", "c"), {T1: [0, 1]}, {})
    holders = {p: [m for m, a in out.items() if p in a.get(T1, ())] for p in (0, 1)}
    assert sorted(len(h) for h in holders.values()) == [2, 2]  # ceil(3 / 2) sharers each
    assert sorted(len(_flat(a)) for a in out.values()) == [1, 1, 2]


def test_partitions_outnumbering_members_are_balanced_within_one_and_all_covered() -> None:
    out = SimpleAssignor().assign(_members("a", "b", "c"), {T1: list(range(7))}, {})
    assert sorted(len(_flat(a)) for a in out.values()) == [2, 2, 3]
    held = [tp for a in out.values() for tp in _flat(a)]
    assert sorted(held) == [(T1, p) for p in range(7)]


def test_assignor_keeps_what_members_had_when_balance_allows() -> None:
    before = SimpleAssignor().assign(_members("a", "b"), {T1: list(range(6))}, {})
    after = SimpleAssignor().assign(_members("a", "b", "c"), {T1: list(range(6))}, before)
    assert [len(_flat(after[m])) for m in ("a", "b", "c")] == [2, 2, 2]
    assert _flat(after["a"]) <= _flat(before["a"]) and _flat(after["b"]) <= _flat(before["b"])


def test_only_assignable_partitions_are_assigned() -> None:
    out = SimpleAssignor().assign(_members("a"), {T1: [1, 3]}, {})
    assert out["a"] == {T1: frozenset({1, 3})}
    assert SimpleAssignor().assign(_members("a"), {T1: []}, {}) == {"a": {}}


def test_heterogeneous_subscriptions_balance_each_topic_over_its_subscribers() -> None:
    members = [AssignmentMember("a", frozenset({T1})), AssignmentMember("b", frozenset({T2})),
               AssignmentMember("c", frozenset({T1, T2}))]
    out = SimpleAssignor().assign(members, {T1: [0, 1], T2: [0, 1]}, {})
    assert T2 not in out["a"] and T1 not in out["b"]
    assert len(out["c"][T1]) == 1 and len(out["c"][T2]) == 1
    covered = {tp for a in out.values() for tp in _flat(a)}
    assert covered == {(T1, 0), (T1, 1), (T2, 0), (T2, 1)}


def test_a_member_takes_its_target_at_once_and_keeps_only_subscribed_topics() -> None:
    member = ShareGroupMember("a", member_epoch=1, previous_member_epoch=0)
    target = {T1: frozenset({0}), T2: frozenset({1})}
    moved = reconcile(member, 3, target, [T1], subscription_changed=False)
    assert (moved.member_epoch, moved.previous_member_epoch, moved.assigned) == (
        3, 1, {T1: frozenset({0})})
    assert reconcile(moved, 3, target, [T1], subscription_changed=False) is moved


def test_metadata_hash_moves_with_partition_counts() -> None:
    assert metadata_hash([(T1, "t", 1)]) == metadata_hash([(T1, "t", 1)])
    assert metadata_hash([(T1, "t", 1)]) != metadata_hash([(T1, "t", 2)])


def test_records_replay_into_the_same_group_and_tombstones_remove_it() -> None:
    member = ShareGroupMember("m1", rack_id=None, client_id="c", client_host="/h",
                              subscribed_topic_names=("t",), member_epoch=2,
                              previous_member_epoch=1, assigned={T1: frozenset({0, 1})})
    meta = SharePartitionMetadata(initialized={T1: InitTopic("t", frozenset({0, 1}))},
                                  initializing={T2: InitTopic("u", frozenset({0}))},
                                  deleting={uuid.UUID(int=3): "gone"})
    records = [member_metadata_record("g", member), epoch_record("g", 2, 42),
               target_member_record("g", "m1", {T1: frozenset({0, 1})}),
               target_epoch_record("g", 2), current_assignment_record("g", member),
               share_partitions_record("g", meta)]
    groups: dict[str, ShareGroup] = {}
    for key, value in records:
        decoded = decode_share_group_key(key)
        assert decoded is not None
        replay_share_group(groups, decoded, value, now_ms=1000)
    group = groups["g"]
    assert (group.group_epoch, group.metadata_hash, group.assignment_epoch) == (2, 42, 2)
    assert group.members["m1"] == member
    assert group.target == {"m1": {T1: frozenset({0, 1})}}
    assert group.share_partitions is not None
    assert group.share_partitions.initialized_partitions() == {T1: frozenset({0, 1})}
    assert group.share_partitions.initializing[T2] == InitTopic("u", frozenset({0}), 1000)
    assert group.share_partitions.deleting == {uuid.UUID(int=3): "gone"}
    record_key, _ = current_assignment_record("g", member)
    assert record_key[:2] == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT.to_bytes(2, "big")
    for key, tombstone in group_tombstones(group):
        decoded = decode_share_group_key(key)
        assert decoded is not None and tombstone is None
        replay_share_group(groups, decoded, tombstone, now_ms=1000)
    assert groups == {}


def test_other_record_types_are_not_share_records() -> None:
    assert decode_share_group_key((3).to_bytes(2, "big") + b"\x00\x01g") is None
