"""Long fuzz runs from the command line.

    python -m tests.wire_fuzz --seed 7 --iterations 50000 [--duration 1800]
    python -m tests.wire_fuzz --seed 7 --bootstrap 127.0.0.1:9092 [--broker-pid PID]

Without --bootstrap it starts a broker of its own (temporary data dir, log kept on failure),
with a confluent-kafka producer and consumer as bystanders whose records are checked at the
end. Prints a summary; each finding's bytes go to tests/data/wire_fuzz_regressions/ (at most
--per-signature files per distinct bug, none for a bug a file there already has), where the
regression test replays them. Exit code 1 when anything was found.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
from pathlib import Path

from tests.wire_fuzz.campaign import REGRESSIONS_DIR, BrokerWatch, Finding, run, save_regression
from tests.wire_fuzz.corpus import load_corpus
from tests.wire_fuzz.target import BROKER_OVERRIDES, create_corpus_topics, served_ranges


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.wire_fuzz",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0, help="first iteration")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--workers", type=int, default=4, help="concurrent connections")
    parser.add_argument("--bootstrap", help="host:port of a running broker")
    parser.add_argument("--broker-pid", type=int, help="its pid, to watch its RSS")
    parser.add_argument("--broker-log", type=Path, help="its log, to catch tracebacks")
    parser.add_argument("--rss-limit-mb", type=float, default=1024.0)
    parser.add_argument("--regressions", type=Path, default=REGRESSIONS_DIR)
    parser.add_argument("--per-signature", type=int, default=2)
    parser.add_argument("--no-bystander", action="store_true")
    parser.add_argument("--work-dir", type=Path,
                        help="data dir and log of the broker it starts (default: a temporary "
                             "dir, removed at the end)")
    args = parser.parse_args(argv)
    # SIGTERM ends the run like Ctrl-C: the broker it started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    if args.bootstrap:
        host, port = args.bootstrap.rsplit(":", 1)
        watch = BrokerWatch(args.broker_pid, args.broker_log)
        return _campaign(args, host, int(port), watch, None)
    from tests.integration.conftest import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="wire-fuzz-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(work / "data", BROKER_OVERRIDES)
        broker.start()
        assert broker.proc is not None
        proc = broker.proc
        watch = BrokerWatch(proc.pid, broker.log_path, lambda: proc.poll() is None)
        try:
            code = _campaign(args, "127.0.0.1", broker.port, watch, broker)
        finally:
            exit_code = broker.stop()
        if exit_code != 0:
            print(f"broker exited with {exit_code}; log tail:\n{broker.log()[-5000:]}")
            code = 1
        return code


def _campaign(args: argparse.Namespace, host: str, port: int, watch: BrokerWatch,
              broker: object | None) -> int:
    create_corpus_topics(f"{host}:{port}")
    ranges = served_ranges(host, port)
    corpus = load_corpus()
    known = {json.loads(p.read_text()).get("signature")
             for p in args.regressions.glob("*.json")} if args.regressions.is_dir() else set()
    saved: dict[str, int] = {}

    def on_finding(f: Finding) -> None:
        if f.signature in known or saved.get(f.signature, 0) >= args.per_signature:
            return
        saved[f.signature] = saved.get(f.signature, 0) + 1
        path = save_regression(f, args.regressions)
        print(f"finding {f.kind}: {f.signature} -> {path}", flush=True)

    traffic = None
    if broker is not None and not args.no_bystander:
        from tests.integration.test_bad_input import SteadyTraffic

        traffic = SteadyTraffic(broker)
    report = asyncio.run(run(
        corpus, args.seed, range(args.start, args.start + args.iterations), host, port, ranges,
        watch, args.workers, int(args.rss_limit_mb * 2**20), args.duration, on_finding,
        progress=lambda r: print(f"... {r.iterations} mutants, {r.elapsed_s:.0f}s, "
                                 f"{len(r.findings)} findings, peak RSS "
                                 f"{r.peak_rss_bytes / 2**20:.0f} MiB", flush=True)))
    print(f"seed {args.seed}, iterations {args.start}..{args.start + report.iterations - 1}")
    print(report.summary())
    ok = not report.findings and report.broker_alive
    if traffic is not None:
        try:
            traffic.finish()
            print(f"bystander: {traffic.sent} records sent, all read back in order")
        except AssertionError as exc:
            print(f"bystander FAILED: {exc}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
