"""Raw bytes of the share coordinator's APIs (83-87, each version) against kio, and of the
`__share_group_state` records against bytes written out by hand from Kafka's schemas."""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any

import pytest
from kio.schema.delete_share_group_state.v0 import request as kio_delete_req
from kio.schema.delete_share_group_state.v0 import response as kio_delete_resp
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.initialize_share_group_state.v0 import request as kio_init_req
from kio.schema.initialize_share_group_state.v0 import response as kio_init_resp
from kio.schema.read_share_group_state.v0 import request as kio_read_req
from kio.schema.read_share_group_state.v0 import response as kio_read_resp
from kio.schema.read_share_group_state_summary.v0 import request as kio_summary_req_v0
from kio.schema.read_share_group_state_summary.v0 import response as kio_summary_resp_v0
from kio.schema.read_share_group_state_summary.v1 import request as kio_summary_req_v1
from kio.schema.read_share_group_state_summary.v1 import response as kio_summary_resp_v1
from kio.schema.write_share_group_state.v0 import request as kio_write_req_v0
from kio.schema.write_share_group_state.v0 import response as kio_write_resp_v0
from kio.schema.write_share_group_state.v1 import request as kio_write_req_v1
from kio.schema.write_share_group_state.v1 import response as kio_write_resp_v1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from kafka_ext.coordinator.share.records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    ShareSnapshot,
    ShareUpdate,
    read_share_snapshot_value,
    read_share_state_key,
    read_share_update_value,
    share_snapshot_value,
    share_state_key,
    share_update_value,
)
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry
from kafka_ext.share.persister import DeliveryState, SharePartitionKey, StateBatch

TOPIC = uuid.UUID("5f0c3c4e-8d1a-4b5e-9f33-0d2c1a7b6e90")
_reg = registry()


