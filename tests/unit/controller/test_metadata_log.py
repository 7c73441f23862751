"""The __cluster_metadata framing and replay, over a real UnifiedLog in a temp dir."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kafka_ext.controller.image import TOPIC_RESOURCE, MetadataImage
from kafka_ext.controller.metadata_log import (
    build_metadata_batch,
    decode_metadata_record,
    encode_metadata_record,
    replay,
)
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import decode_all_batches
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig

TOPIC_ID = uuid.UUID("6b1a3f5e-0d7c-4c51-9a45-1f0e2d3c4b5a")


def _record(record_type: str, /, **fields: object) -> object:
    return registry()[record_type].cls(**fields)


def _topic_records(name: str = "orders", topic_id: uuid.UUID = TOPIC_ID) -> list[object]:
    return [
        _record("TopicRecord", name=name, topic_id=topic_id),
        _record("PartitionRecord", partition_id=0, topic_id=topic_id, replicas=[1], isr=[1],
                leader=1, leader_epoch=0, partition_epoch=0),
        _record("PartitionRecord", partition_id=1, topic_id=topic_id, replicas=[1], isr=[1],
                leader=1, leader_epoch=0, partition_epoch=0),
        _record("ConfigRecord", resource_type=TOPIC_RESOURCE, resource_name=name,
                name="retention.ms", value="1000"),
    ]


def _open_log(tmp_path: Path) -> UnifiedLog:
    return UnifiedLog(tmp_path / "__cluster_metadata-0", LogConfig())


def _image_of(log: UnifiedLog) -> MetadataImage:
    image = MetadataImage()
    for offset, name, record in replay(log):
        image = image.apply(offset, name, record)
    return image


def test_record_frame_starts_with_frame_version_type_and_version() -> None:
    record = _record("TopicRecord", name="t", topic_id=TOPIC_ID)
    value = encode_metadata_record(record)
    mtype = registry()["TopicRecord"]
    assert mtype.api_key is not None and mtype.versions.highest is not None
    # frame version 1, record type (apiKey), record version: each a one-byte uvarint here
    assert value[:3] == bytes([1, mtype.api_key, mtype.versions.highest])
    assert decode_metadata_record(value) == ("TopicRecord", record)


def test_record_with_unknown_frame_version_is_a_decode_error() -> None:
    value = bytearray(encode_metadata_record(_record("TopicRecord", name="t", topic_id=TOPIC_ID)))
    value[0] = 2
    with pytest.raises(DecodeError):
        decode_metadata_record(bytes(value))


def test_record_with_unknown_type_is_a_decode_error() -> None:
    value = bytearray(encode_metadata_record(_record("TopicRecord", name="t", topic_id=TOPIC_ID)))
    value[1] = 120  # no metadata record has api key 120
    with pytest.raises(DecodeError):
        decode_metadata_record(bytes(value))


def test_record_with_trailing_bytes_is_a_decode_error() -> None:
    value = encode_metadata_record(_record("TopicRecord", name="t", topic_id=TOPIC_ID))
    with pytest.raises(DecodeError):
        decode_metadata_record(value + b"\x00")


def test_records_round_trip_through_one_batch_in_order() -> None:
    records = _topic_records()
    batch = build_metadata_batch(records)
    batches = list(decode_all_batches(batch))
    assert len(batches) == 1
    header, decoded = batches[0]
    assert header.last_offset_delta == len(records) - 1
    assert [r.offset for r in decoded] == list(range(len(records)))
    assert [decode_metadata_record(r.value or b"") for r in decoded] == [
        (type(r).__name__, r) for r in records]


def test_null_config_value_round_trips_as_a_deletion() -> None:
    record = _record("ConfigRecord", resource_type=TOPIC_RESOURCE, resource_name="t",
                     name="retention.ms", value=None)
    assert decode_metadata_record(encode_metadata_record(record))[1].value is None


def test_replay_yields_every_record_with_its_offset_across_batches(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    first = _topic_records()
    second = [_record("RemoveTopicRecord", topic_id=TOPIC_ID),
              _record("FeatureLevelRecord", name="metadata.version", feature_level=22)]
    log.append_as_leader(build_metadata_batch(first), leader_epoch=0)
    log.append_as_leader(build_metadata_batch(second), leader_epoch=0)
    replayed = list(replay(log))
    assert [offset for offset, _, _ in replayed] == list(range(len(first) + len(second)))
    assert [record for _, _, record in replayed] == first + second
    assert [name for _, name, _ in replayed] == [type(r).__name__ for r in first + second]
    log.close()


def test_replay_of_an_empty_log_yields_nothing(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    assert list(replay(log)) == []
    log.close()


def test_replay_applies_into_an_image(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    log.append_as_leader(build_metadata_batch(_topic_records()), leader_epoch=0)
    image = _image_of(log)
    assert image.offset == 3
    topic = image.topics_by_name["orders"]
    assert image.topics_by_id[TOPIC_ID] is topic
    assert sorted(topic.partitions) == [0, 1]
    assert topic.partitions[1].replicas == (1,)
    assert image.topic_configs("orders") == {"retention.ms": "1000"}
    log.close()


def test_replay_after_reopening_the_log_rebuilds_the_same_image(tmp_path: Path) -> None:
    log = _open_log(tmp_path)
    other_id = uuid.UUID(int=7)
    log.append_as_leader(build_metadata_batch(_topic_records()), leader_epoch=0)
    log.append_as_leader(build_metadata_batch(_topic_records("audit", other_id)), leader_epoch=0)
    log.append_as_leader(build_metadata_batch([
        _record("PartitionChangeRecord", partition_id=0, topic_id=other_id, isr=[1], leader=1),
        _record("ConfigRecord", resource_type=TOPIC_RESOURCE, resource_name="orders",
                name="retention.ms", value=None),
        _record("RemoveTopicRecord", topic_id=TOPIC_ID),
    ]), leader_epoch=0)
    before = _image_of(log)
    log.flush()
    log.close()

    reopened = _open_log(tmp_path)
    after = _image_of(reopened)
    assert after == before
    assert sorted(after.topics_by_name) == ["audit"]
    assert after.topics_by_name["audit"].partitions[0].leader_epoch == 1
    assert after.topics_by_name["audit"].partitions[0].partition_epoch == 1
    assert after.offset == reopened.log_end_offset - 1
    reopened.close()
