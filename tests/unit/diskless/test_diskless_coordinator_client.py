"""CoordinatorClient's routing: parts for local coordinators are method calls, the others go to
the coordinator's leader; NOT_COORDINATOR, unreachable leaders and leaderless coordinators are
retried against the leader the metadata names next, until the deadline."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from kafka_ext.controller.image import MetadataImage, PartitionImage, TopicImage
from kafka_ext.diskless.coordinator_client import CoordinatorClient
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

_reg = registry()
Commit = _reg["DisklessCommitFileRequest"].cls
CommitResponse = _reg["DisklessCommitFileResponse"].cls
DescribeFilesResponse = _reg["DisklessDescribeFilesResponse"].cls
TOPIC = uuid.UUID(int=7)
LOCAL = 1


def image_with_leaders(leaders: dict[int, int]) -> MetadataImage:
    """Coordinator c led by leaders[c]; TOPIC's partition p owned by coordinator p."""
    meta = TopicImage("__diskless_metadata", uuid.UUID(int=1), {
        c: PartitionImage(c, (leader,), (leader,), leader, 0, 0) for c, leader in leaders.items()})
    topic = TopicImage("t", TOPIC, {p: PartitionImage(p, (1,), (1,), 1, 0, 0,
                                                      diskless_coordinator=p) for p in leaders})
    return MetadataImage(topics_by_name={"__diskless_metadata": meta, "t": topic},
                         topics_by_id={meta.topic_id: meta, TOPIC: topic})


def ok(request: Any, base: int) -> Any:
    Result = CommitResponse.DisklessCommitBatchResult
    return CommitResponse(batches=[
        Result(error_code=0, error_message=None, assigned_base_offset=base + i,
               log_append_time=-1, log_start_offset=0, is_duplicate=False)
        for i, _ in enumerate(request.batches)])


def refused(request: Any, code: ErrorCode) -> Any:
    Result = CommitResponse.DisklessCommitBatchResult
    return CommitResponse(batches=[
        Result(error_code=int(code), error_message="no", assigned_base_offset=-1,
               log_append_time=-1, log_start_offset=-1, is_duplicate=False)
        for _ in request.batches])


class Cluster:
    """The broker the client belongs to (node 1) and what the other brokers answer."""

    def __init__(self, leaders: dict[int, int]) -> None:
        self.image = image_with_leaders(leaders)
        self.sent: list[tuple[int, Any]] = []
        self.local_calls: list[Any] = []
        self.remote: dict[int, Any] = {}  # node -> callable(request) -> response or raises
        self.broker = SimpleNamespace(node_id=LOCAL, controller=SimpleNamespace(image=None),
                                      broker_channels=SimpleNamespace(request=self.request))
        self.broker.controller.image = self.image
        local = SimpleNamespace(coordinator_of=self.coordinator_of,
                                commit_file=self.local_commit)
        self.client = CoordinatorClient(self.broker, local, timeout_s=2.0)  # type: ignore[arg-type]

    def coordinator_of(self, topic_id: uuid.UUID, partition: int) -> int:
        return partition if topic_id == TOPIC and partition < 2 else -1

    async def local_commit(self, request: Any) -> Any:
        self.local_calls.append(request)
        return ok(request, 100)

    async def request(self, node: int, api_key: int, version: int, body: Any,
                      timeout_s: float) -> Any:
        assert api_key == ApiKey.DISKLESS_COMMIT_FILE
        self.sent.append((node, body))
        return self.remote[node](body)


def commit(*partitions: int) -> Any:
    return Commit(object_key="wal/x", object_format=1, file_size=10, owner_ids=[0, 1],
                  timeout_ms=1000, batches=[
                      Commit.DisklessCommitBatch(magic=2, request_id=0, topic_id=TOPIC,
                                                 partition_index=p, byte_offset=i, size=1,
                                                 base_offset=0, last_offset=0,
                                                 batch_max_timestamp=0, timestamp_type=0,
                                                 producer_id=-1, producer_epoch=-1,
                                                 base_sequence=-1, last_sequence=-1)
                      for i, p in enumerate(partitions)])


