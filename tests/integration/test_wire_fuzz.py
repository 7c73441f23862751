"""The seeded wire fuzzer (tests/wire_fuzz/) against a real broker process.

Mutations of requests recorded from kafka-python, confluent-kafka and aiokafka
(tests/data/wire_corpus/, tools/record_wire_corpus.py) go to the broker one connection each,
while a confluent-kafka producer and consumer exchange numbered records on their own
connections. After every mutant the broker must have answered (correlation id matching, a
response that decodes for that API and version) or closed that connection, within a deadline
(long-polling requests excepted), without a traceback in its log; it must stay up, its RSS
under RSS_BOUND_BYTES, and the bystander must read back exactly what it sent, in order.

The slice here is bounded (SLICE_ITERATIONS of SLICE_SEED); long runs are
`python -m tests.wire_fuzz --seed N --iterations M`. Every failure a run ever found is a file
in tests/data/wire_fuzz_regressions/, replayed by the last test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess, serve_for_module
from tests.integration.test_bad_input import SteadyTraffic
from tests.wire_fuzz.campaign import REGRESSIONS_DIR, BrokerWatch, run, traceback_blocks
from tests.wire_fuzz.corpus import load_corpus
from tests.wire_fuzz.judge import judge
from tests.wire_fuzz.target import BROKER_OVERRIDES, create_corpus_topics, served_ranges

SLICE_SEED = 20261202
# About 20 s of fuzzing on a slow 2-core machine (300-400 mutants a second).
SLICE_ITERATIONS = 6000
WORKERS = 4
# The broker starts near 85 MiB. Decompression is bounded per batch (128 MiB inflated), and
# the slice sends decompression bombs on up to WORKERS connections at once.
RSS_BOUND_BYTES = 640 * 2**20


def _watch(broker: BrokerProcess) -> BrokerWatch:
    proc = broker.proc
    assert proc is not None
    return BrokerWatch(proc.pid, broker.log_path, lambda: proc.poll() is None)


@pytest.fixture
def fuzz_broker(broker_factory: Any) -> BrokerProcess:
    broker: BrokerProcess = broker_factory(BROKER_OVERRIDES)
    create_corpus_topics(broker.bootstrap)
    return broker


def test_seeded_slice_of_mutated_client_requests_is_answered_or_closed(
        fuzz_broker: BrokerProcess) -> None:
    traffic = SteadyTraffic(fuzz_broker)
    try:
        traffic.wait_for_progress()
        ranges = served_ranges("127.0.0.1", fuzz_broker.port)
        report = asyncio.run(run(load_corpus(), SLICE_SEED, range(SLICE_ITERATIONS),
                                 "127.0.0.1", fuzz_broker.port, ranges, _watch(fuzz_broker),
                                 WORKERS, RSS_BOUND_BYTES))
        assert report.findings == [], report.summary()
        assert report.broker_alive
        assert report.iterations == SLICE_ITERATIONS
        assert report.outcomes["answered"] > 0 and report.outcomes["closed"] > 0
        assert report.peak_rss_bytes < RSS_BOUND_BYTES, report.summary()
        traffic.wait_for_progress()
    except BaseException:
        traffic.close()
        raise
    traffic.finish()


def test_every_recorded_client_request_is_answered_unmutated(
        fuzz_broker: BrokerProcess) -> None:
    ranges = served_ranges("127.0.0.1", fuzz_broker.port)

    async def replay() -> dict[str, str]:
        outcomes = {}
        for seed in load_corpus():
            verdict = await judge(seed.frame, "127.0.0.1", fuzz_broker.port, ranges)
            outcomes[seed.name] = verdict.failure or verdict.outcome
        return outcomes

    outcomes = asyncio.run(replay())
    assert len(outcomes) >= 100
    unexpected = {name: o for name, o in outcomes.items()
                  if o not in ("answered", "long-poll", "silent")}
    assert unexpected == {}


# -- regressions ---------------------------------------------------------------------------------


def _regressions() -> list[Path]:
    return sorted(REGRESSIONS_DIR.glob("*.bin"))


@pytest.fixture(scope="module")
def regression_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("wire-fuzz") / "data", BROKER_OVERRIDES)
    for b in serve_for_module(broker):
        create_corpus_topics(b.bootstrap)
        yield b


@pytest.mark.parametrize("path", _regressions(), ids=lambda p: p.stem)
def test_fuzz_regression_is_answered_or_closed(regression_broker: BrokerProcess,
                                               path: Path) -> None:
    """Replays one finding's bytes (`concurrency` in its note: that many connections at once,
    `rounds` times, for races); the contract is the slice's."""
    note = json.loads(path.with_suffix(".json").read_text())
    concurrency, rounds = note.get("concurrency", 1), note.get("rounds", 1)
    watch = _watch(regression_broker)
    ranges = served_ranges("127.0.0.1", regression_broker.port)
    data = path.read_bytes()

    async def replay() -> list[str]:
        failures = []
        for _ in range(rounds):
            verdicts = await asyncio.gather(*(
                judge(data, "127.0.0.1", regression_broker.port, ranges)
                for _ in range(concurrency)))
            failures += [v.failure for v in verdicts if v.failure is not None]
        return failures

    assert asyncio.run(replay()) == [], note["mutations"]
    assert watch.alive(), regression_broker.log()[-3000:]
    assert traceback_blocks(watch.new_log()) == []
    rss = watch.rss()
    assert rss is not None and rss < RSS_BOUND_BYTES
    assert served_ranges("127.0.0.1", regression_broker.port)  # still serving
