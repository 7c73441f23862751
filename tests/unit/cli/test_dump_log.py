"""`kafka-ext dump-log` on files written with our own encoders: kafka-dump-log.sh's lines for
segments, indexes, KRaft snapshots, coordinator records, producer snapshots and transaction
indexes."""

from __future__ import annotations

import json
import struct
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.cli.main import main
from kafka_ext.controller.snapshot import snapshot_bytes, snapshot_path
from kafka_ext.coordinator.group.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from kafka_ext.coordinator.share.records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    ShareSnapshot,
    ShareUpdate,
    share_snapshot_value,
    share_state_key,
    share_update_value,
)
from kafka_ext.coordinator.txn.records import transaction_log_key
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import read_batch_header, update_crc
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    build_end_txn_marker,
)
from kafka_ext.share.persister import DeliveryState, SharePartitionKey, StateBatch
from kafka_ext.storage.checkpoints import kafka_uuid_to_str
from kafka_ext.storage.producer_state import BatchMetadata, ProducerStateEntry, encode_snapshot
from kafka_ext.storage.transaction_index import AbortedTxn, encode_aborted_txn

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
NAME = "00000000000000000000"


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def write_segment(directory: Path) -> tuple[Path, bytes, bytes]:
    """Two batches: an idempotent data batch (offsets 0-1) and a COMMIT marker (offset 2)."""
    data = build_batch([Record(0, 1000, b"k0", b"v0", [("h", b"1"), ("g", None)]),
                        Record(1, 1001, b"k1", None)],
                       producer_id=7, producer_epoch=0, base_sequence=5,
                       partition_leader_epoch=3, is_transactional=True)
    marker = build_end_txn_marker(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0,
                                  coordinator_epoch=4, timestamp_ms=1002, base_offset=2,
                                  partition_leader_epoch=3)
    path = directory / f"{NAME}.log"
    path.write_bytes(data + marker + b"\x00torn")
    return path, data, marker


