"""RaftCore: KRaft's replication protocol as a sans-IO state machine (Kafka's KafkaRaftClient
and QuorumState; KIP-595 with KIP-630 snapshots and KIP-996 pre-vote).

The core takes received messages (`handle`), clock ticks (`tick`) and finished flushes
(`flushed`), and returns effects (`take_effects`): election state to persist, flushes to run
and messages to send, which the driver must carry out in order (a vote goes out only after the
vote is on disk). Time is whatever the driver says it is, so a seeded simulation replays a run
exactly. Not thread-safe: one driver owns it.

Roles: a voter is UNATTACHED (no leader known; it may have voted), PROSPECTIVE (asking for
pre-votes, KIP-996, without bumping its epoch), CANDIDATE (asking for votes in a new epoch),
LEADER, FOLLOWER or RESIGNED (a leader that gave up its epoch). A node outside the voter set is
an observer: UNATTACHED while it looks for the leader, FOLLOWER once it fetches from it.

Safety rules enforced here: one vote per epoch, persisted before it is sent; a vote only for a
log at least as up to date; the leader's high watermark is the largest offset a majority of
voters has flushed, and only once an entry of its own epoch (the LeaderChange record) is in it;
followers truncate only where the leader says they diverge, never below their high watermark.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.raft.log import LeaderChange, RaftLog
from kafka_ext.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    RaftMessage,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)
from kafka_ext.raft.quorum_state import ElectionState


class Role(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


class RaftInvariantError(AssertionError):
    """The core was about to break a Raft safety rule: a bug, never an expected outcome."""


class NotLeaderError(Exception):
    """An append was asked of a node that does not lead the current epoch."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's `controller.quorum.*` settings, in milliseconds."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024


# -- effects -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PersistElectionState:
    """Write the quorum-state file (and fsync it) before carrying out what follows."""

    state: ElectionState


@dataclass(frozen=True, slots=True)
class Flush:
    """Make the log durable up to `end_offset`, then call `RaftCore.flushed(end_offset)`."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: RaftMessage


@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    """The log now starts at this snapshot: the state machine reloads from it."""

    snapshot_id: OffsetAndEpoch


Effect = PersistElectionState | Flush | Send | SnapshotInstalled


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one replica (DescribeQuorum's ReplicaState)."""

    key: ReplicaKey
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass(slots=True)
class _InFlight:
    request_id: int
    deadline_ms: int


@dataclass(slots=True)
class _ParkedFetch:
    source: int
    request: FetchRequest
    deadline_ms: int


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: OffsetAndEpoch
    position: int = 0


@dataclass(slots=True)
class _ElectionRound:
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    in_flight: dict[int, _InFlight] = field(default_factory=dict)


