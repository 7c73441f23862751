"""Transaction APIs: InitProducerId (22), AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), WriteTxnMarkers (27), DescribeTransactions (65), ListTransactions (66).

Versions: InitProducerId v0-v5 (v3+ carries the KIP-360 producer id and epoch; v5 only allows
TRANSACTION_ABORTABLE, which we never send), AddPartitionsToTxn v0-v5 (v0-v3 the client form,
v4+ the batched broker form with VerifyOnly), AddOffsetsToTxn v0-v4, EndTxn v0-v4 (v5 is
KIP-890 transaction version 2, which bumps the epoch on every EndTxn; we do not finalise
`transaction.version`, so it is not advertised), WriteTxnMarkers v0-v1, DescribeTransactions
v0, ListTransactions v0-v1. PRODUCER_FENCED goes out as INVALID_PRODUCER_EPOCH to versions
older than KIP-588's (InitProducerId < 4, the others < 2), as Kafka does. The logic lives in
the TransactionCoordinator; these handlers map requests and errors.
"""

from __future__ import annotations

from typing import Any

from kafka_ext.coordinator.group.coordinator import GROUP_METADATA_TOPIC
from kafka_ext.coordinator.txn.coordinator import ProducerIdAndEpoch
from kafka_ext.coordinator.txn.markers import write_txn_marker
from kafka_ext.coordinator.txn.metadata import TopicPartition, TransactionState
from kafka_ext.network.connection import CloseConnection
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclOperation, ResourceType
from kafka_ext.server.authorization import (
    any_resource_authorized,
    authorized_topics,
    cluster_authorized,
    group_authorized,
    transactional_id_authorized,
)
from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# The first versions that may carry PRODUCER_FENCED (KIP-588); older ones get
# INVALID_PRODUCER_EPOCH instead.
_PRODUCER_FENCED_SINCE = {"InitProducerId": 4, "AddPartitionsToTxn": 2,
                          "AddOffsetsToTxn": 2, "EndTxn": 2}
# EndTxn v5 belongs to transaction version 2 (KIP-890 part 2); see the module docstring.
MAX_END_TXN_VERSION = 4


def _code(exc: KafkaError, api: str, version: int) -> int:
    if exc.code == ErrorCode.PRODUCER_FENCED and version < _PRODUCER_FENCED_SINCE[api]:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(exc.code)


# -- InitProducerId (22) ---------------------------------------------------------------------

