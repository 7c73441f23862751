"""Kafka's range assignor and the consumer protocol payloads, ours."""

from __future__ import annotations

import struct

from kafka_ext.client.assignor import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from kafka_ext.protocol.messages import registry


def test_range_assignor_gives_contiguous_ranges_and_the_first_members_one_more() -> None:
    plan = range_assign({"b": ["t"], "a": ["t"], "c": ["t"]}, {"t": range(7)})
    assert plan == {"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4]}, "c": {"t": [5, 6]}}


def test_members_get_only_their_topics_and_more_members_than_partitions_leaves_some_idle() -> None:
    plan = range_assign({"a": ["t", "u"], "b": ["t"], "c": ["t"]}, {"t": [0, 1], "u": [0, 1]})
    assert plan == {"a": {"t": [0], "u": [0, 1]}, "b": {"t": [1]}, "c": {}}


def test_only_the_given_partitions_are_assigned() -> None:
    # Partition reduction: partition 3 is None, so the caller leaves it out.
    assert range_assign({"a": ["t"], "b": ["t"]}, {"t": [0, 1, 2]}) == {
        "a": {"t": [0, 1]}, "b": {"t": [2]}}


def test_subscription_and_assignment_round_trip() -> None:
    assert decode_subscription(encode_subscription(["u", "t", "t"])) == ["t", "u"]
    assert decode_assignment(encode_assignment({"t": [2, 0], "u": [1]})) == {"t": [0, 2], "u": [1]}
    assert decode_assignment(b"") == {}


def test_a_newer_stock_assignment_decodes() -> None:
    Assignment = registry()["ConsumerProtocolAssignment"]
    body = Assignment.cls(assigned_partitions=[
        Assignment.cls.TopicPartition(topic="t", partitions=[3])], user_data=b"x")
    payload = struct.pack(">h", 3) + Assignment.encode(body, 3)
    assert decode_assignment(payload) == {"t": [3]}
