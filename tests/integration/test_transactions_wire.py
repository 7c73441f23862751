"""The transaction APIs on the wire, against the real broker process, request by request.

What stock clients rarely show: the exact error code a fenced epoch gets at each version
(PRODUCER_FENCED from KIP-588's versions on, INVALID_PRODUCER_EPOCH before), bad timeouts,
unknown partitions, the broker-to-broker forms (AddPartitionsToTxn v4 VerifyOnly,
WriteTxnMarkers) and the advertised version ranges; the broker keeps serving throughout.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import Record, build_batch
from tests.integration.clients import create_topic, new_topic_name

_reg = registry()
TIMEOUT_MS = 60_000


class WireClient:
    """One connection; `call` sends a request and returns the decoded response body."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation_id += 1
        body = _reg.requests[api_key].cls(**fields)
        return round_trip(self.sock, api_key, version, body, self.correlation_id)

    def coordinator_ready(self, transactional_id: str) -> None:
        """FindCoordinator creates __transaction_state, as clients trigger it."""
        response = self.call(ApiKey.FIND_COORDINATOR, 3, key=transactional_id, key_type=1)
        assert response.error_code == 0, response

    def init(self, transactional_id: str | None, version: int = 4,
             timeout_ms: int = TIMEOUT_MS) -> Any:
        fields: dict[str, Any] = {"transactional_id": transactional_id,
                                  "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            fields.update(producer_id=-1, producer_epoch=-1)
        return self.call(ApiKey.INIT_PRODUCER_ID, version, **fields)

    def add_partitions(self, version: int, transactional_id: str, producer_id: int,
                       epoch: int, topic: str, partitions: list[int]) -> dict[int, int]:
        Request = _reg.requests[ApiKey.ADD_PARTITIONS_TO_TXN].cls
        response = self.call(
            ApiKey.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[Request.AddPartitionsToTxnTopic(name=topic,
                                                                 partitions=partitions)])
        return {p.partition_index: p.partition_error_code
                for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}

    def end(self, version: int, transactional_id: str, producer_id: int, epoch: int,
            committed: bool) -> int:
        return int(self.call(ApiKey.END_TXN, version, transactional_id=transactional_id,
                             producer_id=producer_id, producer_epoch=epoch,
                             committed=committed).error_code)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(broker: Any) -> Iterator[WireClient]:
    client = WireClient(broker.bootstrap)
    yield client
    client.close()


def test_api_versions_advertise_transaction_apis_without_transaction_version_2(
        wire: WireClient) -> None:
    response = wire.call(ApiKey.API_VERSIONS, 3, client_software_name="t",
                         client_software_version="0")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.INIT_PRODUCER_ID] == (0, 5)
    assert ranges[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5)
    assert ranges[ApiKey.ADD_OFFSETS_TO_TXN] == (0, 4)
    assert ranges[ApiKey.END_TXN] == (0, 4)  # v5 is KIP-890 transaction version 2
    assert ranges[ApiKey.WRITE_TXN_MARKERS] == (0, 1)
    assert ranges[ApiKey.DESCRIBE_TRANSACTIONS] == (0, 0)
    assert ranges[ApiKey.LIST_TRANSACTIONS] == (0, 1)
    assert not any(f.name == "transaction.version" for f in response.finalized_features)


def test_idempotent_init_producer_id_gives_new_ids_at_epoch_zero(wire: WireClient) -> None:
    first, second = wire.init(None), wire.init(None)
    assert first.error_code == second.error_code == 0
    assert first.producer_epoch == second.producer_epoch == 0
    assert first.producer_id != second.producer_id


def test_transaction_timeout_above_the_maximum_is_refused(wire: WireClient) -> None:
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    response = wire.init(transactional_id, timeout_ms=900_001)
    assert response.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (response.producer_id, response.producer_epoch) == (-1, -1)


def test_fenced_epoch_gets_producer_fenced_or_invalid_producer_epoch_by_version(
        broker: Any, wire: WireClient) -> None:
    topic = new_topic_name("wire-fence")
    create_topic(broker.bootstrap, topic)
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    old = wire.init(transactional_id)
    new = wire.init(transactional_id)
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
    pid, stale = old.producer_id, old.producer_epoch
    assert wire.add_partitions(3, transactional_id, pid, stale, topic, [0]) == {
        0: ErrorCode.PRODUCER_FENCED}
    assert wire.add_partitions(1, transactional_id, pid, stale, topic, [0]) == {
        0: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert wire.end(3, transactional_id, pid, stale, True) == ErrorCode.PRODUCER_FENCED
    assert wire.end(1, transactional_id, pid, stale, True) == ErrorCode.INVALID_PRODUCER_EPOCH
    offsets = wire.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=transactional_id,
                        producer_id=pid, producer_epoch=stale, group_id="g")
    assert offsets.error_code == ErrorCode.PRODUCER_FENCED
    # The current epoch still works on the same connection.
    assert wire.add_partitions(3, transactional_id, pid, new.producer_epoch, topic, [0]) == {
        0: 0}
    assert wire.end(3, transactional_id, pid, new.producer_epoch, True) == 0
    assert wire.end(3, transactional_id, pid, new.producer_epoch, True) == 0  # a retry


