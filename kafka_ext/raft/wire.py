"""The Raft core's messages on the wire: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54),
Fetch (1) of `__cluster_metadata` with a replica id, and FetchSnapshot (59).

Pure translation both ways, as Kafka's RaftUtil builds and reads them: one topic
(`__cluster_metadata`), one partition (0), the cluster id checked on every request
(INCONSISTENT_CLUSTER_ID). The core's `request_id` never travels: the sender keeps it beside
the correlation id, and a receiver answers with the id it was given.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.raft.messages import (
    ZERO_DIRECTORY_ID,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    RaftRequest,
    RaftResponse,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)

# The versions one node sends another (both sides are ours, so the newest).
VERSIONS = {ApiKey.VOTE: 2, ApiKey.BEGIN_QUORUM_EPOCH: 1, ApiKey.END_QUORUM_EPOCH: 1,
            ApiKey.FETCH: 17, ApiKey.FETCH_SNAPSHOT: 1}
RAFT_PARTITION = 0
_reg = registry()


def _cls(name: str) -> Any:
    return _reg[name].cls


def is_metadata_fetch(request: Any, api_version: int) -> bool:
    """Whether a Fetch is a Raft replica's fetch of `__cluster_metadata` (not a consumer's)."""
    replica_id = request.replica_state.replica_id if api_version >= 15 else request.replica_id
    if replica_id < 0 or len(request.topics) != 1:
        return False
    topic = request.topics[0]
    return (topic.topic_id == METADATA_TOPIC_ID if api_version >= 13
            else topic.topic == METADATA_TOPIC)


# -- requests ----------------------------------------------------------------------------------

def encode_request(message: RaftRequest, cluster_id: str) -> tuple[int, int, Any]:
    """(api key, version, request body) for a request the core wants sent."""
    if isinstance(message, VoteRequest):
        c = _cls("VoteRequest")
        part = c.PartitionData(
            partition_index=RAFT_PARTITION, candidate_epoch=message.candidate_epoch,
            candidate_id=message.candidate.id, candidate_directory_id=message.candidate.directory_id,
            voter_directory_id=message.voter.directory_id,
            last_offset_epoch=message.last_offset_epoch, last_offset=message.last_offset,
            pre_vote=message.pre_vote)
        body = c(cluster_id=cluster_id, voter_id=message.voter.id, topics=[
            c.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
        return ApiKey.VOTE, VERSIONS[ApiKey.VOTE], body
    if isinstance(message, BeginQuorumEpochRequest):
        c = _cls("BeginQuorumEpochRequest")
        part = c.PartitionData(partition_index=RAFT_PARTITION,
                               voter_directory_id=message.voter.directory_id,
                               leader_id=message.leader_id, leader_epoch=message.epoch)
        body = c(cluster_id=cluster_id, voter_id=message.voter.id, topics=[
            c.TopicData(topic_name=METADATA_TOPIC, partitions=[part])], leader_endpoints=[])
        return ApiKey.BEGIN_QUORUM_EPOCH, VERSIONS[ApiKey.BEGIN_QUORUM_EPOCH], body
    if isinstance(message, EndQuorumEpochRequest):
        c = _cls("EndQuorumEpochRequest")
        part = c.PartitionData(
            partition_index=RAFT_PARTITION, leader_id=message.leader_id,
            leader_epoch=message.epoch, preferred_successors=[],
            preferred_candidates=[c.ReplicaInfo(candidate_id=s,
                                                candidate_directory_id=ZERO_DIRECTORY_ID)
                                  for s in message.preferred_successors])
        body = c(cluster_id=cluster_id, topics=[
            c.TopicData(topic_name=METADATA_TOPIC, partitions=[part])], leader_endpoints=[])
        return ApiKey.END_QUORUM_EPOCH, VERSIONS[ApiKey.END_QUORUM_EPOCH], body
    if isinstance(message, FetchRequest):
        c = _cls("FetchRequest")
        part = c.FetchPartition(partition=RAFT_PARTITION, current_leader_epoch=message.epoch,
                                fetch_offset=message.fetch_offset,
                                last_fetched_epoch=message.last_fetched_epoch,
                                log_start_offset=-1, partition_max_bytes=8 * 1024 * 1024,
                                replica_directory_id=message.replica.directory_id)
        body = c(cluster_id=cluster_id,
                 replica_state=c.ReplicaState(replica_id=message.replica.id, replica_epoch=-1),
                 max_wait_ms=message.max_wait_ms, min_bytes=0, max_bytes=8 * 1024 * 1024,
                 isolation_level=0, session_id=0, session_epoch=-1,
                 topics=[c.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[part])],
                 forgotten_topics_data=[], rack_id="")
        return ApiKey.FETCH, VERSIONS[ApiKey.FETCH], body
    if isinstance(message, FetchSnapshotRequest):
        c = _cls("FetchSnapshotRequest")
        part = c.PartitionSnapshot(
            partition=RAFT_PARTITION, current_leader_epoch=message.epoch,
            snapshot_id=c.SnapshotId(end_offset=message.snapshot_id.offset,
                                     epoch=message.snapshot_id.epoch),
            position=message.position, replica_directory_id=message.replica.directory_id)
        body = c(cluster_id=cluster_id, replica_id=message.replica.id, max_bytes=1024 * 1024,
                 topics=[c.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])
        return ApiKey.FETCH_SNAPSHOT, VERSIONS[ApiKey.FETCH_SNAPSHOT], body
    raise TypeError(f"not a Raft request: {message!r}")


def _only_partition(topics: Any, name_of: Any) -> Any:
    if len(topics) != 1 or name_of(topics[0]) != METADATA_TOPIC or len(topics[0].partitions) != 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"a Raft request names exactly {METADATA_TOPIC}-{RAFT_PARTITION}")
    part = topics[0].partitions[0]
    return part


def _check_cluster(cluster_id: str | None, ours: str) -> None:
    if cluster_id is not None and cluster_id != ours:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                         f"cluster id {cluster_id!r} is not this cluster's ({ours!r})")


def decode_request(api_key: int, api_version: int, body: Any, cluster_id: str,
                   request_id: int) -> tuple[int, RaftRequest]:
    """(sender node id, core message) of a Raft request; KafkaError for a foreign cluster or a
    request for anything but the metadata partition."""
    _check_cluster(body.cluster_id, cluster_id)
    if api_key == ApiKey.VOTE:
        p = _only_partition(body.topics, lambda t: t.topic_name)
        voter = ReplicaKey(body.voter_id if api_version >= 1 else -1,
                           p.voter_directory_id if api_version >= 1 else ZERO_DIRECTORY_ID)
        candidate = ReplicaKey(p.candidate_id, p.candidate_directory_id if api_version >= 1
                               else ZERO_DIRECTORY_ID)
        return p.candidate_id, VoteRequest(
            request_id, p.candidate_epoch, candidate, voter, p.last_offset_epoch, p.last_offset,
            bool(api_version >= 2 and p.pre_vote))
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        p = _only_partition(body.topics, lambda t: t.topic_name)
        voter = ReplicaKey(body.voter_id if api_version >= 1 else -1,
                           p.voter_directory_id if api_version >= 1 else ZERO_DIRECTORY_ID)
        return p.leader_id, BeginQuorumEpochRequest(request_id, p.leader_epoch, p.leader_id, voter)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        p = _only_partition(body.topics, lambda t: t.topic_name)
        successors = (tuple(c.candidate_id for c in p.preferred_candidates) if api_version >= 1
                      else tuple(p.preferred_successors))
        return p.leader_id, EndQuorumEpochRequest(request_id, p.leader_epoch, p.leader_id,
                                                  successors)
    if api_key == ApiKey.FETCH:
        replica_id = body.replica_state.replica_id if api_version >= 15 else body.replica_id
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "a Raft fetch names one partition")
        p = body.topics[0].partitions[0]
        directory = p.replica_directory_id if api_version >= 17 else ZERO_DIRECTORY_ID
        return replica_id, FetchRequest(
            request_id, p.current_leader_epoch, ReplicaKey(replica_id, directory),
            p.fetch_offset, p.last_fetched_epoch, body.max_wait_ms)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = _only_partition(body.topics, lambda t: t.name)
        directory = p.replica_directory_id if api_version >= 1 else ZERO_DIRECTORY_ID
        return body.replica_id, FetchSnapshotRequest(
            request_id, p.current_leader_epoch, ReplicaKey(body.replica_id, directory),
            OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset), p.position)
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"API {api_key} is not a Raft API")


# -- responses ---------------------------------------------------------------------------------

def encode_response(message: RaftResponse) -> Any:
    """The response body for an answer the core produced."""
    if isinstance(message, VoteResponse):
        c = _cls("VoteResponse")
        part = c.PartitionData(partition_index=RAFT_PARTITION, error_code=message.error,
                               leader_id=message.leader_id, leader_epoch=message.epoch,
                               vote_granted=message.vote_granted)
        return c(error_code=0, topics=[c.TopicData(topic_name=METADATA_TOPIC,
                                                   partitions=[part])], node_endpoints=[])
    if isinstance(message, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        c = _cls(type(message).__name__)
        part = c.PartitionData(partition_index=RAFT_PARTITION, error_code=message.error,
                               leader_id=message.leader_id, leader_epoch=message.epoch)
        return c(error_code=0, topics=[c.TopicData(topic_name=METADATA_TOPIC,
                                                   partitions=[part])], node_endpoints=[])
    if isinstance(message, FetchResponse):
        c = _cls("FetchResponse")
        diverging = message.diverging_epoch
        snapshot = message.snapshot_id
        part = c.PartitionData(
            partition_index=RAFT_PARTITION, error_code=message.error,
            high_watermark=message.high_watermark, last_stable_offset=-1,
            log_start_offset=message.log_start_offset,
            diverging_epoch=c.EpochEndOffset(
                epoch=diverging.epoch if diverging else -1,
                end_offset=diverging.offset if diverging else -1),
            current_leader=c.LeaderIdAndEpoch(leader_id=message.leader_id,
                                              leader_epoch=message.epoch),
            snapshot_id=c.SnapshotId(end_offset=snapshot.offset if snapshot else -1,
                                     epoch=snapshot.epoch if snapshot else -1),
            aborted_transactions=None, preferred_read_replica=-1,
            records=message.records or [])
        return c(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            c.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=[part])],
            node_endpoints=[])
    if isinstance(message, FetchSnapshotResponse):
        c = _cls("FetchSnapshotResponse")
        snapshot = message.snapshot_id or OffsetAndEpoch(-1, -1)
        part = c.PartitionSnapshot(
            index=RAFT_PARTITION, error_code=message.error,
            snapshot_id=c.SnapshotId(end_offset=snapshot.offset, epoch=snapshot.epoch),
            current_leader=c.LeaderIdAndEpoch(leader_id=message.leader_id,
                                              leader_epoch=message.epoch),
            size=message.size, position=message.position, unaligned_records=message.data)
        return c(throttle_time_ms=0, error_code=0, topics=[
            c.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])], node_endpoints=[])
    raise TypeError(f"not a Raft response: {message!r}")


def error_response(api_key: int, error: ErrorCode) -> Any:
    """A whole-request error (foreign cluster, malformed) in the API's top-level ErrorCode."""
    name = {ApiKey.VOTE: "VoteResponse", ApiKey.BEGIN_QUORUM_EPOCH: "BeginQuorumEpochResponse",
            ApiKey.END_QUORUM_EPOCH: "EndQuorumEpochResponse", ApiKey.FETCH: "FetchResponse",
            ApiKey.FETCH_SNAPSHOT: "FetchSnapshotResponse"}[ApiKey(api_key)]
    c = _cls(name)
    if api_key == ApiKey.FETCH:
        return c(throttle_time_ms=0, error_code=error, session_id=0, responses=[],
                 node_endpoints=[])
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return c(throttle_time_ms=0, error_code=error, topics=[], node_endpoints=[])
    return c(error_code=error, topics=[], node_endpoints=[])


