"""The Raft core's messages survive the trip through the real codec both ways."""

from __future__ import annotations

import uuid

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.raft import wire
from kafka_ext.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"
A = ReplicaKey(1, uuid.UUID(int=11))
B = ReplicaKey(2, uuid.UUID(int=22))


def _through_codec(kind: str, api_key: int, version: int, body: object) -> object:
    mtype = registry().requests[api_key] if kind == "request" else registry().responses[api_key]
    out = bytearray()
    parts: list[object] = []
    mtype.encode_into(body, version, out, parts)
    data = b"".join(bytes(p) for p in parts) + bytes(out) if parts else bytes(out)
    decoded, end = mtype.decode(data, version, 0)
    assert end == len(data)
    return decoded


@pytest.mark.parametrize("message, source", [
    (VoteRequest(5, 7, A, B, 6, 120, pre_vote=True), 1),
    (VoteRequest(5, 7, A, B, 6, 120, pre_vote=False), 1),
    (BeginQuorumEpochRequest(5, 7, 1, B), 1),
    (EndQuorumEpochRequest(5, 7, 1, (3, 2)), 1),
    (FetchRequest(5, 7, B, 300, 6, 500), 2),
    (FetchSnapshotRequest(5, 7, B, OffsetAndEpoch(6, 250), 4096), 2),
])
def test_requests_round_trip(message: object, source: int) -> None:
    api_key, version, body = wire.encode_request(message, CLUSTER)  # type: ignore[arg-type]
    decoded = _through_codec("request", api_key, version, body)
    assert wire.decode_request(api_key, version, decoded, CLUSTER, 5) == (source, message)


@pytest.mark.parametrize("api_key, message", [
    (52, VoteResponse(9, ErrorCode.NONE, 7, -1, True)),
    (53, BeginQuorumEpochResponse(9, ErrorCode.FENCED_LEADER_EPOCH, 8, 3)),
    (54, EndQuorumEpochResponse(9, ErrorCode.NONE, 7, 1)),
    (1, FetchResponse(9, ErrorCode.NONE, 7, 1, 40, 0, None, OffsetAndEpoch(5, 33), None)),
    (1, FetchResponse(9, ErrorCode.NONE, 7, 1, 40, 20, None, None, OffsetAndEpoch(6, 20))),
    (1, FetchResponse(9, ErrorCode.NOT_LEADER_OR_FOLLOWER, 7, 3, 40, 0)),
    (59, FetchSnapshotResponse(9, ErrorCode.NONE, 7, 1, OffsetAndEpoch(6, 20), 9, 4, b"abcde")),
])
def test_responses_round_trip(api_key: int, message: object) -> None:
    body = wire.encode_response(message)  # type: ignore[arg-type]
    version = wire.VERSIONS[api_key]  # type: ignore[index]
    decoded = _through_codec("response", api_key, version, body)
    assert wire.decode_response(api_key, decoded, 9) == message


def test_fetch_response_records_travel_untouched() -> None:
    batch = memoryview(b"\x00" * 70)
    body = wire.encode_response(FetchResponse(9, ErrorCode.NONE, 7, 1, 40, 0, [batch]))
    decoded = _through_codec("response", 1, 17, body)
    assert bytes(wire.decode_response(1, decoded, 9).records) == bytes(batch)  # type: ignore


def test_a_request_of_another_cluster_is_refused() -> None:
    api_key, version, body = wire.encode_request(BeginQuorumEpochRequest(5, 7, 1, B), "other")
    with pytest.raises(KafkaError) as err:
        wire.decode_request(api_key, version, body, CLUSTER, 5)
    assert err.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_only_a_replica_fetch_of_the_metadata_topic_is_a_raft_fetch() -> None:
    _, version, body = wire.encode_request(FetchRequest(5, 7, B, 0, 0, 500), CLUSTER)
    assert wire.is_metadata_fetch(body, version)
    body.replica_state.replica_id = -1  # a consumer
    assert not wire.is_metadata_fetch(body, version)
