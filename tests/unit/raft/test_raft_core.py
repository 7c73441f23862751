"""RaftCore, one rule at a time: the cases the simulation reaches only by luck."""

from __future__ import annotations

import random

import pytest

from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.raft.core import (
    Flush,
    NotLeaderError,
    PersistElectionState,
    RaftConfig,
    RaftCore,
    RaftInvariantError,
    Role,
    Send,
)
from kafka_ext.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)
from kafka_ext.raft.quorum_state import ElectionState
from tests.unit.raft.simulation import Entry, SimLog

CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, request_timeout_ms=150,
                    fetch_max_wait_ms=50)
VOTERS = [ReplicaKey(1), ReplicaKey(2), ReplicaKey(3)]


def make_core(node_id: int = 1, log: SimLog | None = None,
              election: ElectionState | None = None, voters: list[ReplicaKey] = VOTERS,
              now_ms: int = 0) -> RaftCore:
    return RaftCore(ReplicaKey(node_id), voters, log or SimLog(), election or ElectionState(),
                    now_ms, random.Random(1), CONFIG)


def log_of(*epochs: int) -> SimLog:
    log = SimLog()
    for offset, epoch in enumerate(epochs):
        log.entries.append(Entry(offset, epoch, f"e{offset}@{epoch}"))
    log.durable_end = len(epochs)
    return log


def sends(core: RaftCore) -> list[Send]:
    return [e for e in core.take_effects() if isinstance(e, Send)]


def flush_all(core: RaftCore, now_ms: int) -> None:
    for effect in core.take_effects():
        if isinstance(effect, Flush):
            core.flushed(effect.end_offset, now_ms)


def make_leader(log: SimLog | None = None) -> RaftCore:
    """Node 1 leading epoch 1 of three voters, its LeaderChange record flushed."""
    core = make_core(1, log)
    core.tick(1000)
    prevotes = sends(core)
    for send in prevotes:
        core.handle(1000, send.destination, VoteResponse(send.message.request_id, ErrorCode.NONE,
                                                         0, -1, True))
    votes = sends(core)
    core.handle(1000, 2, VoteResponse(votes[0].message.request_id, ErrorCode.NONE, 1, -1, True))
    assert core.role == Role.LEADER and core.epoch == 1
    flush_all(core, 1000)
    return core


def test_single_voter_leads_and_commits_once_flushed() -> None:
    core = make_core(1, voters=[ReplicaKey(1)])
    assert core.role == Role.LEADER and core.epoch == 1
    end = core.append(0, ["a"])
    assert core.high_watermark == 0  # not durable yet
    flush_all(core, 0)
    assert core.high_watermark == end == 2  # the LeaderChange record and "a"


def test_vote_is_persisted_before_the_answer_goes_out() -> None:
    core = make_core(2)
    core.handle(0, 1, VoteRequest(7, 1, ReplicaKey(1), ReplicaKey(2), 0, 0))
    effects = core.take_effects()
    answer = next(i for i, e in enumerate(effects) if isinstance(e, Send))
    persist = max(i for i, e in enumerate(effects) if isinstance(e, PersistElectionState))
    assert persist < answer
    assert effects[persist].state == ElectionState(1, -1, ReplicaKey(1))
    assert effects[answer].message.vote_granted


def test_restarted_voter_does_not_vote_twice_in_one_epoch() -> None:
    core = make_core(2)
    core.handle(0, 1, VoteRequest(7, 1, ReplicaKey(1), ReplicaKey(2), 0, 0))
    persisted = [e.state for e in core.take_effects() if isinstance(e, PersistElectionState)][-1]
    restarted = make_core(2, election=persisted)
    restarted.handle(10, 3, VoteRequest(8, 1, ReplicaKey(3), ReplicaKey(2), 0, 0))
    assert not sends(restarted)[0].message.vote_granted


def test_vote_refused_to_a_candidate_whose_log_is_behind() -> None:
    core = make_core(2, log_of(1, 1, 2))
    core.handle(0, 1, VoteRequest(7, 3, ReplicaKey(1), ReplicaKey(2), 2, 2))  # shorter
    assert not sends(core)[0].message.vote_granted
    core.handle(0, 3, VoteRequest(8, 3, ReplicaKey(3), ReplicaKey(2), 1, 9))  # older epoch
    assert not sends(core)[0].message.vote_granted
    core.handle(0, 3, VoteRequest(9, 3, ReplicaKey(3), ReplicaKey(2), 2, 3))
    assert sends(core)[0].message.vote_granted