def test_a_segment_prints_kafkas_batch_and_record_lines(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path, data, marker = write_segment(tmp_path)
    code, lines, err = dump(capsys, "--files", str(path), "--print-data-log")
    first, second = read_batch_header(data), read_batch_header(marker)
    assert code == 0 and err == ""
    assert lines == [
        f"Dumping {path}",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 5 lastSequence: 6 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: 3 isTransactional: true isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 "
        f"size: {len(data)} magic: 2 compresscodec: none crc: {first.crc} isvalid: true",
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 5 headerKeys: [h,g] "
        "key: k0 payload: v0",
        "| offset: 1 CreateTime: 1001 keySize: 2 valueSize: -1 sequence: 6 headerKeys: [] "
        "key: k1",
        "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: 3 isTransactional: true isControl: true "
        f"deleteHorizonMs: OptionalLong.empty position: {len(data)} CreateTime: 1002 "
        f"size: {len(marker)} magic: 2 compresscodec: none crc: {second.crc} isvalid: true",
        "| offset: 2 CreateTime: 1002 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 4",
        f"Found 5 invalid bytes at the end of {NAME}.log",
    ]


def test_shallow_iteration_and_skipped_metadata(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path, _, _ = write_segment(tmp_path)
    _, shallow, _ = dump(capsys, "--files", str(path))
    assert [line.split()[0] for line in shallow] == ["Dumping", "Log", "baseOffset:",
                                                     "baseOffset:", "Found"]
    _, bare, _ = dump(capsys, "--files", str(path), "--print-data-log", "--skip-record-metadata",
                      "--max-bytes", "100000")
    assert [line for line in bare if line.startswith("|")] == ["| key: k0 payload: v0",
                                                                 "| key: k1"]
    assert not any(line.startswith("Found") for line in bare)  # --max-bytes: no tail report


def test_a_corrupted_batch_is_reported_invalid(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, data, _ = write_segment(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(data) - 1] ^= 0xFF  # inside the first batch's CRC range
    path.write_bytes(bytes(raw))
    _, lines, _ = dump(capsys, "--files", str(path))
    assert lines[2].endswith("isvalid: false") and lines[3].endswith("isvalid: true")


def test_index_entries_are_checked_against_the_segment(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    _, data, _ = write_segment(tmp_path)
    index = tmp_path / f"{NAME}.index"
    # The second entry names offset 3 where the batch at that position ends at 2; the zero
    # padding after the entries is a preallocated (active) index's.
    index.write_bytes(OFFSET_ENTRY.pack(1, 0) + OFFSET_ENTRY.pack(3, len(data)) + bytes(80))
    time_index = tmp_path / f"{NAME}.timeindex"
    time_index.write_bytes(TIME_ENTRY.pack(1001, 1) + TIME_ENTRY.pack(1002, 2) + bytes(24))
    code, lines, err = dump(capsys, "--files", f"{index},{time_index}")
    assert code == 0
    assert lines == [f"Dumping {index}", "offset: 1 position: 0",
                     f"offset: 3 position: {len(data)}",
                     f"Dumping {time_index}", "timestamp: 1001 offset: 1",
                     "timestamp: 1002 offset: 2"]
    assert err.splitlines() == [f"Mismatches in :{index.absolute()}",
                                "  Index offset: 3, log offset: 2"]
    _, verified, err = dump(capsys, "--files", str(index), "--verify-index-only")
    assert verified == [f"Dumping {index}"] and "Index offset: 3, log offset: 2" in err
    _, sane, _ = dump(capsys, "--files", f"{index},{time_index}", "--index-sanity-check")
    assert sane == [f"Dumping {index}", f"{index} passed sanity check.",
                    f"Dumping {time_index}", f"{time_index} passed sanity check."]


def test_an_index_with_no_entries_is_empty(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    write_segment(tmp_path)
    index = tmp_path / f"{NAME}.index"
    index.write_bytes(bytes(4096))  # preallocated, nothing written yet
    _, lines, _ = dump(capsys, "--files", str(index))
    assert lines == [f"Dumping {index}", f"{index} is empty."]


def test_a_kraft_snapshot_decodes_with_the_cluster_metadata_decoder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic_id = uuid.uuid4()
    record = registry()["TopicRecord"].cls(name="orders", topic_id=topic_id)
    path = snapshot_path(tmp_path, 10, 3)
    path.write_bytes(snapshot_bytes([record], last_contained_log_time_ms=5,
                                    partition_leader_epoch=3))
    code, lines, _ = dump(capsys, "--files", str(path), "--cluster-metadata-decoder")
    assert code == 0
    assert lines[1] == "Snapshot end offset: 10, epoch: 3"
    records = [line for line in lines if line.startswith("|")]
    assert records[0].endswith('SnapshotHeader {"version":0,"lastContainedLogTimestamp":5}')
    assert records[1].endswith(
        'payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"'
        f'{kafka_uuid_to_str(topic_id)}"}}}}')
    assert records[2].endswith('SnapshotFooter {"version":0}')


def _payload_json(line: str) -> tuple[dict[str, Any], Any]:
    key_text, _, payload_text = line.partition(" key: ")[2].partition(" payload: ")
    return json.loads(key_text), (payload_text if payload_text == "<DELETE>"
                                  else json.loads(payload_text))


def test_offsets_decoder_prints_coordinator_records_as_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subscription_type = registry()["ConsumerProtocolSubscription"]
    subscription = struct.pack(">h", 0) + subscription_type.encode(
        subscription_type.cls(topics=["t"], user_data=None), 0)
    group = GroupMetadataValue(
        protocol_type="consumer", generation=4, protocol="range", leader="m1",
        current_state_timestamp=77,
        members=[MemberMetadata(member_id="m1", group_instance_id=None, client_id="c",
                                client_host="/h", rebalance_timeout=10, session_timeout=20,
                                subscription=subscription, assignment=b"\x01")])
    records = [Record(0, 1, offset_commit_key("g", "t", 2),
                      offset_commit_value(OffsetAndMetadata(5, 1, "meta", 1000))),
               Record(1, 1, group_metadata_key("g"), group_metadata_value(group)),
               Record(2, 1, group_metadata_key("g"), None)]
    path = tmp_path / f"{NAME}.log"
    path.write_bytes(build_batch(records))
    code, lines, _ = dump(capsys, "--files", str(path), "--offsets-decoder")
    assert code == 0
    commit, metadata, tombstone = [_payload_json(line) for line in lines if line.startswith("|")]
    assert commit == ({"type": "1", "data": {"group": "g", "topic": "t", "partition": 2}},
                      {"version": "3", "data": {"offset": 5, "leaderEpoch": 1,
                                                "metadata": "meta", "commitTimestamp": 1000}})
    assert metadata[0] == {"type": "2", "data": {"group": "g"}}
    member = metadata[1]["data"]["members"][0]
    assert member["subscription"] == {"topics": ["t"], "userData": None}  # decoded, v0
    assert member["assignment"] == "AQ=="  # not the embedded protocol: base64 bytes, as Kafka
    assert tombstone == ({"type": "2", "data": {"group": "g"}}, "<DELETE>")


def test_transaction_log_decoder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    value_type = registry()["TransactionLogValue"]
    cls = value_type.cls
    value = struct.pack(">h", 1) + value_type.encode(cls(
        producer_id=3, producer_epoch=1, transaction_timeout_ms=60000, transaction_status=1,
        transaction_partitions=[cls.PartitionsSchema(topic="t", partition_ids=[0, 1])],
        transaction_last_update_timestamp_ms=9, transaction_start_timestamp_ms=8), 1)
    path = tmp_path / f"{NAME}.log"
    path.write_bytes(build_batch([Record(0, 1, transaction_log_key("tx"), value)]))
    _, lines, _ = dump(capsys, "--files", str(path), "--transaction-log-decoder")
    key, payload = _payload_json(lines[-1])
    assert key == {"type": "0", "data": {"transactionalId": "tx"}}
    assert payload == {"version": "1", "data": {
        "producerId": 3, "producerEpoch": 1, "transactionTimeoutMs": 60000,
        "transactionStatus": 1, "transactionPartitions": [{"topic": "t", "partitionIds": [0, 1]}],
        "transactionLastUpdateTimestampMs": 9, "transactionStartTimestampMs": 8}}


def test_share_group_state_decoder_prints_snapshots_updates_and_tombstones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic_id = uuid.UUID(int=0x1234)
    key = SharePartitionKey("g", topic_id, 3)
    snapshot = ShareSnapshot(snapshot_epoch=0, state_epoch=1, leader_epoch=2, start_offset=10,
                             delivery_complete_count=3, create_timestamp_ms=5,
                             write_timestamp_ms=6,
                             batches=(StateBatch(10, 12, DeliveryState.AVAILABLE, 1),))
    update = ShareUpdate(snapshot_epoch=0, leader_epoch=2, start_offset=13,
                         delivery_complete_count=2,
                         batches=(StateBatch(13, 14, DeliveryState.ACKNOWLEDGED, 1),))
    records = [Record(0, 1, share_state_key(SHARE_SNAPSHOT_RECORD_TYPE, key),
                      share_snapshot_value(snapshot)),
               Record(1, 1, share_state_key(SHARE_UPDATE_RECORD_TYPE, key),
                      share_update_value(update)),
               Record(2, 1, share_state_key(SHARE_SNAPSHOT_RECORD_TYPE, key), None),
               Record(3, 1, struct.pack(">h", 7) + b"?", b"")]
    path = tmp_path / f"{NAME}.log"
    path.write_bytes(build_batch(records))
    code, lines, _ = dump(capsys, "--files", str(path), "--share-group-state-decoder")
    assert code == 0
    record_lines = [line for line in lines if line.startswith("|")]
    key_json = {"groupId": "g", "topicId": kafka_uuid_to_str(topic_id), "partition": 3}
    assert _payload_json(record_lines[0]) == ({"type": "0", "data": key_json}, {
        "version": "0", "data": {
            "snapshotEpoch": 0, "stateEpoch": 1, "leaderEpoch": 2, "startOffset": 10,
            "deliveryCompleteCount": 3, "createTimestamp": 5, "writeTimestamp": 6,
            "stateBatches": [
                {"firstOffset": 10, "lastOffset": 12, "deliveryState": 0,
                 "deliveryCount": 1}]}})
    assert _payload_json(record_lines[1]) == ({"type": "1", "data": key_json}, {
        "version": "0", "data": {
            "snapshotEpoch": 0, "leaderEpoch": 2, "startOffset": 13,
            "deliveryCompleteCount": 2, "stateBatches": [
                {"firstOffset": 13, "lastOffset": 14, "deliveryState": 2,
                 "deliveryCount": 1}]}})
    assert _payload_json(record_lines[2]) == ({"type": "0", "data": key_json}, "<DELETE>")
    assert record_lines[3].endswith(" key: Unknown record type 7 at offset 3, skipping.")


def test_producer_snapshot_and_transaction_index(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = tmp_path / f"{NAME}.snapshot"
    snapshot.write_bytes(encode_snapshot([ProducerStateEntry(
        producer_id=7, producer_epoch=1, coordinator_epoch=2, last_timestamp_ms=99,
        current_txn_first_offset=4, batches=deque([BatchMetadata(9, 20, 3, 50)]))]))
    txn_index = tmp_path / f"{NAME}.txnindex"
    txn_index.write_bytes(encode_aborted_txn(AbortedTxn(7, 4, 9, 10)))
    code, lines, err = dump(capsys, "--files", f"{snapshot},{txn_index},{tmp_path / 'x.foo'}")
    assert code == 0
    assert lines == [
        f"Dumping {snapshot}",
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: 2 currentTxnFirstOffset: "
        "OptionalLong[4] lastTimestamp: 99 firstSequence: 6 lastSequence: 9 lastOffset: 20 "
        "offsetDelta: 3 timestamp: 99",  # the last batch is stored with the last timestamp
        f"Dumping {txn_index}",
        "version: 0 producerId: 7 firstOffset: 4 lastOffset: 9 lastStableOffset: 10",
        f"Dumping {tmp_path / 'x.foo'}",
    ]
    assert err == f"Ignoring unknown file {tmp_path / 'x.foo'}\n"


def test_a_missing_file_fails_with_exit_code_1(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dump(capsys, "--files", str(tmp_path / f"{NAME}.log"))
    assert code == 1 and "No such file or directory" in err


def test_offset_gaps_are_reported_after_the_dump(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{NAME}.log"  # a compacted batch: offsets 2 to 4 are gone
    path.write_bytes(build_batch([Record(0, 1, b"a", b"1"), Record(1, 1, b"b", b"2"),
                                  Record(5, 1, b"a", b"3")]))
    code, lines, err = dump(capsys, "--files", str(path), "--deep-iteration")
    assert code == 0 and lines[2].startswith("baseOffset: 0 lastOffset: 5 count: 3 ")
    assert [line.split(" CreateTime")[0] for line in lines[3:]] == [
        "| offset: 0", "| offset: 1", "| offset: 5"]
    assert err.splitlines() == [f"Non-consecutive offsets in {path.absolute()}",
                                "  1 is followed by 5"]


def test_records_that_do_not_decode_stop_the_dump(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    batch = bytearray(build_batch([Record(0, 1, b"k", b"v"), Record(1, 1, b"k", b"v")]))
    batch[-3] = 0x7F  # the last record's value length now overruns it; the CRC is rewritten
    update_crc(batch, 0)
    path = tmp_path / f"{NAME}.log"
    path.write_bytes(bytes(batch))
    code, lines, err = dump(capsys, "--files", str(path), "--deep-iteration")
    assert code == 1 and lines[-1].endswith("isvalid: true")
    assert err.startswith(f"cannot decode the records of the batch at position 0 of {path}")