def _kio_bytes(obj: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


def _check(name: str, version: int, ours: Any, theirs: Any) -> None:
    """Same bytes both ways, and each side reads the other's."""
    mtype = _reg[name]
    data = mtype.encode(ours, version)
    assert data == _kio_bytes(theirs)
    decoded, size = entity_reader(type(theirs))(data, 0)
    assert size == len(data) and decoded == theirs
    assert mtype.encode(mtype.decode_all(data, version), version) == data


# -- requests ---------------------------------------------------------------------------------

def test_initialize_v0_request_and_response_bytes_match_kio() -> None:
    req = _reg["InitializeShareGroupStateRequest"].cls
    _check("InitializeShareGroupStateRequest", 0,
           req(group_id="g", topics=[req.InitializeStateData(topic_id=TOPIC, partitions=[
               req.PartitionData(partition=3, state_epoch=2, start_offset=-1)])]),
           kio_init_req.InitializeShareGroupStateRequest(group_id="g", topics=(
               kio_init_req.InitializeStateData(topic_id=TOPIC, partitions=(
                   kio_init_req.PartitionData(partition=i32(3), state_epoch=i32(2),
                                              start_offset=i64(-1)),)),)))
    resp = _reg["InitializeShareGroupStateResponse"].cls
    _check("InitializeShareGroupStateResponse", 0,
           resp(results=[resp.InitializeStateResult(topic_id=TOPIC, partitions=[
               resp.PartitionResult(partition=3, error_code=124, error_message="fenced")])]),
           kio_init_resp.InitializeShareGroupStateResponse(results=(
               kio_init_resp.InitializeStateResult(topic_id=TOPIC, partitions=(
                   kio_init_resp.PartitionResult(partition=i32(3),
                                                 error_code=KioErrorCode(124),
                                                 error_message="fenced"),)),)))


def test_read_v0_request_and_response_bytes_match_kio() -> None:
    req = _reg["ReadShareGroupStateRequest"].cls
    _check("ReadShareGroupStateRequest", 0,
           req(group_id="g", topics=[req.ReadStateData(topic_id=TOPIC, partitions=[
               req.PartitionData(partition=0, leader_epoch=7)])]),
           kio_read_req.ReadShareGroupStateRequest(group_id="g", topics=(
               kio_read_req.ReadStateData(topic_id=TOPIC, partitions=(
                   kio_read_req.PartitionData(partition=i32(0), leader_epoch=i32(7)),)),)))
    resp = _reg["ReadShareGroupStateResponse"].cls
    _check("ReadShareGroupStateResponse", 0,
           resp(results=[resp.ReadStateResult(topic_id=TOPIC, partitions=[resp.PartitionResult(
               partition=0, error_code=0, error_message=None, state_epoch=1, start_offset=10,
               state_batches=[resp.StateBatch(first_offset=10, last_offset=19, delivery_state=2,
                                              delivery_count=3)])])]),
           kio_read_resp.ReadShareGroupStateResponse(results=(
               kio_read_resp.ReadStateResult(topic_id=TOPIC, partitions=(
                   kio_read_resp.PartitionResult(
                       partition=i32(0), error_code=KioErrorCode(0), error_message=None,
                       state_epoch=i32(1), start_offset=i64(10), state_batches=(
                           kio_read_resp.StateBatch(first_offset=i64(10), last_offset=i64(19),
                                                    delivery_state=i8(2),
                                                    delivery_count=i16(3)),)),)),)))


@pytest.mark.parametrize("version", [0, 1])
def test_write_request_and_response_bytes_match_kio(version: int) -> None:
    kreq, kresp = ((kio_write_req_v0, kio_write_resp_v0) if version == 0
                   else (kio_write_req_v1, kio_write_resp_v1))
    req = _reg["WriteShareGroupStateRequest"].cls
    count: dict[str, Any] = {} if version == 0 else {"delivery_complete_count": 4}
    kcount: dict[str, Any] = {} if version == 0 else {"delivery_complete_count": i32(4)}
    _check("WriteShareGroupStateRequest", version,
           req(group_id="g", topics=[req.WriteStateData(topic_id=TOPIC, partitions=[
               req.PartitionData(partition=1, state_epoch=0, leader_epoch=2, start_offset=5,
                                 state_batches=[req.StateBatch(first_offset=5, last_offset=8,
                                                               delivery_state=0,
                                                               delivery_count=1)],
                                 **count)])]),
           kreq.WriteShareGroupStateRequest(group_id="g", topics=(kreq.WriteStateData(
               topic_id=TOPIC, partitions=(kreq.PartitionData(
                   partition=i32(1), state_epoch=i32(0), leader_epoch=i32(2),
                   start_offset=i64(5), state_batches=(kreq.StateBatch(
                       first_offset=i64(5), last_offset=i64(8), delivery_state=i8(0),
                       delivery_count=i16(1)),), **kcount),)),)))
    resp = _reg["WriteShareGroupStateResponse"].cls
    _check("WriteShareGroupStateResponse", version,
           resp(results=[resp.WriteStateResult(topic_id=TOPIC, partitions=[
               resp.PartitionResult(partition=1, error_code=0)])]),
           kresp.WriteShareGroupStateResponse(results=(kresp.WriteStateResult(
               topic_id=TOPIC, partitions=(kresp.PartitionResult(
                   partition=i32(1), error_code=KioErrorCode(0), error_message=None),)),)))


def test_delete_v0_request_and_response_bytes_match_kio() -> None:
    req = _reg["DeleteShareGroupStateRequest"].cls
    _check("DeleteShareGroupStateRequest", 0,
           req(group_id="g", topics=[req.DeleteStateData(topic_id=TOPIC, partitions=[
               req.PartitionData(partition=2)])]),
           kio_delete_req.DeleteShareGroupStateRequest(group_id="g", topics=(
               kio_delete_req.DeleteStateData(topic_id=TOPIC, partitions=(
                   kio_delete_req.PartitionData(partition=i32(2)),)),)))
    resp = _reg["DeleteShareGroupStateResponse"].cls
    _check("DeleteShareGroupStateResponse", 0,
           resp(results=[resp.DeleteStateResult(topic_id=TOPIC, partitions=[
               resp.PartitionResult(partition=2, error_code=3, error_message="unknown")])]),
           kio_delete_resp.DeleteShareGroupStateResponse(results=(
               kio_delete_resp.DeleteStateResult(topic_id=TOPIC, partitions=(
                   kio_delete_resp.PartitionResult(partition=i32(2),
                                                   error_code=KioErrorCode(3),
                                                   error_message="unknown"),)),)))


@pytest.mark.parametrize("version", [0, 1])
def test_read_summary_request_and_response_bytes_match_kio(version: int) -> None:
    kreq, kresp = ((kio_summary_req_v0, kio_summary_resp_v0) if version == 0
                   else (kio_summary_req_v1, kio_summary_resp_v1))
    req = _reg["ReadShareGroupStateSummaryRequest"].cls
    _check("ReadShareGroupStateSummaryRequest", version,
           req(group_id="g", topics=[req.ReadStateSummaryData(topic_id=TOPIC, partitions=[
               req.PartitionData(partition=0, leader_epoch=-1)])]),
           kreq.ReadShareGroupStateSummaryRequest(group_id="g", topics=(
               kreq.ReadStateSummaryData(topic_id=TOPIC, partitions=(
                   kreq.PartitionData(partition=i32(0), leader_epoch=i32(-1)),)),)))
    resp = _reg["ReadShareGroupStateSummaryResponse"].cls
    count: dict[str, Any] = {} if version == 0 else {"delivery_complete_count": 9}
    kcount: dict[str, Any] = {} if version == 0 else {"delivery_complete_count": i32(9)}
    _check("ReadShareGroupStateSummaryResponse", version,
           resp(results=[resp.ReadStateSummaryResult(topic_id=TOPIC, partitions=[
               resp.PartitionResult(partition=0, error_code=0, state_epoch=1, leader_epoch=3,
                                    start_offset=42, **count)])]),
           kresp.ReadShareGroupStateSummaryResponse(results=(kresp.ReadStateSummaryResult(
               topic_id=TOPIC, partitions=(kresp.PartitionResult(
                   partition=i32(0), error_code=KioErrorCode(0), error_message=None,
                   state_epoch=i32(1), leader_epoch=i32(3), start_offset=i64(42),
                   **kcount),)),)))


# -- __share_group_state records --------------------------------------------------------------

KEY = SharePartitionKey("grp", TOPIC, 3)
_KEY_BODY = struct.pack(">h", 3) + b"grp" + TOPIC.bytes + struct.pack(">i", 3)


def test_snapshot_and_update_keys_differ_only_in_their_record_type() -> None:
    assert share_state_key(SHARE_SNAPSHOT_RECORD_TYPE, KEY) == b"\x00\x00" + _KEY_BODY
    assert share_state_key(SHARE_UPDATE_RECORD_TYPE, KEY) == b"\x00\x01" + _KEY_BODY
    for record_type in (SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE):
        assert read_share_state_key(share_state_key(record_type, KEY)) == (record_type, KEY)


def test_an_unknown_record_type_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        read_share_state_key(b"\x00\x05" + _KEY_BODY)
    with pytest.raises(DecodeError):
        read_share_state_key(b"\x00")


def _batch_bytes(first: int, last: int, state: int, count: int) -> bytes:
    return struct.pack(">qqbh", first, last, state, count) + b"\x00"  # no tagged fields


def test_share_snapshot_value_bytes() -> None:
    snapshot = ShareSnapshot(snapshot_epoch=2, state_epoch=1, leader_epoch=5, start_offset=100,
                             delivery_complete_count=-1, create_timestamp_ms=1000,
                             write_timestamp_ms=2000,
                             batches=(StateBatch(100, 109, DeliveryState.ACKNOWLEDGED, 1),))
    expected = (struct.pack(">hiiiqqq", 0, 2, 1, 5, 100, 1000, 2000)
                + b"\x02" + _batch_bytes(100, 109, 2, 1)  # compact array of one
                + b"\x00")  # DeliveryCompleteCount at its default -1: no tagged field
    assert share_snapshot_value(snapshot) == expected
    assert read_share_snapshot_value(expected) == snapshot
    counted = ShareSnapshot(2, 1, 5, 100, 7, 1000, 2000, ())
    data = share_snapshot_value(counted)
    assert data.endswith(b"\x01" + b"\x00\x04" + struct.pack(">i", 7))  # tag 0, 4 bytes
    assert read_share_snapshot_value(data) == counted


def test_share_update_value_bytes() -> None:
    update = ShareUpdate(snapshot_epoch=2, leader_epoch=-1, start_offset=-1,
                         delivery_complete_count=3,
                         batches=(StateBatch(7, 7, DeliveryState.ARCHIVED, 5),))
    expected = (struct.pack(">hiiq", 0, 2, -1, -1) + b"\x02" + _batch_bytes(7, 7, 4, 5)
                + b"\x01\x00\x04" + struct.pack(">i", 3))
    assert share_update_value(update) == expected
    assert read_share_update_value(expected) == update


def test_an_unknown_value_version_or_delivery_state_is_a_decode_error() -> None:
    good = share_update_value(ShareUpdate(0, 0, 0, -1, (StateBatch(0, 0,
                                                                     DeliveryState.AVAILABLE, 1),)))
    with pytest.raises(DecodeError):
        read_share_update_value(b"\x00\x01" + good[2:])
    bad_state = good.replace(struct.pack(">qqb", 0, 0, 0), struct.pack(">qqb", 0, 0, 3))
    with pytest.raises(DecodeError):
        read_share_update_value(bad_state)
