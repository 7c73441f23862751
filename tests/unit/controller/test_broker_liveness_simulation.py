"""The seeded broker liveness simulation (broker_liveness_simulation.py): INVARIANTS after
every event, every broker back after healing. CI runs a fixed block of seeds; longer campaigns
run from the command line:

    .venv/bin/python -m tests.unit.controller.broker_liveness_simulation --seed 1000 --count 10000

Each failure prints the command that replays it (--verbose: every request and connection).
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.unit.controller.broker_liveness_simulation import (
    GRACE_DEFAULT_MS,
    SESSION_MS,
    TIMER_SLACK_MS,
    Simulation,
    run_seed,
)

CI_SEEDS = range(200)

# Seeds that found bugs while the fast path was written, kept for good.
REGRESSION_SEEDS = {
    13: "a reset of all a broker's connections: the loss of one to a controller of an earlier "
        "term used up its one immediate heartbeat, the current one's loss then waited for the "
        "next interval and the broker was fenced (invariant 2)",
    76: "a combined node's heartbeat to itself over a connection, sent while it did not lead, "
        "arrived once it led again; its in-process heartbeats after it did not replace that "
        "connection, whose reset then fenced it (invariant 2)",
    1308: "the heartbeat that unfenced a broker arrived, its answer was lost with the "
          "connection; the broker heartbeat again at once only after answered heartbeats, so "
          "it waited and was fenced (invariant 2)",
}


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_liveness_keeps_its_invariants_and_every_broker_comes_back(seed: int) -> None:
    run_seed(seed)


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_seeds_that_once_failed(seed: int) -> None:
    run_seed(seed)


def test_same_seed_replays_the_same_run() -> None:
    first, second = run_seed(17), run_seed(17)
    assert first.trace == second.trace and first.fenced == second.fenced


def _quiet() -> Simulation:
    """Three brokers, three controllers apart, the defaults; only the faults a test sets."""
    return Simulation(1, grace_ms=GRACE_DEFAULT_MS, brokers=3, controllers=3, combined=False)


def test_a_killed_broker_back_within_the_grace_is_fenced_by_its_connection_then_registers(
        ) -> None:
    sim = _quiet()
    broker = sim.nodes[2]
    sim.at(10_000, partial(sim.kill, broker))
    sim.at(10_000 + GRACE_DEFAULT_MS // 2, partial(sim.restart, broker))
    sim.run(fault_ms=20_000, random_faults=False)
    [(when, fenced, why)] = sim.fenced
    assert (fenced, why) == (2, "connection")
    # The close reached the controller within a delay of the kill; the grace, then the timer.
    assert when <= 10_000 + sim.max_delay_ms + GRACE_DEFAULT_MS + TIMER_SLACK_MS
    assert sim.image.brokers[2].incarnation_id == broker.incarnation_id  # the new one
    assert not sim.image.brokers[2].fenced


def test_a_live_broker_whose_connections_drop_is_never_fenced() -> None:
    sim = _quiet()
    for time_ms in (10_000, 14_000, 14_000 + GRACE_DEFAULT_MS * 3):
        sim.at(time_ms, partial(sim.reset_connections, sim.nodes[3]))
    sim.run(fault_ms=25_000, random_faults=False)
    assert sim.fenced == []


@pytest.mark.parametrize("pause_ms,fenced", [(SESSION_MS // 2, False), (SESSION_MS + 3000, True)])
def test_a_paused_broker_keeps_its_connection_and_only_its_session_can_end(
        pause_ms: int, fenced: bool) -> None:
    sim = _quiet()
    sim.at(10_000, partial(sim.pause, sim.nodes[1], pause_ms))
    sim.run(fault_ms=30_000, random_faults=False)
    assert [(b, why) for _, b, why in sim.fenced] == ([(1, "session")] if fenced else [])


def test_controller_failovers_fence_nobody() -> None:
    sim = _quiet()
    for time_ms in (10_000, 15_000, 20_000):
        sim.at(time_ms, sim.resign)
    controller = sim.nodes[100]
    sim.at(25_000, partial(sim.kill, controller))
    sim.at(27_000, partial(sim.restart, controller))
    sim.run(fault_ms=40_000, random_faults=False)
    assert sim.fenced == [] and sim.term >= 4


def test_with_the_grace_off_a_killed_broker_waits_for_its_session() -> None:
    sim = Simulation(1, grace_ms=-1, brokers=3, controllers=3, combined=False)
    sim.at(10_000, partial(sim.kill, sim.nodes[2]))
    sim.run(fault_ms=30_000, random_faults=False)
    [(when, fenced, why)] = sim.fenced
    assert (fenced, why) == (2, "session") and when > 10_000 + SESSION_MS - 2000


def test_a_killed_combined_node_that_was_the_active_controller_waits_for_a_session() -> None:
    """Its own broker heartbeat in process: the new active controller never saw a connection
    of it close, and gives it a full session from its term's start (Kafka's rule)."""
    sim = Simulation(1, grace_ms=GRACE_DEFAULT_MS, brokers=3, controllers=3, combined=True)

    def kill_the_active_controller() -> None:
        assert sim.active is not None
        sim.kill(sim.nodes[sim.active])

    sim.at(10_000, kill_the_active_controller)
    sim.run(fault_ms=30_000, random_faults=False)
    [(when, _, why)] = sim.fenced
    assert why == "session" and when > 10_000 + SESSION_MS