class RaftCore:
    """One replica of the quorum. Owned by a single driver; see the module docstring."""

    def __init__(self, local: ReplicaKey, voters: Iterable[ReplicaKey], log: RaftLog,
                 election: ElectionState, now_ms: int, rng: random.Random,
                 config: RaftConfig | None = None) -> None:
        self.local = local
        self.voters: dict[int, ReplicaKey] = {v.id: v for v in voters}
        self.log = log
        self.config = config or RaftConfig()
        self.rng = rng
        self.high_watermark = 0
        self.flushed_end_offset = log.log_end_offset  # what is on disk after a (re)start
        self._effects: list[Effect] = []
        self._next_request_id = 1
        self._persisted = election
        self.epoch = election.epoch
        self.leader_id = election.leader_id
        self.voted = election.voted
        self.role = Role.UNATTACHED
        self._flush_pending = False
        # timers (ms; -1: off)
        self._election_deadline = -1
        self._fetch_deadline = -1
        self._check_quorum_deadline = -1
        # per role
        self._round = _ElectionRound()
        self._fetch_in_flight: _InFlight | None = None
        self._fetch_snapshot_in_flight: _InFlight | None = None
        self._download: _SnapshotDownload | None = None
        self._bootstrap_index = 0
        self.replicas: dict[int, ReplicaState] = {}  # the leader's view of the voters
        self.observers: dict[int, ReplicaState] = {}
        self._epoch_start_offset = -1
        self._fetched_since_check: set[int] = set()
        self._begin_epoch_in_flight: dict[int, _InFlight] = {}
        self._end_epoch_in_flight: dict[int, _InFlight] = {}
        self._parked: list[_ParkedFetch] = []
        # The high watermark the leader last sent each replica: a fetch from one that has not
        # seen the current one is answered at once rather than parked (see _handle_fetch_request).
        self._high_watermark_sent: dict[int, int] = {}
        self._leader_resigned = False
        self._last_leader_contact_ms = -1
        self._transitions = 0  # bumped by every role change; stale answers check it
        self._start(now_ms)

    # -- queries -----------------------------------------------------------------------------

    @property
    def is_voter(self) -> bool:
        key = self.voters.get(self.local.id)
        return key is not None and key.matches(self.local)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    def next_deadline_ms(self) -> int:
        """When `tick` next has something to do (-1: nothing scheduled)."""
        deadlines = [d for d in (self._election_deadline, self._fetch_deadline,
                                 self._check_quorum_deadline) if d >= 0]
        deadlines += [p.deadline_ms for p in self._parked]
        for in_flight in (self._fetch_in_flight, self._fetch_snapshot_in_flight):
            if in_flight is not None:
                deadlines.append(in_flight.deadline_ms)
        for table in (self._round.in_flight, self._begin_epoch_in_flight,
                      self._end_epoch_in_flight):
            deadlines += [f.deadline_ms for f in table.values()]
        return min(deadlines, default=-1)

    # -- start-up ----------------------------------------------------------------------------

    def _start(self, now_ms: int) -> None:
        """Kafka's QuorumState.initialize: a node that led its persisted epoch resigns it (it
        cannot know what it flushed as leader was committed); one that knew a leader follows it."""
        if self.leader_id == self.local.id:
            self.role = Role.RESIGNED
            self._election_deadline = now_ms + self._random_election_timeout()
        elif self.leader_id >= 0:
            self._become_follower(self.epoch, self.leader_id, now_ms)
        else:
            self._become_unattached(self.epoch, now_ms, self.voted)
        if len(self.voters) == 1 and self.is_voter and self.role != Role.LEADER:
            self._become_candidate(now_ms)

    # -- transitions -------------------------------------------------------------------------

    def _persist(self) -> None:
        state = ElectionState(self.epoch, self.leader_id, self.voted)
        if state != self._persisted:
            if state.epoch < self._persisted.epoch:
                raise RaftInvariantError(f"epoch going back from {self._persisted.epoch} "
                                         f"to {state.epoch}")
            self._persisted = state
            self._effects.append(PersistElectionState(state))

    def _reset_role_state(self) -> None:
        self._transitions += 1
        for parked in self._parked:  # a leader's long-polls: answered, never left hanging
            self._send(parked.source, FetchResponse(
                parked.request.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER, self.epoch, -1,
                self.high_watermark, self.log.log_start_offset))
        self._election_deadline = self._fetch_deadline = self._check_quorum_deadline = -1
        self._round = _ElectionRound()
        self._fetch_in_flight = None
        self._fetch_snapshot_in_flight = None
        self._download = None
        self.replicas = {}
        self.observers = {}
        self._leader_resigned = False
        self._last_leader_contact_ms = -1  # a follower's last good answer from its leader
        self._epoch_start_offset = -1
        self._begin_epoch_in_flight = {}
        self._end_epoch_in_flight = {}
        self._parked = []
        self._high_watermark_sent = {}

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.voted = None
            self.leader_id = -1
        self.epoch = epoch

    def _become_unattached(self, epoch: int, now_ms: int, voted: ReplicaKey | None = None
                           ) -> None:
        self._reset_role_state()
        self._set_epoch(epoch)
        self.role = Role.UNATTACHED
        self.leader_id = -1
        if voted is not None:
            self.voted = voted
        self._persist()
        if self.is_voter:
            self._election_deadline = now_ms + self._random_election_timeout()
        else:
            self._fetch_deadline = now_ms  # an observer goes looking for the leader at once

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if leader_id == self.local.id:
            raise RaftInvariantError(f"told to follow itself in epoch {epoch}")
        voted = self.voted if epoch == self.epoch else None
        self._reset_role_state()
        self._set_epoch(epoch)
        self.voted = voted
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self._persist()
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._maybe_send_fetch(now_ms)

    def _become_prospective(self, now_ms: int) -> None:
        """KIP-996: ask for pre-votes at the current epoch; no one changes state for them."""
        leader_id, voted = self.leader_id, self.voted
        self._reset_role_state()
        self.role = Role.PROSPECTIVE
        self.leader_id, self.voted = leader_id, voted
        self._round.granted.add(self.local.id)
        self._election_deadline = now_ms + self._random_election_timeout()
        if len(self._round.granted) >= self.majority:
            self._become_candidate(now_ms)
            return
        self._send_vote_requests(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        self._reset_role_state()
        self._set_epoch(self.epoch + 1)
        self.role = Role.CANDIDATE
        self.voted = self.local
        self._persist()
        self._round.granted.add(self.local.id)
        self._election_deadline = now_ms + self._random_election_timeout()
        if len(self._round.granted) >= self.majority:
            self._become_leader(now_ms)
            return
        self._send_vote_requests(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self._reset_role_state()
        self.role = Role.LEADER
        self.leader_id = self.local.id
        self._persist()
        self._epoch_start_offset = self.log.log_end_offset
        self.replicas = {v: ReplicaState(key) for v, key in self.voters.items()}
        own = self.replicas[self.local.id]
        own.end_offset = self.flushed_end_offset
        own.last_fetch_ms = own.last_caught_up_ms = now_ms
        self._check_quorum_deadline = now_ms + self._check_quorum_period_ms()
        self._append(now_ms, [LeaderChange(self.local.id, self.epoch, tuple(sorted(self.voters)))])
        for voter in self.voters:
            if voter != self.local.id:
                self._send_begin_quorum_epoch(voter, now_ms)

    def _resign(self, now_ms: int) -> None:
        """Give up leadership of this epoch: tell the voters (EndQuorumEpoch), most caught-up
        first, so one of them stands at once instead of waiting for its fetch timeout."""
        successors = tuple(r.key.id for r in sorted(
            self.replicas.values(), key=lambda r: -r.end_offset) if r.key.id != self.local.id)
        self._reset_role_state()
        self.role = Role.RESIGNED
        self._election_deadline = now_ms + self._random_election_timeout()
        for voter in successors:
            request_id = self._new_request_id()
            self._end_epoch_in_flight[voter] = _InFlight(
                request_id, now_ms + self.config.request_timeout_ms)
            self._send(voter, EndQuorumEpochRequest(request_id, self.epoch, self.local.id,
                                                    successors))

    # -- public inputs -----------------------------------------------------------------------

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of the leader (controlled shutdown); no-op for other roles."""
        if self.role == Role.LEADER:
            self._resign(now_ms)

    def append(self, now_ms: int, records: list[Any]) -> int:
        """Append application records as leader; returns the offset after them. They are
        committed once the high watermark passes that offset."""
        if self.role != Role.LEADER:
            raise NotLeaderError(f"node {self.local.id} is {self.role.value} in epoch {self.epoch}")
        return self._append(now_ms, records)

    def flushed(self, end_offset: int, now_ms: int) -> None:
        """A Flush effect finished: the log is durable up to `end_offset`."""
        if end_offset > self.log.log_end_offset:
            raise RaftInvariantError(f"flushed {end_offset} beyond log end "
                                     f"{self.log.log_end_offset}")
        self.flushed_end_offset = max(self.flushed_end_offset, end_offset)
        self._flush_pending = self.flushed_end_offset < self.log.log_end_offset
        if self.role == Role.LEADER:
            self._update_replica(self.local.id, self.flushed_end_offset, now_ms)
        else:
            self._maybe_send_fetch(now_ms)

    def tick(self, now_ms: int) -> None:
        """Fire every timer that is due."""
        self._expire_requests(now_ms)
        if self.role == Role.LEADER:
            self._complete_parked(now_ms, only_expired=True)
            if 0 <= self._check_quorum_deadline <= now_ms:
                self._check_quorum(now_ms)
            return
        if self.role == Role.FOLLOWER and 0 <= self._fetch_deadline <= now_ms:
            if self.is_voter:
                self._become_prospective(now_ms)
            else:
                self._become_unattached(self.epoch, now_ms)
            return
        if self.role == Role.UNATTACHED and not self.is_voter:
            if 0 <= self._fetch_deadline <= now_ms:
                self._fetch_deadline = now_ms + self.config.request_timeout_ms
                self._discover_leader(now_ms)
            return
        if 0 <= self._election_deadline <= now_ms and self.is_voter:
            if self.role == Role.PROSPECTIVE and len(self._round.granted) >= self.majority:
                self._become_candidate(now_ms)
            else:
                self._become_prospective(now_ms)
        elif self.role == Role.RESIGNED and 0 <= self._election_deadline <= now_ms:
            self._become_unattached(self.epoch, now_ms)  # a resigned observer (voter removed)

    def handle(self, now_ms: int, source: int, message: RaftMessage) -> None:
        """A message from node `source` arrived."""
        handler = _HANDLERS[type(message)]
        handler(self, now_ms, source, message)

    # -- generic epoch handling ----------------------------------------------------------------

    def _observe_epoch(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """Adopt what a response says of a newer epoch or of this epoch's leader (Kafka's
        maybeTransition). Returns False when the message is from an older epoch."""
        if epoch < self.epoch:
            return False
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.local.id:
                self._become_follower(epoch, leader_id, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
            return True
        if (leader_id >= 0 and leader_id != self.local.id and self.role != Role.FOLLOWER
                and self.role != Role.RESIGNED):
            if self.role == Role.PROSPECTIVE and leader_id == self.leader_id:
                return True  # the leader we lost touch with: the pre-vote decides
            if self.role == Role.LEADER:
                raise RaftInvariantError(f"two leaders in epoch {epoch}: {self.local.id} "
                                         f"and {leader_id}")
            self._become_follower(epoch, leader_id, now_ms)
        return True

    # -- Vote --------------------------------------------------------------------------------

    def _send_vote_requests(self, now_ms: int, voters: Iterable[int] | None = None) -> None:
        """Ask `voters` (default: every other voter) for a pre-vote (PROSPECTIVE) or a vote."""
        pre_vote = self.role == Role.PROSPECTIVE
        last = OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.log_end_offset)
        epoch = self.epoch + 1 if pre_vote else self.epoch
        for voter_id in (self.voters if voters is None else voters):
            if voter_id == self.local.id:
                continue
            request_id = self._new_request_id()
            self._round.in_flight[voter_id] = _InFlight(
                request_id, now_ms + self.config.request_timeout_ms)
            self._send(voter_id, VoteRequest(request_id, epoch, self.local, self.voters[voter_id],
                                             last.epoch, last.offset, pre_vote))

    def _log_is_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        mine = OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.log_end_offset)
        return OffsetAndEpoch(last_epoch, last_offset) >= mine

    def _handle_vote_request(self, now_ms: int, source: int, req: VoteRequest) -> None:
        def answer(granted: bool, error: ErrorCode = ErrorCode.NONE) -> None:
            self._send(source, VoteResponse(req.request_id, error, self.epoch, self.leader_id,
                                            granted))

        voter_key = self.voters.get(req.candidate.id)
        if not self.is_voter or not req.voter.matches(self.local):
            answer(False, ErrorCode.INVALID_VOTER_KEY)
            return
        if voter_key is None or not voter_key.matches(req.candidate):
            answer(False)  # only a voter of the set may stand
            return
        if req.pre_vote:
            answer(req.candidate_epoch > self.epoch and not self._heard_from_leader(now_ms)
                   and self._log_is_up_to_date(req.last_offset_epoch, req.last_offset))
            return
        if req.candidate_epoch < self.epoch:
            answer(False)
            return
        if req.candidate_epoch > self.epoch:
            self._become_unattached(req.candidate_epoch, now_ms)
        can_vote = (self.role in (Role.UNATTACHED, Role.PROSPECTIVE) and self.leader_id < 0
                    and (self.voted is None or self.voted.matches(req.candidate)))
        if not can_vote or not self._log_is_up_to_date(req.last_offset_epoch, req.last_offset):
            answer(False)
            return
        if self.role == Role.PROSPECTIVE or self.voted is None:
            self._become_unattached(self.epoch, now_ms, voted=req.candidate)
        answer(True)

    def _heard_from_leader(self, now_ms: int) -> bool:
        """KIP-996: a voter that fetched from a live leader lately refuses pre-votes, so a
        node cut off and back cannot disturb a healthy quorum."""
        if self.role == Role.LEADER:
            return True
        return (self.role == Role.FOLLOWER and self._last_leader_contact_ms >= 0
                and now_ms - self._last_leader_contact_ms < self.config.fetch_timeout_ms
                and not self._leader_resigned)

    def _handle_vote_response(self, now_ms: int, source: int, resp: VoteResponse) -> None:
        in_flight = self._round.in_flight.get(source)
        if in_flight is None or in_flight.request_id != resp.request_id:
            return
        del self._round.in_flight[source]
        if resp.error == ErrorCode.NONE and not self._observe_epoch(resp.epoch, resp.leader_id,
                                                                    now_ms):
            return
        if self.role not in (Role.PROSPECTIVE, Role.CANDIDATE) or resp.epoch > self.epoch:
            return
        if resp.vote_granted:
            self._round.granted.add(source)
        else:
            self._round.rejected.add(source)
        if len(self._round.granted) >= self.majority:
            if self.role == Role.PROSPECTIVE:
                self._become_candidate(now_ms)
            else:
                self._become_leader(now_ms)
        elif len(self._round.rejected) >= self.majority and self.role == Role.PROSPECTIVE:
            # Lost the pre-vote: the others still hear from our leader, so fetch from it
            # again; with none known, wait out a randomised backoff before asking again.
            if self.leader_id >= 0 and self.leader_id != self.local.id:
                self._become_follower(self.epoch, self.leader_id, now_ms)
            else:
                self._election_deadline = now_ms + self.rng.randint(
                    0, self.config.election_backoff_max_ms) + self.config.election_timeout_ms // 2

    # -- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------

    def _send_begin_quorum_epoch(self, voter: int, now_ms: int) -> None:
        request_id = self._new_request_id()
        self._begin_epoch_in_flight[voter] = _InFlight(
            request_id, now_ms + self.config.request_timeout_ms)
        self._send(voter, BeginQuorumEpochRequest(request_id, self.epoch, self.local.id,
                                                  self.voters[voter]))

    def _handle_begin_quorum_epoch_request(self, now_ms: int, source: int,
                                           req: BeginQuorumEpochRequest) -> None:
        if req.epoch == self.epoch and req.leader_id != self.local.id and (
                self.role in (Role.LEADER, Role.RESIGNED)
                or (self.role == Role.FOLLOWER and self.leader_id != req.leader_id)):
            raise RaftInvariantError(f"two leaders in epoch {req.epoch}: {self.leader_id} "
                                     f"and {req.leader_id}")
        if req.epoch > self.epoch or (req.epoch == self.epoch and self.role in (
                Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)):
            self._become_follower(req.epoch, req.leader_id, now_ms)
        error = ErrorCode.FENCED_LEADER_EPOCH if req.epoch < self.epoch else ErrorCode.NONE
        self._send(source, BeginQuorumEpochResponse(req.request_id, error, self.epoch,
                                                    self.leader_id))

    def _handle_begin_quorum_epoch_response(self, now_ms: int, source: int,
                                            resp: BeginQuorumEpochResponse) -> None:
        in_flight = self._begin_epoch_in_flight.get(source)
        if in_flight is None or in_flight.request_id != resp.request_id:
            return
        del self._begin_epoch_in_flight[source]
        self._observe_epoch(resp.epoch, resp.leader_id, now_ms)

    def _handle_end_quorum_epoch_request(self, now_ms: int, source: int,
                                         req: EndQuorumEpochRequest) -> None:
        if req.epoch >= self.epoch and self.is_voter and req.leader_id != self.local.id:
            if req.epoch > self.epoch or self.role in (Role.UNATTACHED, Role.PROSPECTIVE):
                self._become_follower(req.epoch, req.leader_id, now_ms)
            if self.role == Role.FOLLOWER and self.leader_id == req.leader_id:
                # The leader is leaving: stand after a backoff that grows with our place in
                # its list of successors, so the most caught-up voter usually wins at once;
                # and grant pre-votes meanwhile, since this leader is gone (KIP-996).
                position = (req.preferred_successors.index(self.local.id)
                            if self.local.id in req.preferred_successors
                            else len(req.preferred_successors))
                backoff = min(position * 50, self.config.election_backoff_max_ms)
                self._fetch_deadline = min(self._fetch_deadline, now_ms + backoff)
                self._leader_resigned = True
        error = ErrorCode.FENCED_LEADER_EPOCH if req.epoch < self.epoch else ErrorCode.NONE
        self._send(source, EndQuorumEpochResponse(req.request_id, error, self.epoch,
                                                  self.leader_id))

    def _handle_end_quorum_epoch_response(self, now_ms: int, source: int,
                                          resp: EndQuorumEpochResponse) -> None:
        in_flight = self._end_epoch_in_flight.get(source)
        if in_flight is not None and in_flight.request_id == resp.request_id:
            del self._end_epoch_in_flight[source]

    # -- Fetch: leader side --------------------------------------------------------------------

    def _handle_fetch_request(self, now_ms: int, source: int, req: FetchRequest) -> None:
        error = self._fetch_error(req)
        if error is not None:
            self._send(source, FetchResponse(req.request_id, error, self.epoch, self.leader_id,
                                             self.high_watermark, self.log.log_start_offset))
            return
        diverging, snapshot_id = self._validate_fetch_position(req.fetch_offset,
                                                               req.last_fetched_epoch)
        if diverging is None and snapshot_id is None:
            voter = self.voters.get(req.replica.id)
            if voter is not None and voter.matches(req.replica):
                self._fetched_since_check.add(req.replica.id)
            self._update_replica(req.replica.id, req.fetch_offset, now_ms, req.replica)
            # Park only a fetch that has nothing to learn. The fetch that advances the high
            # watermark wakes the other parked fetches; its own sender would otherwise hear of
            # the new value only at the next append or after max_wait_ms, and the metadata
            # it serves would lag by that much (KAFKA-14145; KIP-1166 sends the follower's high
            # watermark instead, which the leader here infers from what it last answered).
            if (self.role == Role.LEADER and req.fetch_offset >= self.log.log_end_offset
                    and req.max_wait_ms > 0
                    and self._high_watermark_sent.get(req.replica.id, -1) >= self.high_watermark):
                self._parked.append(_ParkedFetch(source, req, now_ms + req.max_wait_ms))
                return
        self._answer_fetch(source, req, diverging, snapshot_id)

    def _fetch_error(self, req: FetchRequest) -> ErrorCode | None:
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0:
            return ErrorCode.INVALID_REQUEST
        if req.epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if req.epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.role != Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def _validate_fetch_position(self, fetch_offset: int, last_fetched_epoch: int
                                 ) -> tuple[OffsetAndEpoch | None, OffsetAndEpoch | None]:
        """(diverging epoch, snapshot id): where a follower's log leaves ours, or the snapshot
        it must load because what it needs is no longer in the log (Kafka's
        validateOffsetAndEpoch)."""
        log = self.log
        start = log.log_start_offset
        if fetch_offset < start:
            return None, self._snapshot_at_start()
        if fetch_offset == 0:
            return None, None
        end = log.end_offset_for_epoch(last_fetched_epoch)
        if end.epoch == last_fetched_epoch and end.offset >= fetch_offset:
            return None, None
        if end.offset < start or end.offset < 0:
            # The logs part before our first entry: only a snapshot can bring it over.
            return (OffsetAndEpoch(0, 0), None) if start == 0 else (None, self._snapshot_at_start())
        return end, None

    def _snapshot_at_start(self) -> OffsetAndEpoch:
        snapshot = self.log.latest_snapshot_id()
        if snapshot is None or snapshot.offset < self.log.log_start_offset:
            raise RaftInvariantError(f"log starts at {self.log.log_start_offset} without a "
                                     "snapshot covering what is before it")
        return snapshot

    def _answer_fetch(self, source: int, req: FetchRequest, diverging: OffsetAndEpoch | None,
                      snapshot_id: OffsetAndEpoch | None) -> None:
        records = None
        if diverging is None and snapshot_id is None:
            records = self.log.read(req.fetch_offset, self.config.fetch_max_bytes) or None
        self._high_watermark_sent[req.replica.id] = self.high_watermark
        self._send(source, FetchResponse(
            req.request_id, ErrorCode.NONE, self.epoch, self.leader_id, self.high_watermark,
            self.log.log_start_offset, records, diverging, snapshot_id))

    def _complete_parked(self, now_ms: int, only_expired: bool) -> None:
        if not self._parked:
            return
        keep = []
        for parked in self._parked:
            if only_expired and parked.deadline_ms > now_ms:
                keep.append(parked)
            else:
                self._answer_fetch(parked.source, parked.request, None, None)
        self._parked = keep

    def _update_replica(self, replica_id: int, end_offset: int, now_ms: int,
                        key: ReplicaKey | None = None) -> None:
        """Record a replica's position and advance the high watermark. Only a voter whose
        directory matches the voter set's counts; a node that lost its disk comes back with a
        new directory and is an observer until the quorum is changed (KIP-853)."""
        if self.role != Role.LEADER:
            return
        state = self.replicas.get(replica_id)
        if state is None or (key is not None and not state.key.matches(key)):
            state = self.observers.setdefault(replica_id, ReplicaState(key or ReplicaKey(replica_id)))
            if key is not None:
                state.key = key
        state.end_offset = end_offset
        state.last_fetch_ms = now_ms
        if end_offset >= self.log.log_end_offset:
            state.last_caught_up_ms = now_ms
        self._advance_high_watermark(now_ms)

    def _advance_high_watermark(self, now_ms: int) -> None:
        ends = sorted((self.replicas[v].end_offset for v in self.voters), reverse=True)
        majority_end = ends[self.majority - 1]
        if majority_end > self._epoch_start_offset and majority_end > self.high_watermark:
            self.high_watermark = majority_end
            self._complete_parked(now_ms, only_expired=False)

    def _check_quorum(self, now_ms: int) -> None:
        """A leader that has not heard from a majority of voters for 1.5 fetch timeouts
        resigns (KIP-996's check quorum): it may be the cut-off side of a partition."""
        heard = len(self._fetched_since_check | {self.local.id})
        if heard >= self.majority:
            self._fetched_since_check = set()
            self._check_quorum_deadline = now_ms + self._check_quorum_period_ms()
        else:
            self._resign(now_ms)

    def _check_quorum_period_ms(self) -> int:
        return self.config.fetch_timeout_ms * 3 // 2

    # -- Fetch: follower side ------------------------------------------------------------------

    def _maybe_send_fetch(self, now_ms: int) -> None:
        """A follower (or observer) keeps one fetch in flight, sent only once what it last
        appended is flushed: the fetch offset tells the leader what is durable here."""
        if (self.role != Role.FOLLOWER or self._fetch_in_flight is not None
                or self._fetch_snapshot_in_flight is not None or self._flush_pending):
            return
        if self._download is not None:
            self._send_fetch_snapshot(now_ms)
            return
        request_id = self._new_request_id()
        self._fetch_in_flight = _InFlight(request_id, now_ms + self.config.request_timeout_ms)
        self._send(self.leader_id, FetchRequest(
            request_id, self.epoch, self.local, self.log.log_end_offset,
            self.log.last_fetched_epoch(), self.config.fetch_max_wait_ms))

    def _discover_leader(self, now_ms: int) -> None:
        """An observer without a leader asks the voters in turn; any of them answers with the
        leader it knows (NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carry the hint)."""
        voters = sorted(v for v in self.voters if v != self.local.id)
        if not voters:
            return
        target = voters[self._bootstrap_index % len(voters)]
        self._bootstrap_index += 1
        request_id = self._new_request_id()
        self._fetch_in_flight = _InFlight(request_id, now_ms + self.config.request_timeout_ms)
        self._send(target, FetchRequest(request_id, self.epoch, self.local,
                                        self.log.log_end_offset, self.log.last_fetched_epoch(),
                                        0))

    def _handle_fetch_response(self, now_ms: int, source: int, resp: FetchResponse) -> None:
        in_flight = self._fetch_in_flight
        if in_flight is None or in_flight.request_id != resp.request_id:
            return
        self._fetch_in_flight = None
        transitions = self._transitions
        if not self._observe_epoch(resp.epoch, resp.leader_id, now_ms):
            self._maybe_send_fetch(now_ms)
            return
        if (transitions != self._transitions or self.role != Role.FOLLOWER
                or source != self.leader_id):
            return  # it told us of a new epoch or leader (a discovery answer): fetch anew
        if resp.error != ErrorCode.NONE:
            return  # e.g. our leader resigned: the fetch timeout takes us on
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._last_leader_contact_ms = now_ms
        if resp.diverging_epoch is not None:
            self._truncate_diverging(resp.diverging_epoch)
        elif resp.snapshot_id is not None:
            self._download = _SnapshotDownload(resp.snapshot_id)
        elif resp.records:
            end = self.log.append_as_follower(resp.records)
            self._flush_pending = True
            self._effects.append(Flush(end))
        self._update_follower_high_watermark(resp.high_watermark, resp.diverging_epoch is None
                                             and resp.snapshot_id is None)
        self._maybe_send_fetch(now_ms)

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        ours = self.log.end_offset_for_epoch(diverging.epoch)
        offset = min(diverging.offset, ours.offset if ours.offset >= 0 else 0,
                     self.log.log_end_offset)
        if offset < self.high_watermark:
            raise RaftInvariantError(f"node {self.local.id} told to truncate to {offset}, below "
                                     f"its high watermark {self.high_watermark}")
        self.log.truncate_to(offset)
        self.flushed_end_offset = min(self.flushed_end_offset, offset)
        self._flush_pending = False

    def _update_follower_high_watermark(self, leader_high_watermark: int, validated: bool
                                        ) -> None:
        """After a fetch that matched the leader's log, our whole log is its prefix, so the
        leader's high watermark holds for it up to our log end; it never goes back."""
        if not validated:
            return
        high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark

    # -- FetchSnapshot -----------------------------------------------------------------------

    def _send_fetch_snapshot(self, now_ms: int) -> None:
        download = self._download
        assert download is not None
        request_id = self._new_request_id()
        self._fetch_snapshot_in_flight = _InFlight(request_id,
                                                   now_ms + self.config.request_timeout_ms)
        self._send(self.leader_id, FetchSnapshotRequest(request_id, self.epoch, self.local,
                                                        download.snapshot_id, download.position))

    def _handle_fetch_snapshot_request(self, now_ms: int, source: int,
                                       req: FetchSnapshotRequest) -> None:
        def answer(error: ErrorCode, size: int = 0, data: bytes = b"") -> None:
            self._send(source, FetchSnapshotResponse(req.request_id, error, self.epoch,
                                                     self.leader_id, req.snapshot_id, size,
                                                     req.position, data))

        if req.epoch < self.epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH)
        elif req.epoch > self.epoch:
            answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
        elif self.role != Role.LEADER:
            answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        else:
            found = self.log.read_snapshot(req.snapshot_id, req.position,
                                           self.config.snapshot_chunk_bytes)
            if found is None:
                answer(ErrorCode.SNAPSHOT_NOT_FOUND)
            elif req.position > found[0]:
                answer(ErrorCode.POSITION_OUT_OF_RANGE)
            else:
                self._fetched_since_check.add(req.replica.id)
                answer(ErrorCode.NONE, found[0], found[1])

    def _handle_fetch_snapshot_response(self, now_ms: int, source: int,
                                        resp: FetchSnapshotResponse) -> None:
        in_flight = self._fetch_snapshot_in_flight
        if in_flight is None or in_flight.request_id != resp.request_id:
            return
        self._fetch_snapshot_in_flight = None
        transitions = self._transitions
        if not self._observe_epoch(resp.epoch, resp.leader_id, now_ms):
            self._maybe_send_fetch(now_ms)
            return
        download = self._download
        if (transitions != self._transitions or self.role != Role.FOLLOWER or download is None
                or source != self.leader_id):
            return
        if resp.error != ErrorCode.NONE or resp.snapshot_id != download.snapshot_id:
            self._download = None  # gone (a newer snapshot replaced it): fetch again
            self._maybe_send_fetch(now_ms)
            return
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._last_leader_contact_ms = now_ms
        self.log.write_snapshot_chunk(download.snapshot_id, resp.position, resp.data)
        download.position = resp.position + len(resp.data)
        if download.position >= resp.size:
            snapshot_id = download.snapshot_id
            if snapshot_id.offset < self.high_watermark:
                raise RaftInvariantError(f"snapshot {snapshot_id} behind the high watermark "
                                         f"{self.high_watermark}")
            self.log.install_snapshot(snapshot_id)
            self.flushed_end_offset = snapshot_id.offset
            self._flush_pending = False
            self.high_watermark = snapshot_id.offset  # a snapshot holds only committed data
            self._download = None
            self._effects.append(SnapshotInstalled(snapshot_id))
        self._maybe_send_fetch(now_ms)

    # -- helpers -----------------------------------------------------------------------------

    def _append(self, now_ms: int, records: list[Any]) -> int:
        end = self.log.append_as_leader(records, self.epoch)
        self._flush_pending = True
        self._effects.append(Flush(end))
        self._complete_parked(now_ms, only_expired=False)
        return end

    def _expire_requests(self, now_ms: int) -> None:
        """Requests without an answer in request.timeout.ms are sent again (messages get lost)."""
        if self._fetch_in_flight is not None and self._fetch_in_flight.deadline_ms <= now_ms:
            self._fetch_in_flight = None
            self._maybe_send_fetch(now_ms)
        if (self._fetch_snapshot_in_flight is not None
                and self._fetch_snapshot_in_flight.deadline_ms <= now_ms):
            self._fetch_snapshot_in_flight = None
            self._maybe_send_fetch(now_ms)
        if self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            expired = [v for v, f in self._round.in_flight.items() if f.deadline_ms <= now_ms]
            if expired:
                for voter in expired:
                    del self._round.in_flight[voter]
                self._send_vote_requests(now_ms, [v for v in expired if v not in
                                                  self._round.granted | self._round.rejected])
        if self.role == Role.LEADER:
            for voter in [v for v, f in self._begin_epoch_in_flight.items()
                          if f.deadline_ms <= now_ms]:
                if self.replicas[voter].last_fetch_ms < 0:  # not following us yet
                    self._send_begin_quorum_epoch(voter, now_ms)
                else:
                    del self._begin_epoch_in_flight[voter]
        for voter in [v for v, f in self._end_epoch_in_flight.items() if f.deadline_ms <= now_ms]:
            del self._end_epoch_in_flight[voter]

    def _random_election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(timeout)

    def _new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def _send(self, destination: int, message: RaftMessage) -> None:
        self._effects.append(Send(destination, message))


_HANDLERS: dict[type, Callable[[RaftCore, int, int, Any], None]] = {
    VoteRequest: RaftCore._handle_vote_request,
    VoteResponse: RaftCore._handle_vote_response,
    BeginQuorumEpochRequest: RaftCore._handle_begin_quorum_epoch_request,
    BeginQuorumEpochResponse: RaftCore._handle_begin_quorum_epoch_response,
    EndQuorumEpochRequest: RaftCore._handle_end_quorum_epoch_request,
    EndQuorumEpochResponse: RaftCore._handle_end_quorum_epoch_response,
    FetchRequest: RaftCore._handle_fetch_request,
    FetchResponse: RaftCore._handle_fetch_response,
    FetchSnapshotRequest: RaftCore._handle_fetch_snapshot_request,
    FetchSnapshotResponse: RaftCore._handle_fetch_snapshot_response,
}
