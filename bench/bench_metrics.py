"""What the Prometheus metrics cost the broker: the same cases with prometheus.metrics.port off
and on, and the time one scrape takes.

Runs bench_broker.py's produce and consume cases (confluent-kafka against a broker
subprocess) plus one of many small requests (linger.ms=0, one 100 B record per Produce), on a
broker with metrics off and one with metrics on, alternating, ROUNDS times; then times scrapes
of a broker hosting SCRAPE_PARTITIONS partitions and a consumer group. Writes the
"## Metrics overhead" section of bench/RESULTS.md.

    python bench/bench_metrics.py          # about 3 minutes
"""

from __future__ import annotations

import re
import statistics
import sys
import time
import timeit
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_broker  # noqa: E402
from bench_broker import (  # noqa: E402
    BenchBroker,
    ProduceCase,
    Throughput,
    _client_version,
    _free_port,
    _load_average,
    create_topic,
    run_consume,
    run_produce,
    running_broker,
    write_section,
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kafka_ext.protocol.api_keys import ApiKey  # noqa: E402
from kafka_ext.protocol.messages import registry  # noqa: E402
from kafka_ext.protocol.records import Record, build_batch  # noqa: E402
from kafka_ext.server.metrics import BrokerTopicStats, RequestMetrics  # noqa: E402

SECTION_TITLE = "## Metrics overhead"
ROUNDS = 3
HOT_PATH_CALLS = 200_000
PRODUCE_SECONDS = 4.0
SMALL_REQUEST_SECONDS = 4.0
SCRAPES = 20
SCRAPE_PARTITIONS = 600  # 6 topics of 100 partitions, each partition with a committed offset
CASES = [ProduceCase(1024, 1, "1"), ProduceCase(100, 6, "1")]


def run_small_requests(broker: BenchBroker, round_no: int) -> Throughput:
    """One record per Produce request (linger.ms=0, at most 5 in flight): the per-request
    path, where the dispatcher's timing and counters weigh most."""
    topic = f"bench-small-requests-{round_no}"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 0,
                         "batch.num.messages": 1, "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": 5})
    producer.list_topics(topic, timeout=30)
    value = b"x" * 100
    sent = 0
    cpu_before = broker.cpu_seconds()
    client_before = time.process_time()
    started = time.perf_counter()
    while time.perf_counter() - started < SMALL_REQUEST_SECONDS:
        try:
            producer.produce(topic, value)
            sent += 1
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("small requests not delivered")
    elapsed = time.perf_counter() - started
    return Throughput("produce-100b-p1, one record per request", sent, 100, elapsed,
                      broker.cpu_seconds() - cpu_before, time.process_time() - client_before)


@dataclass(slots=True)
class Round:
    """One broker's cases; with metrics on, the requests each case made (requests_total)."""

    results: list[Throughput] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)


def run_round(metrics_on: bool, round_no: int) -> Round:
    port = _free_port()
    overrides = {"prometheus.metrics.port": str(port),
                 "prometheus.metrics.host": "127.0.0.1"} if metrics_on else {}
    url = f"http://127.0.0.1:{port}/metrics"
    out = Round()
    with running_broker(overrides=overrides) as broker:
        def measured(run: Callable[[], Throughput]) -> Throughput:
            before = requests_answered(url) if metrics_on else 0
            result = run()
            out.results.append(result)
            out.requests.append(requests_answered(url) - before if metrics_on else 0)
            return result

        for case in CASES:
            produced = measured(partial(run_produce, broker, case))
            if case.partitions == 1:
                measured(partial(run_consume, broker, case, produced.messages))
        measured(partial(run_small_requests, broker, round_no))
    for r, requests in zip(out.results, out.requests, strict=True):
        print(f"{'on ' if metrics_on else 'off'} {r.name}: {r.messages_per_s:,.0f} msg/s, "
              f"broker {_cpu_us(r):.1f} us/msg, {requests:,} requests", flush=True)
    return out


def requests_answered(url: str) -> int:
    """Requests the broker answered so far: kafka_network_requestmetrics_requests_total summed
    over APIs (a fetch once, not again as FetchConsumer)."""
    total = 0.0
    for family in text_string_to_metric_families(scrape(url).decode()):
        if family.name == "kafka_network_requestmetrics_requests":
            total += sum(s.value for s in family.samples if s.name.endswith("_total")
                         and s.labels["request"] not in ("FetchConsumer", "FetchFollower"))
    return int(total)


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        body: bytes = answer.read()
    if b"kafka_server_brokertopicmetrics_messagesin_total" not in body:
        raise RuntimeError("the scrape has no messagesin counter")
    return body


