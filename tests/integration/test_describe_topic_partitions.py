"""DescribeTopicPartitions (75, KIP-966), the API Kafka 4.x admin clients describe topics with:
pages of partitions in topic-name order, cut by ResponsePartitionLimit and the broker's
`max.request.partition.size.limit`, resumed from the Cursor; each partition as Metadata shows
it. Raw requests with our codec (its encoding of this message is checked against kio's in
tests/unit/protocol/test_codec_vs_kio.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.integration.clients import create_topic, new_topic_name
from tests.integration.conftest import BrokerProcess, serve_for_module

BROKER_LIMIT = 6  # max.request.partition.size.limit of this module's broker
_Request = registry().requests[ApiKey.DESCRIBE_TOPIC_PARTITIONS].cls
_Metadata = registry().requests[ApiKey.METADATA].cls


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("dtp") / "data",
                      {"max.request.partition.size.limit": str(BROKER_LIMIT)})
    yield from serve_for_module(b)


@pytest.fixture(scope="module")
def topics(broker: BrokerProcess) -> list[tuple[str, int]]:
    """Three topics whose names sort as listed: (name, partitions)."""
    prefix = new_topic_name("dtp")
    made = [(f"{prefix}-a", 3), (f"{prefix}-b", 5), (f"{prefix}-c", 1)]
    for name, partitions in made:
        create_topic(broker.bootstrap, name, partitions)
    return made


def describe(broker: BrokerProcess, names: list[str], limit: int = 2000,
             cursor: tuple[str, int] | None = None) -> Any:
    request = _Request(topics=[_Request.TopicRequest(name=n) for n in names],
                       response_partition_limit=limit,
                       cursor=None if cursor is None else _Request.Cursor(
                           topic_name=cursor[0], partition_index=cursor[1]))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=15) as sock:
        identify(sock, "apache-kafka-java")
        return round_trip(sock, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, request, 1)


def page(response: Any) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
    """((topic, error, partition indexes) per topic, next cursor) of one answer."""
    topics = [(t.name, t.error_code, [p.partition_index for p in t.partitions])
              for t in response.topics]
    cursor = response.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


def test_pages_follow_the_cursor_through_every_partition_in_name_order(
        broker: BrokerProcess, topics: list[tuple[str, int]]) -> None:
    (a, _), (b, _), (c, _) = topics
    names = [c, a, b]  # asked in any order, answered by name
    assert page(describe(broker, names, limit=4)) == (
        [(a, 0, [0, 1, 2]), (b, 0, [0])], (b, 1))
    # b's other four partitions fill the page: the next one starts at c, partition 0.
    assert page(describe(broker, names, limit=4, cursor=(b, 1))) == (
        [(b, 0, [1, 2, 3, 4])], (c, 0))
    assert page(describe(broker, names, limit=4, cursor=(c, 0))) == ([(c, 0, [0])], None)
    # The broker's limit caps a larger ResponsePartitionLimit; 0 or less still lists one.
    assert page(describe(broker, names)) == ([(a, 0, [0, 1, 2]), (b, 0, [0, 1, 2])], (b, 3))
    assert page(describe(broker, names, limit=0)) == ([(a, 0, [0])], (a, 1))


def test_each_partition_is_what_metadata_says_of_it(
        broker: BrokerProcess, topics: list[tuple[str, int]]) -> None:
    name, count = topics[1]
    [described] = describe(broker, [name]).topics
    with socket.create_connection(("127.0.0.1", broker.port), timeout=15) as sock:
        identify(sock)
        metadata = round_trip(sock, ApiKey.METADATA, 12, _Metadata(
            topics=[_Metadata.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 1)
    [known] = metadata.topics
    assert described.topic_id == known.topic_id and not described.is_internal
    assert [(p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in described.partitions] == [
        (p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
        for p in sorted(known.partitions, key=lambda p: p.partition_index)][:count]
    assert all(p.eligible_leader_replicas == [] and p.last_known_elr == []
               for p in described.partitions)
    assert described.topic_authorized_operations > 0  # no authorizer: every operation


def test_unknown_and_invalid_topics_and_a_bad_cursor_are_answered_per_topic(
        broker: BrokerProcess, topics: list[tuple[str, int]]) -> None:
    a = topics[0][0]
    missing, invalid = new_topic_name("dtp-missing"), "bad/name"
    answered = {t.name: t.error_code for t in describe(broker, [a, missing, invalid]).topics}
    assert answered == {a: 0, missing: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        invalid: ErrorCode.INVALID_TOPIC_EXCEPTION}
    # The cursor's topic must be one of those asked for, and its partition not negative.
    for cursor in ((missing, 0), (a, -1)):
        answer = describe(broker, [a], cursor=cursor)
        assert [(t.name, t.error_code) for t in answer.topics] == [
            (a, ErrorCode.INVALID_REQUEST)]
    # The connection and the broker are unharmed.
    assert page(describe(broker, [a]))[0] == [(a, 0, [0, 1, 2])]


def test_no_topic_asked_lists_every_topic_from_the_cursor_on(
        broker: BrokerProcess, topics: list[tuple[str, int]]) -> None:
    (a, _), (b, _), (c, _) = topics
    listed, cursor = page(describe(broker, [], cursor=(a, 0)))
    assert listed[:2] == [(a, 0, [0, 1, 2]), (b, 0, [0, 1, 2])] and cursor == (b, 3)
    listed, cursor = page(describe(broker, [], cursor=(b, 3)))
    assert listed[:2] == [(b, 0, [3, 4]), (c, 0, [0])]
    assert all(name > c for name, _, _ in listed[2:])
