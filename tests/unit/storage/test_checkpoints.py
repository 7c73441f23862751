"""Checkpoint files in Kafka's text formats, written atomically."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kafka_ext.storage.checkpoints import (
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    kafka_uuid_from_str,
    kafka_uuid_to_str,
)


def test_offset_checkpoint_round_trips_in_kafka_format(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert f.read() == {}
    f.write({("a-b", 1): 10, ("a-b", 0): 7})
    assert f.path.read_text() == "0\n2\na-b 0 7\na-b 1 10\n"
    assert f.read() == {("a-b", 0): 7, ("a-b", 1): 10}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_malformed_checkpoint_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\nt 0 5\n")
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    f = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    f.write([(0, 0), (3, 120)])
    assert f.path.read_text() == "0\n2\n0 0\n3 120\n"
    assert f.read() == [(0, 0), (3, 120)]


def test_kafka_uuid_text_is_unpadded_url_safe_base64() -> None:
    value = uuid.UUID(bytes=bytes(range(250, 256)) + bytes(10))
    text = kafka_uuid_to_str(value)
    assert len(text) == 22 and "=" not in text and "+" not in text and "/" not in text
    assert kafka_uuid_from_str(text) == value


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    meta = MetaProperties(node_id=3, cluster_id="abc", directory_id=uuid.uuid4())
    meta.write(tmp_path)
    assert MetaProperties.read(tmp_path) == meta
    assert MetaProperties.read(tmp_path / "missing") is None
