"""Partition reduction (seed 002) on the controller: DeletePartitions and the delayed deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_ext.controller.image import MODE_NONE, READ_ONLY, READ_WRITE
from kafka_ext.controller.quorum_controller import QuorumController, TopicCreation
from kafka_ext.controller.snapshot import read_snapshot_image, write_snapshot
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from tests.unit.controller.test_quorum_controller import _controller, _create, _partition

NOW = 1_700_000_000_000


def _modes(controller: QuorumController, topic: str) -> list[int]:
    partitions = controller.image.topics_by_name[topic].partitions
    return [partitions[p].mode for p in sorted(partitions)]


async def test_a_delayed_deletion_goes_read_only_then_none_then_away(
        controller: QuorumController) -> None:
    await _create(controller, TopicCreation("events", 4, 1))
    assert await controller.delete_partitions("events", [3, 2], 60_000, NOW) == READ_ONLY
    assert _modes(controller, "events") == [READ_WRITE, READ_WRITE, READ_ONLY, READ_ONLY]
    deletion = controller.image.topics_by_name["events"].deletion
    assert deletion is not None and (deletion.first_removed, deletion.delete_at_ms) == (
        2, NOW + 60_000)
    await controller.advance_partition_deletions(NOW + 59_999)  # not yet
    assert _modes(controller, "events")[2:] == [READ_ONLY, READ_ONLY]
    await controller.advance_partition_deletions(NOW + 60_000)
    assert _modes(controller, "events")[2:] == [MODE_NONE, MODE_NONE]
    await controller.advance_partition_deletions(NOW + 60_001)
    topic = controller.image.topics_by_name["events"]
    assert sorted(topic.partitions) == [0, 1] and topic.deletion is None
    # Growing again afterwards gives fresh partitions.
    await controller.create_partitions("events", 3, None, validate_only=False)
    assert _partition(controller, "events", 2).mode == READ_WRITE


async def test_no_delay_deletes_at_once(controller: QuorumController) -> None:
    await _create(controller, TopicCreation("events", 3, 1))
    assert await controller.delete_partitions("events", [2], 0, NOW) == MODE_NONE
    await controller.advance_partition_deletions(NOW)
    assert sorted(controller.image.topics_by_name["events"].partitions) == [0, 1]


@pytest.mark.parametrize(("partitions", "delay", "error"), [
    ([0, 1, 2], 0, ErrorCode.INVALID_PARTITIONS),  # to zero
    ([2, 3], 0, ErrorCode.INVALID_PARTITIONS),  # more than exist
    ([1], 0, ErrorCode.INVALID_PARTITIONS),  # not a tail
    ([2, 2], 0, ErrorCode.INVALID_PARTITIONS),
    ([], 0, ErrorCode.INVALID_PARTITIONS),
    ([2], -1, ErrorCode.INVALID_REQUEST),
])
async def test_bad_deletions_change_nothing(controller: QuorumController, partitions: list[int],
                                            delay: int, error: ErrorCode) -> None:
    await _create(controller, TopicCreation("events", 3, 1))
    offset = controller.image.offset
    with pytest.raises(KafkaError) as caught:
        await controller.delete_partitions("events", partitions, delay, NOW)
    assert caught.value.code == error
    assert controller.image.offset == offset


async def test_unknown_internal_and_busy_topics_are_refused(
        controller: QuorumController) -> None:
    await _create(controller, TopicCreation("events", 3, 1),
                  TopicCreation("__consumer_offsets", 3, 1))
    for topic, error in (("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                         ("__consumer_offsets", ErrorCode.INVALID_REQUEST)):
        with pytest.raises(KafkaError) as caught:
            await controller.delete_partitions(topic, [2], 0, NOW)
        assert caught.value.code == error
    await controller.delete_partitions("events", [2], 1000, NOW)
    with pytest.raises(KafkaError) as caught:  # already changing
        await controller.delete_partitions("events", [1, 2], 0, NOW)
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as caught:
        await controller.create_partitions("events", 5, None, validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_PARTITIONS


async def test_a_new_controller_finishes_a_deletion_from_the_log_or_a_snapshot(
        controller: QuorumController, metadata_log, tmp_path: Path) -> None:
    await _create(controller, TopicCreation("events", 3, 1))
    await controller.delete_partitions("events", [2], 1000, NOW)
    path = write_snapshot(tmp_path, controller.image.offset + 1, 1, controller.image, 0)
    assert read_snapshot_image(path).topics_by_name["events"].deletion == (
        controller.image.topics_by_name["events"].deletion)
    successor = _controller(metadata_log)  # replays the same log
    await successor.bootstrap()
    await successor.advance_partition_deletions(NOW + 1000)
    await successor.advance_partition_deletions(NOW + 1001)
    assert sorted(successor.image.topics_by_name["events"].partitions) == [0, 1]