async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """A new producer id (idempotent) or the transactional id's bumped epoch."""
    Response = _reg["InitProducerIdResponse"].cls
    expected: ProducerIdAndEpoch | None = None
    if ctx.api_version >= 3:
        pid, epoch = request.producer_id, request.producer_epoch
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return Response(error_code=int(ErrorCode.INVALID_REQUEST),
                            producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
        if pid != NO_PRODUCER_ID:
            expected = ProducerIdAndEpoch(pid, epoch)
    denied = _init_producer_id_denied(ctx, request.transactional_id)
    if denied is not None:
        return Response(error_code=int(denied), producer_id=NO_PRODUCER_ID,
                        producer_epoch=NO_PRODUCER_EPOCH)
    try:
        result = await ctx.broker.txn_coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected)
    except KafkaError as exc:
        return Response(error_code=_code(exc, "InitProducerId", ctx.api_version),
                        producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
    return Response(error_code=0, producer_id=result.producer_id,
                    producer_epoch=result.producer_epoch)


def _init_producer_id_denied(ctx: RequestContext, transactional_id: str | None
                             ) -> ErrorCode | None:
    """ACLs: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on
    the cluster or WRITE on some topic (KIP-679)."""
    if transactional_id is not None:
        if not transactional_id_authorized(ctx, AclOperation.WRITE, transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None
    if cluster_authorized(ctx, AclOperation.IDEMPOTENT_WRITE) or \
            any_resource_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# -- AddPartitionsToTxn (24) -----------------------------------------------------------------

def _unknown_partitions(ctx: RequestContext, partitions: list[TopicPartition]
                        ) -> set[TopicPartition]:
    topics = ctx.broker.controller.image.topics_by_name
    unknown = set()
    for topic, partition in partitions:
        image = topics.get(topic)
        if image is None or partition not in image.partitions:
            unknown.add((topic, partition))
    return unknown


def _topic_results(Response: Any, results: dict[TopicPartition, int]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(Response.AddPartitionsToTxnPartitionResult(
            partition_index=partition, partition_error_code=code))
    return [Response.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=parts)
            for topic, parts in by_topic.items()]


async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics: list[Any],
                          verify_only: bool) -> dict[TopicPartition, int]:
    """Error code per partition: unknown ones fail alone and the rest are not attempted, as in
    Kafka; otherwise every partition carries the coordinator's answer."""
    partitions = list(dict.fromkeys((t.name, p) for t in topics for p in t.partitions))
    if not transactional_id_authorized(ctx, AclOperation.WRITE, transactional_id):
        return dict.fromkeys(partitions, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    writable = authorized_topics(ctx, AclOperation.WRITE, (t for t, _ in partitions))
    if len(writable) < len({t for t, _ in partitions}):
        return {tp: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] not in writable
                        else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    unknown = _unknown_partitions(ctx, partitions)
    if unknown:
        return {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                        else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    coordinator = ctx.broker.txn_coordinator
    try:
        if verify_only:
            verified = coordinator.verify_partitions(transactional_id, producer_id,
                                                     producer_epoch, partitions)
            return {tp: int(code) for tp, code in verified.items()}
        await coordinator.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                                partitions)
    except KafkaError as exc:
        code = _code(exc, "AddPartitionsToTxn", ctx.api_version)
        return dict.fromkeys(partitions, code)
    return dict.fromkeys(partitions, 0)


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["AddPartitionsToTxnResponse"].cls
    if ctx.api_version <= 3:
        results = await _add_partitions(
            ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
        return Response(results_by_topic_v3_and_below=_topic_results(Response, results))
    by_transaction = []
    for txn in request.transactions:
        results = await _add_partitions(ctx, txn.transactional_id, txn.producer_id,
                                        txn.producer_epoch, txn.topics, txn.verify_only)
        by_transaction.append(Response.AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id,
            topic_results=_topic_results(Response, results)))
    return Response(error_code=0, results_by_transaction=by_transaction)


# -- AddOffsetsToTxn (25) --------------------------------------------------------------------

async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    """Add the group's `__consumer_offsets` partition, so TxnOffsetCommit offsets get a marker."""
    Response = _reg["AddOffsetsToTxnResponse"].cls
    if not transactional_id_authorized(ctx, AclOperation.WRITE, request.transactional_id):
        return Response(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not group_authorized(ctx, AclOperation.READ, request.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        partition = ctx.broker.group_coordinator.partition_for(request.group_id)
        await ctx.broker.txn_coordinator.add_partitions_to_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            [(GROUP_METADATA_TOPIC, partition)])
    except KafkaError as exc:
        return Response(error_code=_code(exc, "AddOffsetsToTxn", ctx.api_version))
    return Response(error_code=0)


# -- EndTxn (26) -----------------------------------------------------------------------------

async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version > MAX_END_TXN_VERSION:
        raise CloseConnection(f"EndTxn v{ctx.api_version} (transaction version 2) is not served")
    Response = _reg["EndTxnResponse"].cls
    if not transactional_id_authorized(ctx, AclOperation.WRITE, request.transactional_id):
        return Response(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        await ctx.broker.txn_coordinator.end_txn(request.transactional_id, request.producer_id,
                                                 request.producer_epoch, request.committed)
    except KafkaError as exc:
        return Response(error_code=_code(exc, "EndTxn", ctx.api_version))
    return Response(error_code=0)


# -- WriteTxnMarkers (27) --------------------------------------------------------------------

async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """Markers from a transaction coordinator (another broker's, in a cluster)."""
    Response = _reg["WriteTxnMarkersResponse"].cls
    markers = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                try:
                    await write_txn_marker(ctx.broker, topic.name, index, marker.producer_id,
                                           marker.producer_epoch, marker.coordinator_epoch,
                                           marker.transaction_result, local_only=True)
                    code = 0
                except KafkaError as exc:
                    code = int(exc.code)
                partitions.append(Response.WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=code))
            topics.append(Response.WritableTxnMarkerTopicResult(name=topic.name,
                                                                partitions=partitions))
        markers.append(Response.WritableTxnMarkerResult(producer_id=marker.producer_id,
                                                        topics=topics))
    return Response(markers=markers)


# -- DescribeTransactions (65) / ListTransactions (66) ---------------------------------------

async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["DescribeTransactionsResponse"].cls
    states = []
    for transactional_id in request.transactional_ids:
        try:
            if not transactional_id_authorized(ctx, AclOperation.DESCRIBE, transactional_id):
                raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            m = ctx.broker.txn_coordinator.describe(transactional_id)
        except KafkaError as exc:
            states.append(Response.TransactionState(
                error_code=int(exc.code), transactional_id=transactional_id,
                transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        describable = authorized_topics(ctx, AclOperation.DESCRIBE, (t for t, _ in m.partitions))
        for topic, partition in sorted(m.partitions):
            if topic in describable:  # Kafka leaves out the topics one may not describe
                by_topic.setdefault(topic, []).append(partition)
        states.append(Response.TransactionState(
            error_code=0, transactional_id=transactional_id,
            transaction_state=m.state.display_name, transaction_timeout_ms=m.txn_timeout_ms,
            transaction_start_time_ms=m.txn_start_timestamp_ms, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            topics=[Response.TopicData(topic=t, partitions=p) for t, p in by_topic.items()]))
    return Response(transaction_states=states)


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["ListTransactionsResponse"].cls
    unknown_filters = []
    states: set[TransactionState] = set()
    for name in request.state_filters:
        state = TransactionState.from_display_name(name)
        if state is None:
            unknown_filters.append(name)
        else:
            states.add(state)
    if request.state_filters and not states:
        # Only unknown states were asked for: nothing can match them.
        return Response(error_code=0, unknown_state_filters=unknown_filters,
                        transaction_states=[])
    duration_ms = request.duration_filter if ctx.api_version >= 1 else -1
    try:
        found = ctx.broker.txn_coordinator.list_transactions(
            frozenset(states) or None, frozenset(request.producer_id_filters) or None,
            duration_ms)
    except KafkaError as exc:
        return Response(error_code=int(exc.code), unknown_state_filters=unknown_filters,
                        transaction_states=[])
    return Response(error_code=0, unknown_state_filters=unknown_filters, transaction_states=[
        Response.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                  transaction_state=m.state.display_name) for m in found
        if transactional_id_authorized(ctx, AclOperation.DESCRIBE, m.transactional_id)])