def decode_response(api_key: int, body: Any, request_id: int) -> RaftResponse | None:
    """The core message of a Raft response, or None when it carries only a top-level error
    (the core then treats the request as lost and retries on its timer)."""
    if body.error_code:
        return None
    if api_key == ApiKey.VOTE:
        p = body.topics[0].partitions[0]
        return VoteResponse(request_id, ErrorCode(p.error_code), p.leader_epoch, p.leader_id,
                            p.vote_granted)
    if api_key in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
        p = body.topics[0].partitions[0]
        cls = BeginQuorumEpochResponse if api_key == ApiKey.BEGIN_QUORUM_EPOCH \
            else EndQuorumEpochResponse
        return cls(request_id, ErrorCode(p.error_code), p.leader_epoch, p.leader_id)
    if api_key == ApiKey.FETCH:
        p = body.responses[0].partitions[0]
        diverging = (OffsetAndEpoch(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
                     if p.diverging_epoch.epoch >= 0 and p.diverging_epoch.end_offset >= 0
                     else None)
        snapshot = (OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset)
                    if p.snapshot_id.end_offset >= 0 and p.snapshot_id.epoch >= 0 else None)
        records = p.records if p.records is not None and len(p.records) else None
        return FetchResponse(request_id, ErrorCode(p.error_code), p.current_leader.leader_epoch,
                             p.current_leader.leader_id, p.high_watermark, p.log_start_offset,
                             records, diverging, snapshot)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = body.topics[0].partitions[0]
        snapshot = OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset)
        return FetchSnapshotResponse(request_id, ErrorCode(p.error_code),
                                     p.current_leader.leader_epoch, p.current_leader.leader_id,
                                     snapshot, p.size, p.position, bytes(p.unaligned_records or b""))
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"API {api_key} is not a Raft API")