def test_pre_vote_changes_nothing_and_is_refused_while_the_leader_is_heard() -> None:
    core = make_core(2, election=ElectionState(4, 1, None))  # follower of 1 in epoch 4
    fetch = sends(core)[0].message
    core.handle(10, 1, FetchResponse(fetch.request_id, ErrorCode.NONE, 4, 1, 0))
    core.take_effects()
    core.handle(20, 3, VoteRequest(5, 5, ReplicaKey(3), ReplicaKey(2), 0, 0, pre_vote=True))
    assert not sends(core)[0].message.vote_granted
    assert (core.epoch, core.role, core.leader_id) == (4, Role.FOLLOWER, 1)
    # Once the leader has been silent for a fetch timeout the same pre-vote is granted.
    core.handle(300, 3, VoteRequest(6, 5, ReplicaKey(3), ReplicaKey(2), 0, 0, pre_vote=True))
    granted = [s.message for s in sends(core) if isinstance(s.message, VoteResponse)]
    assert granted[0].vote_granted and core.epoch == 4


def test_voter_with_another_directory_is_not_a_voter() -> None:
    """KIP-853: a node back with an empty new disk must not vote under its old identity."""
    voters = [ReplicaKey(1, _uuid(1)), ReplicaKey(2, _uuid(2)), ReplicaKey(3, _uuid(3))]
    core = RaftCore(ReplicaKey(2, _uuid(99)), voters, SimLog(), ElectionState(), 0,
                    random.Random(1), CONFIG)
    assert not core.is_voter
    core.handle(0, 1, VoteRequest(7, 1, voters[0], voters[1], 0, 0))
    answer = sends(core)[0].message
    assert not answer.vote_granted and answer.error == ErrorCode.INVALID_VOTER_KEY
    core.tick(10_000)
    assert core.role != Role.CANDIDATE


def test_high_watermark_waits_for_an_entry_of_the_leaders_own_epoch() -> None:
    """Raft's figure 8: a majority holding older-epoch entries does not commit them."""
    leader = make_leader(log_of(0, 0, 0))  # epoch 0 entries 0-2; LeaderChange at 3
    leader.handle(1000, 2, FetchRequest(1, 1, ReplicaKey(2), 3, 0, 0))
    assert leader.high_watermark == 0
    leader.handle(1001, 2, FetchRequest(2, 1, ReplicaKey(2), 4, 1, 0))
    assert leader.high_watermark == 4


def test_the_fetch_that_advances_the_high_watermark_is_answered_at_once() -> None:
    """A follower's fetch at the log end is parked only when the follower already knows the
    high watermark; the fetch that moves it gets it back at once (not after max_wait_ms), and so
    does any replica not yet told. Metadata on followers is not max_wait_ms late."""
    leader = make_leader()  # the LeaderChange record at offset 0, epoch 1
    leader.take_effects()
    leader.handle(1000, 3, FetchRequest(1, 1, ReplicaKey(3), 1, 1, 50))
    assert leader.high_watermark == 1  # leader and node 3: a majority
    [answer] = sends(leader)
    assert answer.destination == 3 and answer.message.high_watermark == 1
    leader.handle(1001, 3, FetchRequest(2, 1, ReplicaKey(3), 1, 1, 50))
    assert sends(leader) == []  # node 3 has nothing to learn: parked
    leader.handle(1002, 2, FetchRequest(3, 1, ReplicaKey(2), 1, 1, 50))
    [answer] = sends(leader)  # node 2 was never told high watermark 1
    assert answer.destination == 2 and answer.message.high_watermark == 1
    leader.handle(1003, 2, FetchRequest(4, 1, ReplicaKey(2), 1, 1, 50))
    assert sends(leader) == []


def test_leader_answers_a_diverging_follower_with_the_epoch_end() -> None:
    leader = make_leader(log_of(0, 0))  # LeaderChange of epoch 1 at offset 2
    leader.take_effects()
    # The follower holds offsets 0-3 from an epoch-0 leader that never reached us.
    leader.handle(1000, 2, FetchRequest(9, 1, ReplicaKey(2), 4, 0, 0))
    answer = sends(leader)[0].message
    assert answer.diverging_epoch == OffsetAndEpoch(0, 2) and answer.records is None


