"""Runs a range of fuzz iterations against a live broker and collects what went wrong.

A few workers send mutants concurrently, each on a fresh connection, and judge the answers
(judge.py). Beside them the campaign watches the broker process: its log (a traceback names
the client port of the request that caused it, so it is pinned on that mutant), whether it is
still running, and its resident memory (VmRSS of /proc/<pid>/status) against a bound. A
finding keeps the mutant's bytes; `save_regression` turns it into a file the regression test
replays.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.wire_fuzz.corpus import Seed
from tests.wire_fuzz.judge import judge
from tests.wire_fuzz.mutate import Mutant, mutant

REGRESSIONS_DIR = Path(__file__).resolve().parents[1] / "data" / "wire_fuzz_regressions"
RSS_SAMPLE_S = 0.2
_PEER = re.compile(r"127\.0\.0\.1:(\d+)")
# Mutants kept after they finished, to pin a late log line on (per worker).
_RECENT = 64


def rss_bytes(pid: int) -> int | None:
    """The process's resident set size (VmRSS), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


@dataclass(slots=True)
class Finding:
    kind: str  # "hang", "bad-answer", "traceback", "broker-exit", "rss", "unhealthy"
    detail: str
    mutant: Mutant
    signature: str  # findings with one signature are one bug


@dataclass(slots=True)
class Report:
    iterations: int = 0
    elapsed_s: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    start_rss_bytes: int = 0
    peak_rss_bytes: int = 0
    broker_alive: bool = True

    def summary(self) -> str:
        rate = self.iterations / self.elapsed_s if self.elapsed_s else 0.0
        lines = [f"{self.iterations} mutants in {self.elapsed_s:.1f}s ({rate:.0f}/s)",
                 "outcomes: " + ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common()),
                 "mutations: " + ", ".join(f"{k} {v}" for k, v in self.mutations.most_common())]
        if self.peak_rss_bytes:
            lines.append(f"broker RSS: {self.start_rss_bytes / 2**20:.0f} MiB at start, "
                         f"peak {self.peak_rss_bytes / 2**20:.0f} MiB")
        signatures = Counter(f.signature for f in self.findings)
        lines.append(f"findings: {len(self.findings)} ({len(signatures)} distinct)")
        for signature, n in signatures.most_common():
            first = next(f for f in self.findings if f.signature == signature)
            lines.append(f"  {n} x {signature}: seed {first.mutant.seed} iteration "
                         f"{first.mutant.iteration} ({first.mutant.source}) {first.detail[:300]}")
        return "\n".join(lines)


class BrokerWatch:
    """What the campaign can see of the broker process: pid, log file, liveness."""

    def __init__(self, pid: int | None = None, log_path: Path | None = None,
                 alive: Callable[[], bool] | None = None) -> None:
        self.pid = pid
        self.log_path = log_path
        self._alive = alive
        self._log_offset = log_path.stat().st_size if log_path and log_path.exists() else 0

    def alive(self) -> bool:
        if self._alive is not None:
            return self._alive()
        return self.pid is None or rss_bytes(self.pid) is not None

    def rss(self) -> int | None:
        return None if self.pid is None else rss_bytes(self.pid)

    def new_log(self) -> str:
        if self.log_path is None:
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1  # whole lines only: a traceback may still be being written
        self._log_offset += cut
        return data[:cut].decode(errors="replace")


