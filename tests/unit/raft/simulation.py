"""A deterministic simulation of a KRaft quorum (modelled on Kafka's RaftEventSimulationTest).

One seed decides everything: how many voters (1-5) and observers (0-3), message delays, losses
and reordering, network partitions, kills that lose unflushed writes, graceful stops of the
leader, a voter that loses its whole disk, and when clients append. The scheduler runs every
node's RaftCore against an in-memory network and in-memory disks and checks Kafka's Raft
invariants after every event. Then every fault is healed and the quorum must make progress.

Replay one seed:  .venv/bin/python -m tests.unit.raft.simulation --seed N
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.raft.core import (
    Flush,
    PersistElectionState,
    RaftConfig,
    RaftCore,
    Role,
    Send,
    SnapshotInstalled,
)
from kafka_ext.raft.log import LeaderChange
from kafka_ext.raft.messages import OffsetAndEpoch, RaftMessage, ReplicaKey
from kafka_ext.raft.quorum_state import ElectionState

CONFIG = RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300,
                    request_timeout_ms=400, fetch_max_wait_ms=150, fetch_max_bytes=50,
                    snapshot_chunk_bytes=512)


SNAPSHOT_RETENTION_MS = 3000


class InvariantViolation(AssertionError):
    pass


@dataclass(slots=True)
class Entry:
    offset: int
    epoch: int
    payload: str


class SimLog:
    """An in-memory RaftLog with a disk model: entries past `durable_end` are lost on a kill.
    `fetch_max_bytes` counts entries here, so fetches carry a few entries at a time."""

    def __init__(self) -> None:
        self.start = 0
        self.entries: list[Entry] = []
        self.durable_end = 0
        self.start_epoch = 0  # the epoch of the entry before `start` (from the snapshot)
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}
        self.snapshot_times_ms: dict[OffsetAndEpoch, int] = {}
        self.partial: dict[OffsetAndEpoch, bytearray] = {}

    # RaftLog
    @property
    def log_start_offset(self) -> int:
        return self.start

    @property
    def log_end_offset(self) -> int:
        return self.start + len(self.entries)

    def last_fetched_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else self.start_epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        # Walk back to the last entry whose epoch is <= epoch; its end is the next offset.
        for entry in reversed(self.entries):
            if entry.epoch <= epoch:
                return OffsetAndEpoch(entry.epoch, entry.offset + 1)
        if self.start > 0 and self.start_epoch <= epoch:
            return OffsetAndEpoch(self.start_epoch, self.start)
        return OffsetAndEpoch(-1, -1)

    def append_as_leader(self, records: list[Any], epoch: int) -> int:
        for record in records:
            payload = (f"LC:{record.epoch}:{record.leader_id}" if isinstance(record, LeaderChange)
                       else str(record))
            self.entries.append(Entry(self.log_end_offset, epoch, payload))
        return self.log_end_offset

    def append_as_follower(self, records: Any) -> int:
        if records[0].offset != self.log_end_offset:
            raise InvariantViolation(f"follower append at {records[0].offset}, log end "
                                     f"{self.log_end_offset}")
        if records[0].epoch < self.last_fetched_epoch():
            raise InvariantViolation("appended epochs go back")
        self.entries.extend(Entry(e.offset, e.epoch, e.payload) for e in records)
        return self.log_end_offset

    def read(self, offset: int, max_bytes: int) -> Any:
        first = offset - self.start
        return tuple(self.entries[first:first + max_bytes]) if first >= 0 else ()

    def truncate_to(self, offset: int) -> None:
        del self.entries[max(offset - self.start, 0):]
        self.durable_end = min(self.durable_end, offset)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self.snapshots, key=lambda s: s.offset, default=None)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        data = self.snapshots.get(snapshot_id)
        if data is None:
            return None
        return len(data), data[position:position + max_bytes]

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int,
                             data: bytes) -> None:
        if position == 0:
            self.partial[snapshot_id] = bytearray()  # a download that starts over
        buf = self.partial.setdefault(snapshot_id, bytearray())
        if position != len(buf):
            raise InvariantViolation(f"snapshot chunk at {position}, have {len(buf)}")
        buf += data

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshots = {snapshot_id: bytes(self.partial.pop(snapshot_id))}
        self.partial.clear()
        self.entries = []
        self.start = self.durable_end = snapshot_id.offset
        self.start_epoch = snapshot_id.epoch

    # the simulated disk and the state machine's snapshots
    def entry(self, offset: int) -> Entry | None:
        index = offset - self.start
        return self.entries[index] if 0 <= index < len(self.entries) else None

    def crash(self) -> None:
        """kill -9: what was not flushed is gone."""
        self.truncate_to(self.durable_end)
        self.partial.clear()

    def create_snapshot(self, offset: int, payloads: list[str], now_ms: int = 0) -> None:
        entry = self.entry(offset - 1)
        epoch = entry.epoch if entry is not None else self.start_epoch
        snapshot_id = OffsetAndEpoch(epoch, offset)
        self.snapshots[snapshot_id] = json.dumps(payloads).encode()
        self.snapshot_times_ms[snapshot_id] = now_ms

    def delete_before_latest_snapshot(self, now_ms: int = 0) -> None:
        snapshot = self.latest_snapshot_id()
        if snapshot is None or snapshot.offset <= self.start:
            return
        if snapshot.offset > self.durable_end:
            return  # Kafka deletes only what a durable snapshot and log cover
        del self.entries[:snapshot.offset - self.start]
        self.start, self.start_epoch = snapshot.offset, snapshot.epoch
        # Older snapshots are kept for a retention time (Kafka's metadata.max.retention.ms),
        # so a follower still downloading one can finish.
        self.snapshots = {s: data for s, data in self.snapshots.items() if s == snapshot
                          or now_ms - self.snapshot_times_ms.get(s, 0) < SNAPSHOT_RETENTION_MS}


@dataclass(slots=True)
class Node:
    key: ReplicaKey
    log: SimLog
    election: ElectionState = field(default_factory=ElectionState)
    core: RaftCore | None = None
    incarnation: int = 0
    applied: list[str] = field(default_factory=list)  # the state machine: committed payloads
    applied_offset: int = 0
    checked_offset: int = 0
    last_high_watermark: int = 0
    snapshot_every: int = 20
    flush_max_ms: int = 15  # this node's disk: a flush takes 0 to this many ms


class Simulation:
    def __init__(self, seed: int, voters: int | None = None, observers: int | None = None
                 ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.voter_count = voters if voters is not None else rng.randint(1, 5)
        self.observer_count = observers if observers is not None else rng.randint(0, 3)
        self.now = 0
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.drop_rate = rng.choice([0.0, 0.01, 0.05, 0.15])
        self.max_delay_ms = rng.choice([5, 20, 60])
        self.blocked: set[tuple[int, int]] = set()
        self.nodes: dict[int, Node] = {}
        voter_keys = [ReplicaKey(i, uuid.UUID(int=rng.getrandbits(128)))
                      for i in range(1, self.voter_count + 1)]
        self.voter_keys = voter_keys
        for key in voter_keys:
            self.nodes[key.id] = Node(key, SimLog(), snapshot_every=rng.randint(5, 40))
        for i in range(self.observer_count):
            key = ReplicaKey(100 + i, uuid.UUID(int=rng.getrandbits(128)))
            self.nodes[key.id] = Node(key, SimLog(), snapshot_every=rng.randint(5, 40))
        self.majority = self.voter_count // 2 + 1
        # history for the invariants
        self.committed: list[str] = []
        self.leaders: dict[int, int] = {}
        self.epochs_seen: dict[ReplicaKey, int] = {}
        self.disk_losses_left = self.voter_count - self.majority
        self.lost_voters: set[int] = set()
        self.appends = 0
        self.trace: list[str] = []
        for node in self.nodes.values():
            node.flush_max_ms = rng.choice([2, 15, 100, 400])
            self._start_node(node)

    # -- scheduling ----------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time_ms, self._seq, action))

    def alive(self, node: Node) -> bool:
        return node.core is not None

    def _start_node(self, node: Node) -> None:
        node.incarnation += 1
        node.core = RaftCore(node.key, self.voter_keys, node.log, node.election, self.now,
                             random.Random(self.rng.getrandbits(64)), CONFIG)
        node.last_high_watermark = 0
        node.checked_offset = node.log.start
        # The state machine reloads: the latest snapshot, then the log as it is committed.
        snapshot = node.log.latest_snapshot_id()
        if snapshot is not None and snapshot.offset >= node.log.start:
            node.applied = json.loads(node.log.snapshots[snapshot])
            node.applied_offset = snapshot.offset
        else:
            node.applied, node.applied_offset = [], node.log.start
        self._after(node)

    def _wake(self, node: Node, incarnation: int) -> None:
        if node.core is None or node.incarnation != incarnation:
            return
        node.core.tick(self.now)
        self._after(node)

    def _after(self, node: Node) -> None:
        """Carry out the core's effects in order, schedule its next tick, check invariants."""
        core = node.core
        assert core is not None
        for effect in core.take_effects():
            if isinstance(effect, PersistElectionState):
                node.election = effect.state
            elif isinstance(effect, Send):
                self._send(node.key.id, effect.destination, effect.message)
            elif isinstance(effect, Flush):
                incarnation = node.incarnation
                delay = self.rng.randint(0, node.flush_max_ms)
                self.at(self.now + delay, lambda n=node, i=incarnation, e=effect.end_offset:
                        self._flushed(n, i, e))
            elif isinstance(effect, SnapshotInstalled):
                snapshot = node.log.snapshots[effect.snapshot_id]
                node.applied = json.loads(snapshot)
                node.applied_offset = effect.snapshot_id.offset
                node.checked_offset = max(node.checked_offset, node.applied_offset)
                self._check_prefix(node, node.applied, 0)
        deadline = core.next_deadline_ms()
        if deadline >= 0:
            incarnation = node.incarnation
            self.at(max(deadline, self.now), lambda n=node, i=incarnation: self._wake(n, i))
        self._apply_committed(node)
        self._check(node)

    def _flushed(self, node: Node, incarnation: int, end_offset: int) -> None:
        if node.core is None or node.incarnation != incarnation:
            return
        end_offset = min(end_offset, node.log.log_end_offset)
        node.log.durable_end = max(node.log.durable_end, end_offset)
        node.core.flushed(end_offset, self.now)
        self._after(node)

    def _send(self, source: int, destination: int, message: RaftMessage) -> None:
        if (source, destination) in self.blocked or self.rng.random() < self.drop_rate:
            return
        delay = self.rng.randint(1, self.max_delay_ms)
        self.at(self.now + delay, lambda: self._deliver(source, destination, message))

    def _deliver(self, source: int, destination: int, message: RaftMessage) -> None:
        node = self.nodes.get(destination)
        if node is None or node.core is None or (source, destination) in self.blocked:
            return
        node.core.handle(self.now, source, message)
        self._after(node)

    # -- the state machine ---------------------------------------------------------------

    def _apply_committed(self, node: Node) -> None:
        core = node.core
        assert core is not None
        end = min(core.high_watermark, node.log.log_end_offset)
        if end <= node.applied_offset:
            return
        for offset in range(node.applied_offset, end):
            entry = node.log.entry(offset)
            if entry is None:
                raise InvariantViolation(f"node {node.key.id} has no entry {offset} to apply "
                                         f"(log {node.log.start}-{node.log.log_end_offset})")
            node.applied.append(entry.payload)
        node.applied_offset = end
        if end - (node.log.latest_snapshot_id() or OffsetAndEpoch(0, 0)).offset >= \
                node.snapshot_every:
            node.log.create_snapshot(end, list(node.applied), self.now)
            node.log.delete_before_latest_snapshot(self.now)

    # -- invariants ----------------------------------------------------------------------

    def _check(self, node: Node) -> None:
        core = node.core
        assert core is not None
        # Epochs never go back for a replica (its identity includes its directory).
        if core.epoch < self.epochs_seen.get(node.key, 0):
            raise InvariantViolation(f"node {node.key.id} epoch went back to {core.epoch}")
        self.epochs_seen[node.key] = core.epoch
        # At most one leader per epoch, ever.
        if core.role == Role.LEADER:
            leader = self.leaders.setdefault(core.epoch, node.key.id)
            if leader != node.key.id:
                raise InvariantViolation(f"two leaders in epoch {core.epoch}: {leader} and "
                                         f"{node.key.id}")
        # The high watermark never goes back while the process lives.
        if core.high_watermark < node.last_high_watermark:
            raise InvariantViolation(f"node {node.key.id} high watermark went back from "
                                     f"{node.last_high_watermark} to {core.high_watermark}")
        node.last_high_watermark = core.high_watermark
        # Committed entries are the same everywhere, and what is committed stays committed.
        self._check_log_prefix(node)
        self._check_prefix(node, node.applied, 0)
        self._check_majority_holds_committed()

    def _check_log_prefix(self, node: Node) -> None:
        core = node.core
        assert core is not None
        end = min(core.high_watermark, node.log.log_end_offset)
        for offset in range(max(node.checked_offset, node.log.start), end):
            entry = node.log.entry(offset)
            assert entry is not None
            if offset < len(self.committed):
                if self.committed[offset] != entry.payload:
                    raise InvariantViolation(
                        f"node {node.key.id} committed {entry.payload!r} at {offset}, others "
                        f"committed {self.committed[offset]!r}")
            elif offset == len(self.committed):
                self.committed.append(entry.payload)
            else:
                raise InvariantViolation(f"node {node.key.id} committed {offset} past a gap")
        node.checked_offset = max(node.checked_offset, end)

    def _check_prefix(self, node: Node, payloads: list[str], first: int) -> None:
        known = self.committed[first:first + len(payloads)]
        if payloads[:len(known)] != known:
            raise InvariantViolation(f"node {node.key.id} state machine diverges from what "
                                     "was committed")
        if len(payloads) > len(known):
            if first + len(known) != len(self.committed):
                raise InvariantViolation("state machine past a gap")
            self.committed.extend(payloads[len(known):])

    def _holds(self, node: Node, offset: int) -> bool:
        """Whether the node's disk durably holds committed entry `offset` (so every one before
        it too, by the log matching property), in its log or in a snapshot."""
        log = node.log
        snapshot = log.latest_snapshot_id()
        if snapshot is not None and snapshot.offset > offset:
            return True
        entry = log.entry(offset)
        return (entry is not None and offset < log.durable_end
                and entry.payload == self.committed[offset])

    def _check_majority_holds_committed(self) -> None:
        """Every quorum that can still form holds the last committed entry durably: of the
        voters that kept their disks, fewer than a majority lack it. (Without lost disks this
        is: a majority holds it.)"""
        if not self.committed:
            return
        last = len(self.committed) - 1
        eligible = [k for k in self.voter_keys if k.id not in self.lost_voters]
        lacking = sum(1 for key in eligible if not self._holds(self.nodes[key.id], last))
        if lacking >= self.majority:
            raise InvariantViolation(f"committed offset {last} is missing on {lacking} of the "
                                     f"{len(eligible)} voters that can still vote: a quorum "
                                     "without it can form")

    # -- faults --------------------------------------------------------------------------

    def kill(self, node: Node) -> None:
        if node.core is None:
            return
        self.trace.append(f"{self.now} kill {node.key.id}")
        node.core = None
        node.log.crash()

    def lose_disk(self, node: Node) -> None:
        """The voter's disk is replaced: it comes back with a new directory id and an empty
        log, so it is an observer until the voter set changes (KIP-853)."""
        self.kill(node)
        self.trace.append(f"{self.now} disk lost {node.key.id}")
        self.lost_voters.add(node.key.id)
        node.key = ReplicaKey(node.key.id, uuid.UUID(int=self.rng.getrandbits(128)))
        node.log = SimLog()
        node.election = ElectionState()
        node.applied, node.applied_offset = [], 0

    def restart(self, node: Node) -> None:
        if node.core is None:
            self.trace.append(f"{self.now} restart {node.key.id}")
            self._start_node(node)

    def graceful_stop(self, node: Node) -> None:
        core = node.core
        if core is None:
            return
        self.trace.append(f"{self.now} stop {node.key.id}")
        core.resign(self.now)
        self._after(node)
        self.at(self.now + 100, lambda: self.kill(node))

    def partition(self, group: set[int]) -> None:
        self.trace.append(f"{self.now} partition {sorted(group)}")
        for a in self.nodes:
            for b in self.nodes:
                if (a in group) != (b in group):
                    self.blocked.add((a, b))

    def heal(self) -> None:
        self.trace.append(f"{self.now} heal")
        self.blocked.clear()

    def client_append(self) -> None:
        for node in self.nodes.values():
            if node.core is not None and node.core.role == Role.LEADER:
                self.appends += 1
                node.core.append(self.now, [f"v{self.appends}"])
                self._after(node)
                return

    def _schedule_faults(self, until_ms: int) -> None:
        rng = self.rng
        time_ms = 0
        ids = sorted(self.nodes)
        gap_ms = rng.choice([300, 800, 1500])
        while True:
            time_ms += rng.randint(gap_ms // 4, gap_ms)
            if time_ms >= until_ms:
                break
            node = self.nodes[rng.choice(ids)]
            kind = rng.random()
            if kind < 0.15:
                self.at(time_ms, lambda n=node: self.kill(n))
                self.at(time_ms + rng.randint(50, 2000), lambda n=node: self.restart(n))
            elif kind < 0.3:  # kill -9 and straight back: loses only what was not flushed
                self.at(time_ms, lambda n=node: self.kill(n))
                self.at(time_ms + rng.randint(0, 60), lambda n=node: self.restart(n))
            elif kind < 0.45:
                self.at(time_ms, self._stop_leader)
            elif kind < 0.75:
                group = set(rng.sample(ids, rng.randint(1, max(1, len(ids) - 1))))
                self.at(time_ms, lambda g=group: self.partition(g))
                self.at(time_ms + rng.randint(100, 2500), self.heal)
            elif kind < 0.8 and node.key.id < 100 and self.disk_losses_left > 0:
                self.disk_losses_left -= 1
                self.at(time_ms, lambda n=node: self.lose_disk(n))
                self.at(time_ms + rng.randint(50, 1500), lambda n=node: self.restart(n))
            else:
                self.at(time_ms, lambda n=node: self.kill(n))
                self.at(time_ms + rng.randint(1000, 3000), lambda n=node: self.restart(n))

    def _stop_leader(self) -> None:
        for node in self.nodes.values():
            if node.core is not None and node.core.role == Role.LEADER:
                self.graceful_stop(node)
                self.at(self.now + self.rng.randint(200, 1500), lambda n=node: self.restart(n))
                return

    # -- the run ---------------------------------------------------------------------------

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        while self.events and self.events[0][0] <= end_ms:
            time_ms, _, action = heapq.heappop(self.events)
            self.now = max(self.now, time_ms)
            action()
            if stop is not None and stop():
                return
        self.now = max(self.now, end_ms)

    def run(self, fault_ms: int = 6000, heal_ms: int = 15000) -> None:
        """Faults for `fault_ms`, then everything healed: the quorum must elect a leader and
        commit a new entry on every node within `heal_ms`."""
        interval = self.rng.choice([30, 80, 200])
        for time_ms in range(interval, fault_ms + heal_ms, interval):
            self.at(time_ms, self.client_append)
        self._schedule_faults(fault_ms)
        self.run_until(fault_ms)
        self.heal()
        for node in self.nodes.values():
            self.restart(node)
        target = len(self.committed) + 2

        def progressed() -> bool:
            return all(n.core is not None and n.applied_offset >= target
                       for n in self.nodes.values())

        self.run_until(fault_ms + heal_ms, progressed)
        if not progressed():
            states = {n.key.id: (n.core.role.value if n.core else "down", n.core.epoch
                                 if n.core else -1, n.applied_offset) for n in self.nodes.values()}
            raise InvariantViolation(f"no progress {heal_ms} ms after healing: committed "
                                     f"{len(self.committed)}, wanted {target}; nodes {states}")

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.voter_count} voters, {self.observer_count} observers, "
                f"drop {self.drop_rate}, delay <= {self.max_delay_ms} ms")


def run_seed(seed: int) -> Simulation:
    """Run one seed; an invariant violation names the command that replays it."""
    sim = Simulation(seed)
    try:
        sim.run()
    except AssertionError as exc:
        raise InvariantViolation(
            f"{sim.describe()}: {exc}\n  at {sim.now} ms after: {sim.trace[-6:]}\n"
            f"  replay: .venv/bin/python -m tests.unit.raft.simulation --seed {seed}") from exc
    return sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1, help="run seeds seed..seed+count-1")
    args = parser.parse_args()
    for seed in range(args.seed, args.seed + args.count):
        sim = run_seed(seed)
        print(f"{sim.describe()}: ok, committed {len(sim.committed)}, "
              f"leaders in {len(sim.leaders)} epochs")


if __name__ == "__main__":
    main()