async def test_local_parts_are_calls_and_remote_parts_requests_with_the_uploader() -> None:
    c = Cluster({0: LOCAL, 1: 2})
    c.remote[2] = lambda body: ok(body, 500)
    response = await c.client.commit_file(commit(0, 1, 0))
    assert [(b.error_code, b.assigned_base_offset) for b in response.batches] == [
        (0, 100), (0, 500), (0, 101)]
    [local] = c.local_calls
    assert [b.byte_offset for b in local.batches] == [0, 2]
    [(node, remote)] = c.sent
    assert node == 2 and [b.byte_offset for b in remote.batches] == [1]
    assert remote.uploader_broker_id == LOCAL and remote.object_key == "wal/x"


async def test_not_coordinator_and_a_dead_leader_are_retried_at_the_next_leader() -> None:
    c = Cluster({0: 2, 1: 3})

    def moved(body: Any) -> Any:  # broker 2 lost coordinator 0 to broker 3
        c.broker.controller.image = image_with_leaders({0: 3, 1: 3})
        return refused(body, ErrorCode.NOT_COORDINATOR)

    def dead(body: Any) -> Any:
        raise ConnectionError("broker 3 is down")

    c.remote[2] = moved
    c.remote[3] = dead
    attempts = {"n": 0}

    def recovering(body: Any) -> Any:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ConnectionError("not yet")
        return ok(body, 7)

    c.remote[3] = recovering
    response = await c.client.commit_file(commit(0, 1))
    assert [(b.error_code, b.assigned_base_offset) for b in response.batches] == [(0, 7), (0, 8)]
    # Round 1: coordinator 0 at broker 2 (moved), coordinator 1 at broker 3 (unreachable);
    # round 2: both now at broker 3, in one request.
    assert [node for node, _ in c.sent] == [2, 3, 3]
    assert [b.partition_index for b in c.sent[-1][1].batches] == [0, 1]


async def test_a_coordinator_without_a_leader_until_the_deadline_is_a_retriable_error() -> None:
    c = Cluster({0: -1})
    response = await c.client.commit_file(commit(0))
    [answer] = response.batches
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.sent == [] and c.local_calls == []


async def test_a_non_retriable_answer_is_returned_as_is() -> None:
    c = Cluster({0: 2})
    c.remote[2] = lambda body: refused(body, ErrorCode.INVALID_REQUEST)
    [answer] = (await c.client.commit_file(commit(0))).batches
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    assert len(c.sent) == 1
    [unknown] = (await c.client.commit_file(commit(5))).batches  # no coordinator owns it
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_new_leader_in_the_metadata_ends_the_retry_backoff_at_once() -> None:
    c = Cluster({0: 2, 1: 2})
    c.client.timeout_s = 60.0

    def down(body: Any) -> Any:
        raise ConnectionError("broker 2 is down")

    loading = {"answers": 1}

    def new_leader(body: Any) -> Any:  # still loading the coordinator when first asked
        if loading["answers"]:
            loading["answers"] -= 1
            return refused(body, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return ok(body, 700)

    c.remote[2] = down
    c.remote[3] = new_leader
    call = asyncio.create_task(c.client.commit_file(commit(0)))
    # Let the backoff grow to its cap against the dead leader (a second per retry after that).
    while len(c.sent) < 6:
        await asyncio.sleep(0.01)
    old = c.broker.controller.image
    c.broker.controller.image = image_with_leaders({0: 3, 1: 3})
    c.client.on_image(old, c.broker.controller.image)
    # The next scheduling rounds retry at the new leader, and its "still loading" answer is
    # retried after the first, short backoff again, not the 1 s one the dead leader built up.
    for _ in range(20):
        if c.sent[-1][0] == 3:
            break
        await asyncio.sleep(0)
    assert c.sent[-1][0] == 3, "the retry waited for its backoff despite the new leader"
    response = await asyncio.wait_for(call, 0.5)
    assert [(b.error_code, b.assigned_base_offset) for b in response.batches] == [(0, 700)]
    assert c.sent[-1][0] == 3