def traceback_blocks(text: str) -> list[tuple[str, str]]:
    """(the log line before, the traceback) of every traceback in `text`."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = i + 1
            while end < len(lines) and (lines[end].startswith((" ", "\t"))
                                        or not lines[end].startswith("[")):
                end += 1
            blocks.append((lines[i - 1] if i else "", "\n".join(lines[i:end])))
    return blocks


def traceback_signature(tb: str) -> str:
    """The exception and the innermost frame of ours: one bug, however often it is hit."""
    lines = [line.strip() for line in tb.splitlines() if line.strip()]
    frames = [line for line in lines if line.startswith("File ") and "kafka_ext" in line]
    where = frames[-1].split("kafka_ext", 1)[1] if frames else "?"
    error = lines[-1] if lines else "?"
    return f"traceback {error.split(':', 1)[0]} at kafka_ext{where}"


async def run(corpus: list[Seed], seed: int, iterations: range, host: str, port: int,
              ranges: dict[int, tuple[int, int]], watch: BrokerWatch, workers: int = 4,
              rss_limit_bytes: int | None = None, deadline_s: float | None = None,
              on_finding: Callable[[Finding], None] | None = None,
              progress: Callable[[Report], None] | None = None) -> Report:
    """Fuzz `iterations` of `seed`; stops early when the broker dies or `deadline_s` passes."""
    report = Report(start_rss_bytes=watch.rss() or 0)
    report.peak_rss_bytes = report.start_rss_bytes
    in_flight: dict[int, Mutant] = {}  # by the worker that sends it
    by_port: OrderedDict[int, Mutant] = OrderedDict()
    todo = iter(iterations)
    started = time.monotonic()
    stop = asyncio.Event()
    rss_reported = False

    def found(kind: str, detail: str, m: Mutant, signature: str) -> None:
        finding = Finding(kind, detail, m, signature)
        report.findings.append(finding)
        if on_finding is not None:
            on_finding(finding)

    def read_log() -> None:
        for before, tb in traceback_blocks(watch.new_log()):
            ports = [int(p) for p in _PEER.findall(before)]
            suspects = [by_port[p] for p in ports if p in by_port] or list(in_flight.values())
            for m in suspects:
                found("traceback", f"{before}\n{tb}"[-3000:], m, traceback_signature(tb))

    async def watch_memory() -> None:
        nonlocal rss_reported
        while not stop.is_set():
            rss = watch.rss()
            if rss is not None:
                report.peak_rss_bytes = max(report.peak_rss_bytes, rss)
                if rss_limit_bytes is not None and rss > rss_limit_bytes and not rss_reported:
                    rss_reported = True
                    for m in list(in_flight.values()):
                        found("rss", f"broker RSS {rss / 2**20:.0f} MiB over the bound of "
                                     f"{rss_limit_bytes / 2**20:.0f} MiB", m, "rss over bound")
            try:
                await asyncio.wait_for(stop.wait(), RSS_SAMPLE_S)
            except TimeoutError:
                pass

    async def worker(n: int) -> None:
        while not stop.is_set():
            if deadline_s is not None and time.monotonic() - started > deadline_s:
                return
            try:
                i = next(todo)
            except StopIteration:
                return
            try:
                m = mutant(corpus, seed, i)
            except Exception as exc:  # noqa: BLE001 - a bug of the fuzzer's: report, go on
                found("fuzzer-error", repr(exc), Mutant(seed, i, "?", (), b""),
                      f"fuzzer error {type(exc).__name__}")
                continue
            in_flight[n] = m
            for line in m.mutations:
                report.mutations[line.split(":", 1)[0]] += 1
            try:
                verdict = await judge(m.data, host, port, ranges)
            except (OSError, TimeoutError) as exc:
                verdict = None
                if not watch.alive():
                    found("broker-exit", f"broker gone ({exc!r})", m, "broker exited")
                    stop.set()
                    return
                found("unhealthy", f"cannot connect: {exc!r}", m, "connect failed")
            if verdict is not None:
                by_port[verdict.local_port] = m
                while len(by_port) > _RECENT * workers:
                    by_port.popitem(last=False)
                report.outcomes[verdict.outcome] += 1
                if verdict.failure is not None:
                    kind = "hang" if verdict.failure.startswith("hang") else "bad-answer"
                    found(kind, verdict.failure, m,
                          f"{kind} {m.source.split('-v')[0]}: {verdict.failure[:60]}")
            read_log()
            del in_flight[n]
            report.iterations += 1
            if not watch.alive():
                found("broker-exit", "the broker process exited", m, "broker exited")
                stop.set()
                return
            if progress is not None and report.iterations % 1000 == 0:
                report.elapsed_s = time.monotonic() - started
                progress(report)

    memory = asyncio.create_task(watch_memory())
    await asyncio.gather(*(worker(n) for n in range(workers)))
    stop.set()
    await memory
    read_log()
    report.elapsed_s = time.monotonic() - started
    report.broker_alive = watch.alive()
    return report


def save_regression(finding: Finding, directory: Path = REGRESSIONS_DIR) -> Path:
    """Write the finding's bytes as `<name>.bin` with a `<name>.json` note beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", finding.signature.lower()).strip("-")[:60]
    m = finding.mutant
    prefix = "" if slug.startswith(finding.kind) else f"{finding.kind}-"
    name = f"{prefix}{slug}-s{m.seed}-i{m.iteration}"
    (directory / f"{name}.bin").write_bytes(m.data)
    note = {"seed": m.seed, "iteration": m.iteration, "source": m.source,
            "mutations": list(m.mutations), "finding": finding.kind,
            "signature": finding.signature, "detail": finding.detail}
    (directory / f"{name}.json").write_text(json.dumps(note, indent=1) + "\n")
    return directory / f"{name}.bin"
