"""`kafka-ext chunks` (seed 000's kafka-chunks.sh) and the chunk lines of `topics --describe`:
the JSON files, the leader routing and retries of create, and the describe formatting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.cli.chunks import (
    ChunkMove,
    ChunkRow,
    NewChunk,
    Outcome,
    PartitionChunks,
    Unanswered,
    alter_line,
    bootstrap_addresses,
    chunks_by_partition,
    create_chunks,
    create_line,
    group_by_leader,
    leaders,
    outcome_of,
    parse_alter,
    parse_create,
)
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.main import build_parser, main
from kafka_ext.cli.topics import PartitionRow, TopicRow, chunk_cell, format_topic_lines
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

Metadata = registry()["MetadataResponse"].cls


# -- the JSON files ------------------------------------------------------------------------------


def test_create_file_of_the_proposal() -> None:
    text = json.dumps({"partitions": [{"topic": "topic1", "partition": 0, "replicas": [1, 2, 3]},
                                      {"topic": "topic2", "partition": 2,
                                       "replicas": [2, 9, 12]}]})
    assert parse_create(text) == [NewChunk("topic1", 0, (1, 2, 3)),
                                  NewChunk("topic2", 2, (2, 9, 12))]


def test_alter_file_of_the_proposal_with_optional_epoch() -> None:
    text = json.dumps({"chunks": [
        {"topic": "topic1", "partition": 0, "startOffset": 289818, "replicas": [4, 5, 6]},
        {"topic": "topic1", "partition": 0, "startOffset": 27784, "replicas": [1, 2, 3],
         "chunkEpoch": 2}]})
    assert parse_alter(text) == [ChunkMove("topic1", 0, 289818, (4, 5, 6), -1),
                                 ChunkMove("topic1", 0, 27784, (1, 2, 3), 2)]


@pytest.mark.parametrize(("document", "message"), [
    ("{", "not JSON"),
    ([], "expected a JSON object"),
    ({}, 'missing field "partitions"'),
    ({"partitions": {}}, '"partitions" must be a list'),
    ({"partitions": []}, "nothing to do"),
    ({"partitions": [1]}, "partitions[0]: expected an object"),
    ({"partition": []}, 'unknown field "partition"'),
    ({"partitions": [{"partition": 0, "replicas": [1]}]}, 'partitions[0]: missing field "topic"'),
    ({"partitions": [{"topic": "t", "replicas": [1]}]}, 'missing field "partition"'),
    ({"partitions": [{"topic": "t", "partition": 0}]}, 'missing field "replicas"'),
    ({"partitions": [{"topic": "", "partition": 0, "replicas": [1]}]}, "non-empty string"),
    ({"partitions": [{"topic": 5, "partition": 0, "replicas": [1]}]}, "non-empty string"),
    ({"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]},
     '"partition" must be an integer, got "0"'),
    ({"partitions": [{"topic": "t", "partition": True, "replicas": [1]}]}, "must be an integer"),
    ({"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}, "at least 0"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "non-empty list"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": 1}]}, "non-empty list"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, "2"]}]},
     '"replicas" must be an integer'),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "names a broker twice"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "startOffset": 3}]},
     'partitions[0]: unknown field "startOffset"'),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},
                     {"topic": "t", "partition": 0, "replicas": [2]}]},
     "partitions[1]: t-0 is already listed in partitions[0]"),
])
def test_malformed_create_files_are_usage_errors(document: Any, message: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(UsageError) as raised:
        parse_create(text)
    assert message in str(raised.value)


@pytest.mark.parametrize(("entry", "message"), [
    ({"topic": "t", "partition": 0, "replicas": [1]}, 'missing field "startOffset"'),
    ({"topic": "t", "partition": 0, "startOffset": -1, "replicas": [1]}, "at least 0"),
    ({"topic": "t", "partition": 0, "startOffset": 1.5, "replicas": [1]}, "must be an integer"),
    ({"topic": "t", "partition": 0, "startOffset": 0, "replicas": [1], "chunkEpoch": -2},
     '"chunkEpoch" must be at least -1'),
    ({"topic": "t", "partition": 0, "startOffset": 0, "replicas": [1], "chunk_epoch": 1},
     'unknown field "chunk_epoch"'),
    ({"topic": "t", "partition": 0, "start_offset": 0, "replicas": [1]},
     'unknown field "start_offset"'),
])
def test_malformed_alter_entries_are_usage_errors(entry: dict, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_alter(json.dumps({"chunks": [entry]}))
    assert message in str(raised.value)


def test_alter_lists_a_chunk_once_but_a_partition_many_times() -> None:
    chunk = {"topic": "t", "partition": 0, "startOffset": 10, "replicas": [1]}
    assert len(parse_alter(json.dumps({"chunks": [chunk, {**chunk, "startOffset": 0}]}))) == 2
    with pytest.raises(UsageError, match="starting at 10 is already listed in chunks"):
        parse_alter(json.dumps({"chunks": [chunk, {**chunk, "replicas": [2]}]}))


def test_subcommand_flags_and_usage_errors(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["chunks", "create", "--bootstrap-server", "h:1",
                                      "--create-chunk-json-file", "f.json"])
    assert (args.action, args.create_chunk_json_file) == ("create", "f.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"chunks": [{"topic": "t"}]}))
    cases = [(["alter", "--alter-chunk-json-file", str(bad)],
              'chunks[0]: missing field "partition"'),
             (["alter"], "--alter-chunk-json-file is required with alter"),
             (["alter", "--alter-chunk-json-file", str(bad), "--create-chunk-json-file",
               str(bad)], "--create-chunk-json-file is only valid with create"),
             (["create", "--create-chunk-json-file", str(tmp_path / "missing.json")],
              "cannot read")]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:  # before any connection: port 1 is unused
            main(["chunks", *argv, "--bootstrap-server", "127.0.0.1:1"])
        assert exited.value.code == 2, argv
        assert f"kafka-ext chunks: error: {message}" in capsys.readouterr().err


def test_bootstrap_addresses() -> None:
    assert bootstrap_addresses("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(UsageError):
        bootstrap_addresses("a")


# -- routing create to leaders -------------------------------------------------------------------


def metadata_answer(partitions: dict[tuple[str, int], int], brokers: tuple[int, ...] = (1, 2, 3),
                    missing: tuple[str, ...] = (), chunks: dict[tuple[str, int], Any] | None = None
                    ) -> Any:
    """A Metadata answer: `partitions` (topic, index) -> leader; `missing` topics unknown."""
    topics: dict[str, list[Any]] = {}
    for (topic, index), leader in partitions.items():
        start, found = (chunks or {}).get((topic, index), (-1, []))
        topics.setdefault(topic, []).append(Metadata.MetadataResponsePartition(
            partition_index=index, leader_id=leader, replica_nodes=[leader], isr_nodes=[leader],
            start_offset=start, chunks=found))
    return Metadata(
        brokers=[Metadata.MetadataResponseBroker(node_id=b, host=f"h{b}", port=9000 + b)
                 for b in brokers],
        topics=[Metadata.MetadataResponseTopic(name=t, partitions=p) for t, p in topics.items()]
        + [Metadata.MetadataResponseTopic(name=t, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
           for t in missing])


class FakeBootstrap:
    """Answers Metadata requests with the next answer of a list (the last one repeats)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[list[str]] = []

    def request(self, api_key: int, version: int, body: Any, timeout_s: float = 0) -> Any:
        assert (api_key, version) == (ApiKey.METADATA, 12)
        self.asked.append([t.name for t in body.topics])
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_leaders_and_grouping() -> None:
    answer = metadata_answer({("a", 0): 1, ("a", 1): 2, ("b", 0): -1}, missing=("gone",))
    led, refused = leaders(answer, [("a", 0), ("a", 1), ("a", 7), ("b", 0), ("gone", 0)])
    assert led == {("a", 0): 1, ("a", 1): 2}
    assert {tp: o.error for tp, o in refused.items()} == {
        ("a", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("b", 0): ErrorCode.LEADER_NOT_AVAILABLE,
        ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    entries = [NewChunk("a", 0, (2,)), NewChunk("a", 1, (3,)), NewChunk("b", 0, (1,)),
               NewChunk("c", 0, (1,))]
    assert group_by_leader(entries, {("a", 0): 1, ("a", 1): 2, ("c", 0): 1}) == {
        1: [entries[0], entries[3]], 2: [entries[1]]}


def test_create_goes_to_each_leader_and_follows_a_moved_one() -> None:
    before = metadata_answer({("a", 0): 1, ("a", 1): 2, ("b", 0): 1})
    after = metadata_answer({("a", 0): 3, ("a", 1): 2, ("b", 0): 1})
    sent: list[tuple[int, tuple[str, int], list[NewChunk]]] = []

    def send(leader: int, address: tuple[str, int], group: list[NewChunk]) -> list[Outcome]:
        sent.append((leader, address, group))
        if leader == 1:  # broker 1 lost a-0 meanwhile, still leads b-0
            return [Outcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, "led by 3") if e.topic == "a"
                    else Outcome(ErrorCode.NONE) for e in group]
        return [Outcome(ErrorCode.NONE)] * len(group)

    bootstrap = FakeBootstrap(before, after)
    entries = [NewChunk("a", 0, (2,)), NewChunk("a", 1, (3,)), NewChunk("b", 0, (2,))]
    outcomes = create_chunks(bootstrap, entries, send, backoff_s=0)  # type: ignore[arg-type]
    assert all(o.ok for o in outcomes.values()) and len(outcomes) == 3
    assert [(leader, address, [(e.topic, e.partition) for e in group])
            for leader, address, group in sent] == [
        (1, ("h1", 9001), [("a", 0), ("b", 0)]), (2, ("h2", 9002), [("a", 1)]),
        (3, ("h3", 9003), [("a", 0)])]
    assert bootstrap.asked == [["a", "b"], ["a"]]


def test_create_gives_up_after_the_attempts_and_never_resends_an_unanswered_request() -> None:
    calls: list[int] = []

    def send(leader: int, address: tuple[str, int], group: list[NewChunk]) -> list[Outcome]:
        calls.append(leader)
        if leader == 1:
            return [Outcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")] * len(group)
        if leader == 2:
            raise Unanswered("no answer from broker 2")
        raise ConnectionRefusedError("refused")  # nothing sent: retried

    answer = metadata_answer({("a", 0): 1, ("b", 0): 2, ("c", 0): 3, ("d", 0): 4},
                             brokers=(1, 2, 3))
    outcomes = create_chunks(FakeBootstrap(answer),  # type: ignore[arg-type]
                             [NewChunk(t, 0, (1,)) for t in "abcd"], send, attempts=3,
                             backoff_s=0)
    assert calls == [1, 2, 3, 1, 3, 1, 3]
    assert outcomes[("a", 0)] == Outcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert outcomes[("b", 0)] == Outcome(ErrorCode.NETWORK_EXCEPTION, "no answer from broker 2")
    assert outcomes[("c", 0)].error == ErrorCode.NETWORK_EXCEPTION
    assert "cannot reach broker 3 at h3:9003" in str(outcomes[("c", 0)].message)
    assert outcomes[("d", 0)].error == ErrorCode.LEADER_NOT_AVAILABLE  # 4 is not a live broker


def test_result_lines() -> None:
    assert create_line(NewChunk("orders", 0, (1, 2, 3)), Outcome(ErrorCode.NONE)) == \
        "Created a chunk of orders-0 on brokers [1, 2, 3]"
    assert create_line(NewChunk("orders", 1, (1,)), outcome_of(1003, "1 replicas given")) == \
        "Failed to create a chunk of orders-1: INVALID_CHUNK_ASSIGNMENT: 1 replicas given"
    move = ChunkMove("orders", 0, 27784, (4, 5, 6))
    assert alter_line(move, Outcome(ErrorCode.NONE)) == \
        "Started moving the chunk of orders-0 starting at offset 27784 to brokers [4, 5, 6]"
    assert alter_line(move, outcome_of(1002, None)) == \
        "Failed to move the chunk of orders-0 starting at offset 27784: CHUNK_NOT_FOUND"
    assert outcome_of(31999, "odd") == Outcome(ErrorCode.UNKNOWN_SERVER_ERROR,
                                               "error code 31999: odd")


# -- topics --describe ---------------------------------------------------------------------------


CHUNKS = PartitionChunks(20, (ChunkRow(0, 9, 9, (1, 2, 3), (1, 2, 3)),
                              ChunkRow(10, 19, 21, (4, 5, 6), (4, 5))))


def test_chunks_of_a_metadata_answer() -> None:
    Chunk = Metadata.MetadataResponseChunk
    answer = metadata_answer({("t", 0): 7, ("t", 1): 8}, chunks={("t", 0): (20, [
        Chunk(start_offset=0, start_timestamp=5, stop_offset=9, end_offset=9,
              replica_nodes=[1, 2, 3], isr_nodes=[1, 2, 3]),
        Chunk(start_offset=10, start_timestamp=6, stop_offset=19, end_offset=21,
              replica_nodes=[4, 5, 6], isr_nodes=[4, 5])])}, missing=("gone",))
    assert chunks_by_partition(answer) == {("t", 0): CHUNKS}


def test_describe_prints_chunk_lines_under_their_partition_only() -> None:
    row = TopicRow("t", "id", (PartitionRow(0, 7, (7, 8, 9), (7, 8), CHUNKS),
                               PartitionRow(1, None, (8, 9, 7), ())), ())
    assert format_topic_lines(row) == [
        "Topic: t\tTopicId: id\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: 7\tReplicas: 7,8,9\tIsr: 7,8\tElr: N/A"
        "\tLastKnownElr: N/A",
        "\t\tChunk: inactive\tStartOffset: 0\tStopOffset: 9\tEndOffset: 9\tReplicas: 1,2,3"
        "\tIsr: 1,2,3",
        "\t\tChunk: inactive\tStartOffset: 10\tStopOffset: 19\tEndOffset: 21\tReplicas: 4,5,6"
        "\tIsr: 4,5",
        "\t\tChunk: active\tStartOffset: 20",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 8,9,7\tIsr: \tElr: N/A"
        "\tLastKnownElr: N/A"]
    assert format_topic_lines(row, {1})[1:] == [format_topic_lines(row)[-1]]


def test_describe_without_chunks_is_unchanged() -> None:
    plain = TopicRow("t", "id", (PartitionRow(0, 1, (1,), (1,)),), (("retention.ms", "5"),))
    assert format_topic_lines(plain) == [
        "Topic: t\tTopicId: id\tPartitionCount: 1\tReplicationFactor: 1"
        "\tConfigs: retention.ms=5",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"]


def test_table_cell() -> None:
    assert chunk_cell(CHUNKS) == ("0-9 (end 9) on 1,2,3, isr 1,2,3\n"
                                  "10-19 (end 21) on 4,5,6, isr 4,5\nactive from 20")


def test_no_reachable_bootstrap_is_exit_1(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "create.json"
    good.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}))
    assert main(["chunks", "create", "--bootstrap-server", "127.0.0.1:1",
                 "--create-chunk-json-file", str(good)]) == 1
    assert capsys.readouterr().err.startswith(
        "Error: cannot reach any bootstrap server: 127.0.0.1:1: ")
