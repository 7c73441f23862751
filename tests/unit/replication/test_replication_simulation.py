"""The seeded replication simulation (simulation.py): INVARIANTS after every event, convergence
after healing. CI runs fixed blocks of seeds; longer campaigns run from the command line:

    .venv/bin/python -m tests.unit.replication.simulation --seed 1000 --count 10000

Each failure prints the command that replays it (--verbose: every fetch, ISR change and ack).
"""

from __future__ import annotations

import functools
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from .simulation import InvariantViolation, Simulation, run_seed

CI_SEEDS = range(300)
UNIFIED_LOG_SEEDS = range(20)  # the real storage.log.UnifiedLog, in a temporary directory
UNCLEAN_SEEDS = range(40)
ELR_SEEDS = range(200)  # eligible.leader.replicas.version=1 (KIP-966)

# ELR seeds that found bugs (fixed), kept for good.
ELR_REGRESSION_SEEDS = {
    431: "E1: with the high watermark frozen below min.insync.replicas, a follower that reached "
         "it joined the ISR, was shrunk out at once, and again: the ISR flapped, retried writes "
         "piled up, and the replicas never converged (invariant 5)",
    228: "E1: the same flapping with five replicas and machine crashes (invariant 5)",
}

# Seeds that found bugs B1-B5 (fixed): each broke an invariant, and is kept for good.
REGRESSION_SEEDS = {
    0: "B1: a follower's diverging fetch counted as its end offset (invariant 6)",
    20: "B2: an AlterPartition answer settled a newer pending proposal (invariant 7)",
    1: "B3: a retried proposal went out with the partition's current epochs (invariant 8)",
    103: "B4: the epoch a leader started at its end survived truncate_to (invariant 9)",
    14: "B1: broker 1, a deposed leader with a diverged tail, fetched at 98 (last epoch 0); leader "
        "3 took 98 as its end and proposed it for the ISR, answered DivergingEpoch (0, 82), and "
        "broker 1 entered the ISR holding 82 of the 88 committed offsets (invariant 1)",
    24: "B1: leader 4 took broker 1's diverging fetch at 53 as its end; broker 1 entered the ISR "
        "with w7.0 at offset 11, where w157.0 was committed (invariant 1)",
    388: "B2: the answer to ISR [1, 2] came after [1, 2, 3] was proposed and cleared it; the high "
         "watermark passed broker 3 (235, it had 233), which the controller then put in the "
         "ISR (invariant 1)",
    229: "B4: broker 3 at 25, its last epoch one the new leader never had, was answered "
         "DivergingEpoch (0, 25) forever and never rejoined the ISR (invariant 5)",
    506: "B4: the same livelock with two replicas, broker 1 at 41 (invariant 5)",
    1599: "B5: the answer to ISR [1, 3, 4, 2], committed, was lost; the retry was refused "
          "INVALID_UPDATE_VERSION and cleared it; the high watermark passed broker 2, in the "
          "controller's ISR (invariant 1)",
}


def check_seed(seed: int, **options: Any) -> Simulation:
    return run_seed(seed, **options)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_replication_keeps_its_invariants_and_converges(seed: int) -> None:
    check_seed(seed)


@pytest.mark.parametrize("seed", UNIFIED_LOG_SEEDS)
def test_on_the_real_unified_log(seed: int, tmp_path: Path) -> None:
    check_seed(seed, log_dir=tmp_path)


@pytest.mark.parametrize("seed", [2, 6, 14])
def test_the_in_memory_log_runs_as_the_unified_log(seed: int, tmp_path: Path) -> None:
    """MemoryLog stands in for UnifiedLog in most runs: a seed runs the same on both, every
    fetch, truncation, ISR change and acknowledgement of the verbose trace included."""
    runs = []
    for log_dir in (None, tmp_path):
        sim = Simulation(seed, log_dir=log_dir, verbose=True)
        try:
            sim.run()
            outcome = "converged"
        except InvariantViolation as exc:
            outcome = str(exc)
        runs.append((sim.trace, sim.committed, sim.acked, outcome))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_seeds_that_once_failed(seed: int) -> None:
    check_seed(seed)


def test_same_seed_replays_the_same_run() -> None:
    runs = []
    for _ in range(2):
        sim = Simulation(17, verbose=True)
        sim.run()
        runs.append((sim.trace, sim.committed, sim.acked))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("replicas", [2, 3, 4, 5])
def test_every_replica_count_commits_what_the_producer_writes(replicas: int) -> None:
    sim = check_seed(5000 + replicas, replicas=replicas)
    assert sim.acked and sim.acked_after_heal
    # Acknowledged records were appended in order, each at its own offset.
    offsets = [offset for offset, _ in sim.acked]
    assert len(set(offsets)) == len(offsets)


def test_every_replica_losing_its_unflushed_tail_is_counted_not_failed() -> None:
    """A power cut takes every replica at once, nothing fsynced since the start: acknowledged
    writes are on no disk any more. Kafka keeps one only while an in-sync replica holds it (the
    'last replica standing' of KIP-966), so the run counts what is lost instead of failing
    invariant 1, and the replicas must still converge."""
    sim = Simulation(7, replicas=3)
    for broker in sim.brokers.values():
        broker.flush_max_ms = 10**9  # the OS writes nothing back in time
        sim.at(3000, partial(sim.kill, broker, True))
        sim.at(3500, partial(sim.restart, broker))
    sim.run(random_faults=False)
    assert sim.beyond_budget_at is not None and sim.lost_acks > 0


@functools.cache
def _without_crashes(seed: int, unclean: bool) -> Simulation:
    return run_seed(seed, unclean=unclean, machine_crashes=False)


@pytest.mark.parametrize("seed", UNCLEAN_SEEDS)
def test_unclean_election_keeps_epochs_and_converges(seed: int) -> None:
    """Unclean election may lose acknowledged writes (invariant 1 is not asked of it), but
    leader epochs (3), high watermarks within an epoch (2), elections that keep an ISR (4) and
    convergence (5) still hold."""
    check_seed(seed, unclean=True)


def test_only_unclean_election_loses_acknowledged_writes() -> None:
    """Without machine crashes, the same seeds: clean election loses nothing (a strict run fails
    if it does), unclean election loses acknowledged writes."""
    clean_runs = [_without_crashes(seed, unclean=False) for seed in UNCLEAN_SEEDS]
    unclean_runs = [_without_crashes(seed, unclean=True) for seed in UNCLEAN_SEEDS]
    assert all(sim.lost_acks == 0 and sim.unclean_elections == 0 for sim in clean_runs)
    assert sum(sim.unclean_elections for sim in unclean_runs) > 0
    assert sum(sim.lost_acks for sim in unclean_runs) > 0


@pytest.mark.parametrize("seed", ELR_SEEDS)
def test_with_eligible_leader_replicas(seed: int) -> None:
    check_seed(seed, elr=True)


@pytest.mark.parametrize("seed", sorted(ELR_REGRESSION_SEEDS))
def test_elr_seeds_that_once_failed(seed: int) -> None:
    check_seed(seed, elr=True)