def test_follower_truncates_where_the_leader_says_then_fetches_again() -> None:
    follower = make_core(2, log_of(0, 0, 0, 0), ElectionState(1, 1, None))
    fetch = sends(follower)[0].message
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (4, 0)
    follower.handle(10, 1, FetchResponse(fetch.request_id, ErrorCode.NONE, 1, 1, 0, 0, None,
                                         OffsetAndEpoch(0, 2)))
    assert follower.log.log_end_offset == 2
    again = sends(follower)[0].message
    assert (again.fetch_offset, again.last_fetched_epoch) == (2, 0)


def test_follower_refuses_to_truncate_below_its_high_watermark() -> None:
    follower = make_core(2, log_of(0, 0, 0, 0), ElectionState(1, 1, None))
    fetch = sends(follower)[0].message
    follower.handle(10, 1, FetchResponse(fetch.request_id, ErrorCode.NONE, 1, 1, 3))
    assert follower.high_watermark == 3
    fetch = sends(follower)[0].message
    with pytest.raises(RaftInvariantError):
        follower.handle(20, 1, FetchResponse(fetch.request_id, ErrorCode.NONE, 1, 1, 3, 0, None,
                                             OffsetAndEpoch(0, 1)))


def test_fetch_below_the_log_start_is_sent_to_the_snapshot() -> None:
    log = log_of(0, 0, 0, 0)
    log.create_snapshot(3, ["e0@0", "e1@0", "e2@0"])
    log.delete_before_latest_snapshot()
    leader = make_leader(log)
    leader.take_effects()
    leader.handle(1000, 2, FetchRequest(3, 1, ReplicaKey(2), 1, 0, 0))
    answer = sends(leader)[0].message
    assert answer.snapshot_id == OffsetAndEpoch(0, 3) and answer.records is None


def test_stale_answers_are_dropped() -> None:
    follower = make_core(2, election=ElectionState(1, 1, None))
    fetch = sends(follower)[0].message
    late = FetchResponse(fetch.request_id + 100, ErrorCode.NONE, 1, 1, 0, 0,
                         (Entry(0, 1, "x"),))
    follower.handle(10, 1, late)
    assert follower.log.log_end_offset == 0


def test_leader_without_a_majority_resigns_after_the_check_quorum_period() -> None:
    leader = make_leader()
    leader.tick(1000 + CONFIG.fetch_timeout_ms * 3 // 2 - 1)
    assert leader.role == Role.LEADER
    leader.tick(1000 + CONFIG.fetch_timeout_ms * 3 // 2)
    assert leader.role == Role.RESIGNED
    with pytest.raises(NotLeaderError):
        leader.append(2000, ["late"])


def test_a_leader_restarted_from_its_quorum_state_resigns() -> None:
    core = make_core(1, election=ElectionState(3, 1, ReplicaKey(1)))
    assert core.role == Role.RESIGNED and core.epoch == 3


def test_second_leader_in_an_epoch_is_a_bug_not_a_state() -> None:
    leader = make_leader()
    with pytest.raises(RaftInvariantError):
        leader.handle(1000, 3, BeginQuorumEpochRequest(5, 1, 3, ReplicaKey(1)))


def test_observer_finds_the_leader_through_any_voter() -> None:
    observer = make_core(100)
    observer.tick(0)
    ask = sends(observer)[0]
    assert isinstance(ask.message, FetchRequest) and ask.destination in (1, 2, 3)
    observer.handle(5, ask.destination, FetchResponse(ask.message.request_id,
                                                      ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3))
    assert (observer.role, observer.leader_id, observer.epoch) == (Role.FOLLOWER, 3, 2)
    assert sends(observer)[0].destination == 3


def test_quorum_state_file_round_trips_and_rejects_garbage() -> None:
    state = ElectionState(7, -1, ReplicaKey(3, _uuid(5)))
    assert ElectionState.decode(state.encode()) == state
    assert ElectionState.decode(ElectionState(2, 1).encode()) == ElectionState(2, 1)
    for bad in (b"", b"{", b'{"leaderEpoch": -4}', b'{"leaderId": 1}', b"[]"):
        with pytest.raises(ValueError):
            ElectionState.decode(bad)


def _uuid(n: int):  # noqa: ANN202 - a test helper
    import uuid
    return uuid.UUID(int=n)
