"""The classic group protocol's consumer payloads and Kafka's range assignor.

Mirrors Kafka's `ConsumerProtocol` (Subscription and Assignment: an int16 version, then the
schema's body, `protocol_schemas/data/`) and `RangeAssignor`: per topic, the members
subscribed to it in member id order each take a contiguous range, the first ones one more
when the count does not divide. Partition reduction (seed 002): None partitions are not
assigned, since nobody may read them. Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry

RANGE_ASSIGNOR = "range"
CONSUMER_PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 0  # topics and user data: all a range assignor needs
ASSIGNMENT_VERSION = 0
_VERSION = struct.Struct(">h")  # the payload's version, before the schema's body

_reg = registry()
_Subscription = _reg["ConsumerProtocolSubscription"]
_Assignment = _reg["ConsumerProtocolAssignment"]


def encode_subscription(topics: Iterable[str]) -> bytes:
    body = _Subscription.cls(topics=sorted(set(topics)), user_data=None)
    return _VERSION.pack(SUBSCRIPTION_VERSION) + _Subscription.encode(body, SUBSCRIPTION_VERSION)


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a member's subscription; DecodeError for bytes that are not one."""
    version = _payload_version(data)
    message, _ = _Subscription.decode(data, min(version, _Subscription.versions.highest or 0), 2)
    return list(message.topics)


def encode_assignment(assignment: Mapping[str, Iterable[int]]) -> bytes:
    Assigned = _Assignment.cls.TopicPartition
    body = _Assignment.cls(assigned_partitions=[
        Assigned(topic=topic, partitions=sorted(partitions))
        for topic, partitions in sorted(assignment.items())], user_data=None)
    return _VERSION.pack(ASSIGNMENT_VERSION) + _Assignment.encode(body, ASSIGNMENT_VERSION)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """topic -> partitions of a SyncGroup answer; empty bytes are an empty assignment."""
    if not data:
        return {}
    version = _payload_version(data)
    message, _ = _Assignment.decode(data, min(version, _Assignment.versions.highest or 0), 2)
    out: dict[str, list[int]] = {}
    for entry in message.assigned_partitions:
        out.setdefault(entry.topic, []).extend(entry.partitions)
    return out


def _payload_version(data: bytes) -> int:
    if len(data) < _VERSION.size:
        raise DecodeError("consumer protocol payload shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise DecodeError(f"consumer protocol version {version}")
    return int(version)


def range_assign(subscriptions: Mapping[str, Iterable[str]],
                 partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor. `subscriptions`: member id -> topics; `partitions`: topic -> the
    partitions to hand out (readable ones). Every member gets an entry, possibly empty."""
    out: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    by_topic: dict[str, list[str]] = {}
    for member, topics in subscriptions.items():
        for topic in set(topics):
            by_topic.setdefault(topic, []).append(member)
    for topic, members in sorted(by_topic.items()):
        available = sorted(partitions.get(topic, ()))
        if not available:
            continue
        members.sort()
        per_member, extra = divmod(len(available), len(members))
        for index, member in enumerate(members):
            start = per_member * index + min(index, extra)
            length = per_member + (1 if index < extra else 0)
            if length:
                out[member][topic] = available[start:start + length]
    return out
