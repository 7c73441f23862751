"""ReplicaManager over real logs and the real controller (no sockets)."""

from __future__ import annotations

from pathlib import Path

from kafka_ext.controller.quorum_controller import TopicCreation
from kafka_ext.protocol.errors import ErrorCode
from tests.unit.coordinator.mini_broker import MiniBroker


async def test_a_log_reopened_at_start_serves_with_its_topic_configs(tmp_path: Path) -> None:
    first = MiniBroker(tmp_path / "data")
    await first.start()
    (created,) = await first.controller.create_topics([TopicCreation(
        "compacted", 1, 1, configs={"cleanup.policy": "compact", "segment.bytes": "1048576"})],
        False)
    assert created.error == ErrorCode.NONE
    first.stop()
    again = MiniBroker(tmp_path / "data")
    await again.start()  # the log is loaded from disk before the metadata names its topic
    config = again.replica_manager.partitions[("compacted", 0)].log.config
    # Otherwise a restart would turn compaction (and __consumer_offsets') into retention.
    assert config.compacts and config.segment_bytes == 1_048_576
    again.stop()