def time_scrapes() -> tuple[list[float], int, int]:
    """Scrape durations (ms), answer size and series count for a broker hosting
    SCRAPE_PARTITIONS partitions, each with a record and a group's committed offset."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with running_broker(overrides={"prometheus.metrics.port": str(port),
                                   "prometheus.metrics.host": "127.0.0.1"}) as broker:
        topics = [f"bench-scrape-{i}" for i in range(SCRAPE_PARTITIONS // 100)]
        for topic in topics:
            create_topic(broker.bootstrap, topic, 100)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for topic in topics:
            for partition in range(100):
                producer.produce(topic, b"v", partition=partition)
        producer.flush(60)
        del producer  # before the broker stops: librdkafka would log the lost connection
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-scrape",
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(t, p, 1) for t in topics for p in range(100)],
                        asynchronous=False)
        consumer.close()
        body = scrape(url)
        durations = []
        for _ in range(SCRAPES):
            started = time.perf_counter()
            body = scrape(url)
            durations.append((time.perf_counter() - started) * 1000)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return durations, len(body), series


def time_hot_path() -> dict[str, float]:
    """Microseconds per call of what the request path adds, in this process: the dispatcher's
    RequestMetrics.record, and the produce and fetch counters for a one-partition request."""
    reg = registry()
    produce_cls, produce_answer = reg["ProduceRequest"].cls, reg["ProduceResponse"].cls
    batch = build_batch([Record(i, 0, None, b"v" * 100) for i in range(10)])
    request = produce_cls(acks=1, timeout_ms=1000, topic_data=[produce_cls.TopicProduceData(
        name="t", partition_data=[produce_cls.PartitionProduceData(index=0, records=batch)])])
    answers = [produce_answer.TopicProduceResponse(name="t", partition_responses=[
        produce_answer.PartitionProduceResponse(index=0, error_code=0, base_offset=0)])]
    fetch_cls, fetch_answer = reg["FetchRequest"].cls, reg["FetchResponse"].cls
    fetch = fetch_cls(replica_id=-1, replica_state=fetch_cls.ReplicaState(replica_id=-1))
    targets = [fetch_cls.FetchTopic(topic="t")]  # anything with a `topic`
    results = [fetch_answer.PartitionData(partition_index=0, error_code=0,
                                          records=[memoryview(batch)])]
    metrics, stats = RequestMetrics(), BrokerTopicStats()
    now = time.perf_counter()
    calls = {
        "RequestMetrics.record, Produce": lambda: metrics.record(
            ApiKey.PRODUCE, 9, request, now - 0.0002, now - 0.0001, now),
        "RequestMetrics.record, Fetch (as Fetch and FetchConsumer)": lambda: metrics.record(
            ApiKey.FETCH, 17, fetch, now - 0.0002, now - 0.0001, now),
        "BrokerTopicStats.record_produce, 1 partition": lambda: stats.record_produce(
            request, answers),
        "BrokerTopicStats.record_fetch, 1 partition": lambda: stats.record_fetch(
            targets, results),
    }
    return {name: min(timeit.repeat(call, number=HOT_PATH_CALLS, repeat=3)) / HOT_PATH_CALLS
            * 1e6 for name, call in calls.items()}


def _cpu_us(result: Throughput) -> float:
    """Broker CPU microseconds per message."""
    return result.broker_cpu_s / result.messages * 1e6


def render(off: list[Round], on: list[Round], scrapes: list[float], scrape_bytes: int,
           series: int, hot_path: dict[str, float], load: tuple[str, str],
           wall_s: float) -> str:
    lines = [SECTION_TITLE, "",
             f"`python bench/bench_metrics.py`, {time.strftime('%Y-%m-%d %H:%M')}, "
             f"Python {sys.version.split()[0]}, confluent-kafka {_client_version()}. "
             f"The same cases on a broker with `prometheus.metrics.port` off and one with it on "
             f"(scraped only between cases, to count the requests each case made), "
             f"alternating, {ROUNDS} rounds each; produce cases run {PRODUCE_SECONDS:g} s as in "
             f"bench_broker.py (linger.ms=5, acks=1); the small-request case sends one 100 B "
             f"record per Produce (linger.ms=0, 5 in flight) for {SMALL_REQUEST_SECONDS:g} s. "
             f"Broker CPU per message is utime+stime of the broker process over the case (10 ms "
             f"ticks). Medians of the rounds, and the spread of the rounds in brackets; the "
             f"machine's two cores are shared with other jobs (load average {load[0]} before, "
             f"{load[1]} after; whole run {wall_s:.0f} s).", "",
             "| case | msg/s off | msg/s on | on/off | broker µs/msg off | broker µs/msg on "
             "| requests per 1,000 msgs | metrics' work, µs/msg (at most) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    per_request_us = max(hot_path[k] for k in hot_path if k.startswith("RequestMetrics"))
    per_partition_us = max(hot_path[k] for k in hot_path if k.startswith("BrokerTopicStats"))
    shares = []
    for index, name in enumerate(r.name for r in off[0].results):
        off_rates = [r.results[index].messages_per_s for r in off]
        on_rates = [r.results[index].messages_per_s for r in on]
        off_cpu = [_cpu_us(r.results[index]) for r in off]
        on_cpu = [_cpu_us(r.results[index]) for r in on]
        partitions = int(re.search(r"-p(\d+)", name).group(1))  # type: ignore[union-attr]
        per_msg = statistics.median(r.requests[index] / r.results[index].messages for r in on)
        work_us = per_msg * (per_request_us + partitions * per_partition_us)
        shares.append((name, work_us / statistics.median(off_cpu)))
        lines.append(
            f"| {name} | {statistics.median(off_rates):,.0f} ({_spread(off_rates, ',.0f')}) "
            f"| {statistics.median(on_rates):,.0f} ({_spread(on_rates, ',.0f')}) "
            f"| {statistics.median(on_rates) / statistics.median(off_rates):.2f}x "
            f"| {statistics.median(off_cpu):.2f} ({_spread(off_cpu, '.2f')}) "
            f"| {statistics.median(on_cpu):.2f} ({_spread(on_cpu, '.2f')}) "
            f"| {per_msg * 1000:,.1f} | {work_us:.3f} |")
    lines += ["", f"**On the request path** (the calls the dispatcher, produce and fetch make, "
              f"timed in one process, best of 3 x {HOT_PATH_CALLS:,} calls): "
              + "; ".join(f"{name} {us:.2f} µs" for name, us in hot_path.items()) + ". "
              f"*Metrics' work* above is the requests each case made times "
              f"{per_request_us:.2f} µs plus {per_partition_us:.2f} µs per partition in the "
              f"request: an upper bound of what the metrics add per message."]
    lines += ["", "**Reading the numbers.** The metrics' work per message, as a share of the "
              "broker's CPU per message with metrics off: "
              + "; ".join(f"{name} {share:.1%}" for name, share in shares)
              + ". It is per request, never per record, so batched produce and fetch pay next to "
              "nothing and only one-record requests pay a few percent. The end-to-end columns "
              "move by more than that between rounds of the same configuration on this shared "
              "machine (the brackets), in either direction: they bound the cost, the bound "
              "above measures it."]
    scrapes.sort()
    lines += ["", f"**Scrape time** ({SCRAPE_PARTITIONS} partitions with a record each, one "
              f"group with an offset committed on each; {SCRAPES} scrapes one after another): "
              f"median {statistics.median(scrapes):.1f} ms, max {scrapes[-1]:.1f} ms, "
              f"{scrape_bytes / 1000:,.0f} kB, {series:,} series. The scrape is built on the "
              f"broker's event loop: requests wait that long behind it."]
    return "\n".join(lines) + "\n"


def _spread(values: list[float], spec: str) -> str:
    return f"{min(values):{spec}}-{max(values):{spec}}"


def main() -> None:
    bench_broker.PRODUCE_SECONDS = PRODUCE_SECONDS
    load_before = _load_average()
    started = time.perf_counter()
    off: list[Round] = []
    on: list[Round] = []
    for round_no in range(ROUNDS):
        off.append(run_round(False, round_no))
        on.append(run_round(True, round_no))
    hot_path = time_hot_path()
    print(hot_path, flush=True)
    scrapes, scrape_bytes, series = time_scrapes()
    print(f"scrape median {statistics.median(scrapes):.1f} ms, {scrape_bytes:,} bytes, "
          f"{series:,} series", flush=True)
    section = render(off, on, scrapes, scrape_bytes, series, hot_path,
                     (load_before, _load_average()),
                     time.perf_counter() - started)
    write_section(section, title=SECTION_TITLE)
    print(section)


if __name__ == "__main__":
    main()