def test_end_txn_without_a_transaction_and_unknown_ids_get_kafkas_codes(
        wire: WireClient) -> None:
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    ids = wire.init(transactional_id)
    assert wire.end(3, transactional_id, ids.producer_id, ids.producer_epoch, True) == (
        ErrorCode.INVALID_TXN_STATE)
    assert wire.end(3, transactional_id, ids.producer_id + 1, ids.producer_epoch, True) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)


def test_unknown_partitions_fail_alone_and_the_rest_are_not_attempted(
        broker: Any, wire: WireClient) -> None:
    topic = new_topic_name("wire-unknown")
    create_topic(broker.bootstrap, topic)
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    ids = wire.init(transactional_id)
    assert wire.add_partitions(3, transactional_id, ids.producer_id, ids.producer_epoch, topic,
                               [0, 7]) == {0: ErrorCode.OPERATION_NOT_ATTEMPTED,
                                           7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_broker_form_verifies_membership_and_write_txn_markers_ends_the_transaction(
        broker: Any, wire: WireClient) -> None:
    topic = new_topic_name("wire-verify")
    create_topic(broker.bootstrap, topic, partitions=2)
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    ids = wire.init(transactional_id)
    assert wire.add_partitions(3, transactional_id, ids.producer_id, ids.producer_epoch, topic,
                               [0]) == {0: 0}
    Request = _reg.requests[ApiKey.ADD_PARTITIONS_TO_TXN].cls
    response = wire.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=[
        Request.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=ids.producer_id,
            producer_epoch=ids.producer_epoch, verify_only=True,
            topics=[Request.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])])])
    assert response.error_code == 0
    (result,) = response.results_by_transaction
    assert {p.partition_index: p.partition_error_code for t in result.topic_results
            for p in t.results_by_partition} == {0: 0, 1: ErrorCode.INVALID_TXN_STATE}
    Markers = _reg.requests[ApiKey.WRITE_TXN_MARKERS].cls
    markers = wire.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=[Markers.WritableTxnMarker(
        producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, transaction_result=False,
        coordinator_epoch=0,
        topics=[Markers.WritableTxnMarkerTopic(name=topic, partition_indexes=[0]),
                Markers.WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=[0])])])
    (marker,) = markers.markers
    assert {(t.name, p.partition_index): p.error_code for t in marker.topics
            for p in t.partitions} == {(topic, 0): 0,
                                       ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_clients_cannot_produce_to_internal_topics(broker: Any, wire: WireClient) -> None:
    wire.coordinator_ready(new_topic_name("tx"))  # creates __transaction_state
    topic = new_topic_name("wire-plain")
    create_topic(broker.bootstrap, topic)
    Request = _reg.requests[ApiKey.PRODUCE].cls
    batch = build_batch([Record(0, 1_000, b"k", b"v")])
    response = wire.call(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=TIMEOUT_MS, topic_data=[
        Request.TopicProduceData(name=name, partition_data=[
            Request.PartitionProduceData(index=0, records=batch)])
        for name in ("__transaction_state", topic)])
    answers = {t.name: (p.error_code, p.error_message) for t in response.responses
               for p in t.partition_responses}
    assert answers["__transaction_state"] == (
        ErrorCode.INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic __transaction_state")
    assert answers[topic] == (0, None)  # the other partition is appended as usual


def test_describe_and_list_transactions_report_state_and_errors(
        broker: Any, wire: WireClient) -> None:
    topic = new_topic_name("wire-describe")
    create_topic(broker.bootstrap, topic)
    transactional_id = new_topic_name("tx")
    wire.coordinator_ready(transactional_id)
    ids = wire.init(transactional_id, timeout_ms=12_345)
    wire.add_partitions(3, transactional_id, ids.producer_id, ids.producer_epoch, topic, [0])
    described = wire.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                          transactional_ids=[transactional_id, "never-seen"])
    found, missing = described.transaction_states
    assert (found.error_code, found.transaction_state, found.transaction_timeout_ms,
            found.producer_id, found.producer_epoch) == (0, "Ongoing", 12_345, ids.producer_id,
                                                         ids.producer_epoch)
    assert [(t.topic, list(t.partitions)) for t in found.topics] == [(topic, [0])]
    assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = wire.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=["Ongoing", "Bogus"],
                       producer_id_filters=[ids.producer_id], duration_filter=-1)
    assert listed.error_code == 0 and list(listed.unknown_state_filters) == ["Bogus"]
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        (transactional_id, "Ongoing")]
    young = wire.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[],
                      duration_filter=3_600_000)
    assert transactional_id not in [t.transactional_id for t in young.transaction_states]
