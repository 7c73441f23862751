"""The admin and perf tools of issue 18 (get-offsets, delete-records, dump-log,
producer-perf-test, consumer-perf-test) through their bin/ launchers against one real broker:
their output lines and exit codes, checked against what stock clients produced and see."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from clients import (
    ADMIN_TIMEOUT_S,
    create_topic,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
)

from tests.integration.conftest import BrokerProcess, run_cli

BIN = Path(__file__).resolve().parents[2] / "bin"
TOOL_TIMEOUT_S = 120
BASE_TS = 1_600_000_000_000  # make_records' first timestamp
SEGMENT = "00000000000000000000.log"
SUMMARY = re.compile(r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), "
                     r"\d+\.\d\d ms avg latency, \d+\.\d\d ms max latency, \d+ ms 50th, "
                     r"\d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* isTransactional: "
                   r"(true|false) isControl: (true|false) .* isvalid: true$")
RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) "
                    r"sequence: -?\d+ headerKeys: \[(.*?)\](?: key: (\S+))?(?: payload: (.*))?$")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole file; groups form at once (no initial rebalance delay)."""
    process = BrokerProcess(tmp_path_factory.mktemp("tools") / "data",
                            {"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    code = process.stop()
    if code != 0 or "Traceback" in process.log():
        pytest.fail(f"broker exited with {code}:\n{process.log()}")


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`kafka-ext <name>` (bin/kafka-<name>.sh), in this process."""
    return run_cli(name, *args)


def watermarks(broker: BrokerProcess, topic: str, partition: int) -> tuple[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT_S)
        return low, high
    finally:
        consumer.close()


def test_get_offsets_prints_partitions_sorted_as_kafka(broker: BrokerProcess) -> None:
    topic = new_topic_name("go")
    create_topic(broker.bootstrap, topic, partitions=11)
    # Two records per partition: record i goes to partition i % 11 with timestamp BASE_TS + i.
    produce_confluent(broker.bootstrap, topic, make_records(22, partitions=11))
    order = [0, 1, 10, *range(2, 10)]  # by the text "topic-partition", as Kafka sorts
    server = ("--bootstrap-server", broker.bootstrap)

    latest = tool("get-offsets", *server, "--topic", topic)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == "".join(f"{topic}:{p}:2\n" for p in order)
    earliest = tool("get-offsets", *server, "--topic", topic, "--time", "-2")
    assert earliest.stdout == "".join(f"{topic}:{p}:0\n" for p in order)
    # Partition 0's records are stamped BASE_TS and BASE_TS + 11: none at or after +12.
    by_time = tool("get-offsets", *server, "--topic", topic, "--time", str(BASE_TS + 12))
    assert by_time.stdout == "".join(f"{topic}:{p}:1\n" for p in order if p != 0)
    ranged = tool("get-offsets", *server, "--topic-partitions", f"{topic}:9-",
                  "--time", "max-timestamp")
    assert ranged.stdout == f"{topic}:10:1\n{topic}:9:1\n"

    nothing = tool("get-offsets", *server, "--topic", topic + "-absent")
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert nothing.stderr == ("Error occurred: Could not match any topic-partitions with the "
                              "specified filters\n")


def test_delete_records_moves_the_low_watermark(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic_name("dr")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_confluent(broker.bootstrap, topic, make_records(20, partitions=2))
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 4},
        {"topic": topic, "partition": 1, "offset": 50}]}))

    result = tool("delete-records", "--bootstrap-server", broker.bootstrap,
                  "--offset-json-file", str(offsets))
    assert result.returncode == 1, result.stderr  # partition 1 failed
    assert result.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 4",
        f"partition: {topic}-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        "The requested offset is not within the range of offsets maintained by the server.",
    ]
    assert watermarks(broker, topic, 0) == (4, 10)
    assert watermarks(broker, topic, 1) == (0, 10)

    offsets.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 1, "offset": -1}]}))  # -1: up to the high watermark
    result = tool("delete-records", "--bootstrap-server", broker.bootstrap,
                  "--offset-json-file", str(offsets))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"partition: {topic}-1\tlow_watermark: 10"
    assert watermarks(broker, topic, 1) == (10, 10)


def test_dump_log_shows_what_was_produced(broker: BrokerProcess) -> None:
    topic, group = new_topic_name("dl"), new_topic_name("dl-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(20)
    produce_confluent(broker.bootstrap, topic, records)
    segment = broker.data_dir / f"{topic}-0" / SEGMENT

    dumped = tool("dump-log", "--files", str(segment), "--print-data-log")
    assert dumped.returncode == 0, dumped.stderr
    lines = dumped.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batches = [BATCH.match(line) for line in lines if line.startswith("baseOffset")]
    assert all(batches), lines
    spans = [(int(b[1]), int(b[2]), int(b[3])) for b in batches if b]
    assert [first for first, _, _ in spans] == [0] + [last + 1 for _, last, _ in spans[:-1]]
    assert spans[-1][1] == 19 and sum(count for _, _, count in spans) == 20
    dumped_records = [RECORD.match(line) for line in lines if line.startswith("|")]
    assert all(dumped_records), lines
    assert [(int(m[1]), int(m[2]), m[5], m[6], m[7]) for m in dumped_records if m] == [
        (i, r.timestamp_ms, "seq,parity", r.key.decode(), r.value.decode())
        for i, r in enumerate(records) if r.key and r.value]

    # The topic's creation in the metadata log, and a committed offset in __consumer_offsets.
    metadata_logs = sorted((broker.data_dir / "__cluster_metadata-0").glob("*.log"))
    metadata = tool("dump-log", "--cluster-metadata-decoder",
                    "--files", ",".join(map(str, metadata_logs)))
    assert metadata.returncode == 0, metadata.stderr
    assert f'payload: {{"type":"TOPIC_RECORD","version":0,"data":{{"name":"{topic}",' \
        in metadata.stdout
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    offsets_logs = sorted(broker.data_dir.glob(f"__consumer_offsets-*/{SEGMENT}"))
    commits = tool("dump-log", "--offsets-decoder", "--files", ",".join(map(str, offsets_logs)))
    assert commits.returncode == 0, commits.stderr
    key = json.dumps({"type": "1", "data": {"group": group, "topic": topic, "partition": 0}},
                     separators=(",", ":"))
    [commit] = [line for line in commits.stdout.splitlines() if f"key: {key} " in line]
    assert json.loads(commit.split(" payload: ")[1])["data"]["offset"] == 7


def coordinator_records(broker: BrokerProcess, topic: str, decoder: str, group: str
                        ) -> list[tuple[dict[str, Any], Any]]:
    """(key, payload) JSON of the group's records in every partition of a coordinator's
    internal topic, as `dump-log <decoder>` prints them (a tombstone's payload is None)."""
    logs = sorted(broker.data_dir.glob(f"{topic}-*/{SEGMENT}"))
    dumped = tool("dump-log", decoder, "--files", ",".join(map(str, logs)))
    assert dumped.returncode == 0, dumped.stderr
    out = []
    for line in dumped.stdout.splitlines():
        if " key: " not in line:
            continue
        key_text, payload_text = line.split(" key: ", 1)[1].split(" payload: ")
        key = json.loads(key_text)
        if key["data"].get("groupId") == group:
            out.append((key, None if payload_text == "<DELETE>" else json.loads(payload_text)))
    return out


def test_dump_log_decodes_share_group_records_of_both_coordinators(broker: BrokerProcess
                                                                   ) -> None:
    """After a share consumer read and acknowledged 3 records: its group's records in
    __consumer_offsets (types 10-15) and its share-partition's in __share_group_state
    (ShareSnapshot, then ShareUpdates up to the start offset past the records)."""
    topic, group = new_topic_name("dl-share"), new_topic_name("dl-share-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_confluent(broker.bootstrap, topic, make_records(3))
    done = tool("configs", "--bootstrap-server", broker.bootstrap, "--alter", "--group", group,
                "--add-config", "share.auto.offset.reset=earliest")
    assert done.returncode == 0, done.stderr
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap,
                                              "group.id": group})
    consumer.subscribe([topic])
    try:
        offsets: list[int] = []

        def polled_all() -> bool:
            for message in consumer.poll(0.5) or []:
                offset = message.offset()
                assert message.error() is None and offset is not None, message.error()
                offsets.append(offset)
            return len(offsets) >= 3
        wait_until(polled_all, 30, "3 records for the share consumer")
        assert sorted(offsets) == [0, 1, 2]
        consumer.commit_sync()  # implicit mode: accepts them

        def state_past_the_records() -> list[tuple[dict[str, Any], Any]] | None:
            records = coordinator_records(broker, "__share_group_state",
                                          "--share-group-state-decoder", group)
            done = records and records[-1][1]["data"]["startOffset"] == 3
            return records if done else None
        state = wait_until(state_past_the_records, 20, "the acknowledgements' ShareUpdate")
    finally:
        consumer.close()

    group_records = coordinator_records(broker, "__consumer_offsets", "--offsets-decoder", group)
    assert {key["type"] for key, _ in group_records} == {"10", "11", "12", "13", "14", "15"}
    member_id = next(key["data"]["memberId"] for key, _ in group_records if key["type"] == "10")
    [member] = [value["data"] for key, value in group_records if key["type"] == "10" and value]
    assert member["subscribedTopicNames"] == [topic]
    partitions = [value["data"] for key, value in group_records if key["type"] == "15"]
    [initialized] = partitions[-1]["initializedTopics"]
    assert (initialized["topicName"], initialized["partitions"]) == (topic, [0])
    assert partitions[-1]["initializingTopics"] == []
    topic_id = initialized["topicId"]
    assert {"topicId": topic_id, "partitions": [0]} in [
        tp for key, value in group_records if key["type"] == "14" and value
        for tp in value["data"]["assignedPartitions"]]
    assert all(key["data"]["memberId"] == member_id
               for key, _ in group_records if key["type"] in ("10", "13", "14"))

    # The share coordinator: one snapshot at initialization, then deltas over it.
    assert all(key["data"] == {"groupId": group, "topicId": topic_id, "partition": 0}
               for key, _ in state)
    assert [key["type"] for key, _ in state] == ["0"] + ["1"] * (len(state) - 1)
    snapshot, last = state[0][1], state[-1][1]
    assert snapshot["version"] == "0"
    assert (snapshot["data"]["snapshotEpoch"], snapshot["data"]["stateBatches"]) == (0, [])
    assert (last["data"]["snapshotEpoch"], last["data"]["stateBatches"]) == (0, [])


def test_producer_perf_test_then_consumer_perf_test(broker: BrokerProcess) -> None:
    topic = new_topic_name("perf")
    create_topic(broker.bootstrap, topic, partitions=2)
    produced = tool("producer-perf-test", "--topic", topic, "--num-records", "300",
                    "--record-size", "100", "--throughput", "-1",
                    "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all")
    assert produced.returncode == 0, produced.stderr
    summary = SUMMARY.match(produced.stdout.splitlines()[-1])
    assert summary and summary[1] == "300", produced.stdout
    assert sum(watermarks(broker, topic, p)[1] for p in range(2)) == 300

    consumed = tool("consumer-perf-test", "--bootstrap-server", broker.bootstrap,
                    "--topic", topic, "--messages", "300", "--timeout", "20000")
    assert consumed.returncode == 0, consumed.stderr
    header, result = consumed.stdout.splitlines()
    assert header == ("start.time, end.time, data.consumed.in.MB, MB.sec, "
                      "data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, "
                      "fetch.MB.sec, fetch.nMsg.sec")
    fields = result.split(", ")
    assert len(fields) == 10 and re.fullmatch(DATE, fields[0]) and re.fullmatch(DATE, fields[1])
    assert (fields[2], fields[4]) == (f"{300 * 100 / 1024 / 1024:.4f}", "300")


def test_transactional_producer_perf_test_commits(broker: BrokerProcess) -> None:
    topic = new_topic_name("perf-tx")
    create_topic(broker.bootstrap, topic, partitions=1)
    produced = tool("producer-perf-test", "--topic", topic, "--num-records", "100",
                    "--payload-monotonic", "--throughput", "500", "--transactional-id",
                    new_topic_name("tx"), "--transaction-duration-ms", "50",
                    "--producer-props", f"bootstrap.servers={broker.bootstrap}")
    assert produced.returncode == 0, produced.stderr
    summary = SUMMARY.match(produced.stdout.splitlines()[-1])
    assert summary and summary[1] == "100", produced.stdout

    dumped = tool("dump-log", "--files", str(broker.data_dir / f"{topic}-0" / SEGMENT),
                  "--print-data-log")
    assert dumped.returncode == 0, dumped.stderr
    lines = dumped.stdout.splitlines()
    batches = [m for m in map(BATCH.match, lines) if m]
    assert batches and all(b[4] == "true" for b in batches)  # every batch is transactional
    markers = [line for line in lines if "endTxnMarker:" in line]
    assert markers and all(" endTxnMarker: COMMIT " in line for line in markers)
    assert len(markers) == sum(b[5] == "true" for b in batches) > 1  # several transactions
    payloads = [m[7] for m in map(RECORD.match, lines) if m and m[7] is not None]
    assert payloads == [str(i) for i in range(100)]
