"""Forwarding metadata changes to the active controller (KIP-590, Kafka's ForwardingManager),
and the controller's side of it: Envelope (58) and AllocateProducerIds (67).

A broker that is not the active controller wraps the request it received (or one it builds
for itself: an internal topic, a producer id block, a config repair) in an Envelope and sends
it to the quorum's leader, which runs it through its own handler. The Envelope answer carries,
in our tagged field CommittedOffset, the metadata offset the controller had applied; the
forwarding broker answers only once its own image has reached it, so a client that created a
topic through any broker sees it there at once. A leader change on the way is retried until
the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.quorum_controller import TopicCreation, TopicCreationResult
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.compiler import ZERO_UUID
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.framing import decode_response, encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.security.principal import KafkaPrincipal
from kafka_ext.server.chunks import alter_chunk_assignments_error
from kafka_ext.server.log4j_controller import BROKER_LOGGER_RESOURCE
from kafka_ext.server.partition_count import delete_partitions_error
from kafka_ext.server.reassignment import elect_leaders_error
from kafka_ext.server.security_admin import (
    alter_user_scram_credentials_error,
    create_acls_error,
    delete_acls_error,
)

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker
    from kafka_ext.server.dispatcher import Handler, RequestContext

log = logging.getLogger(__name__)

# Client requests that change metadata, and DescribeQuorum: answered by the active controller
# (as Kafka forwards them).
FORWARDED_APIS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.DESCRIBE_QUORUM,  # only the leader knows every replica's position
    ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,  # what the quorum committed, not a broker's lag
    ApiKey.DELETE_PARTITIONS, ApiKey.ALTER_CHUNK_ASSIGNMENTS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_BROKER,
})
FORWARD_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_reg = registry()
_PRINCIPAL_DATA = _reg["DefaultPrincipalData"]
SHORT = struct.Struct(">h")


def forwardable(handler: Handler) -> Handler:
    """`handler` on the active controller (or for a request it was forwarded); elsewhere the
    request goes to the active controller in an Envelope."""
    async def forward_or_handle(ctx: RequestContext, request: Any) -> Any:
        broker = ctx.broker
        raft = broker.controller.raft
        # DescribeQuorum describes what this node knows when it knows no leader, rather than
        # wait for one: a cut-off node must still say so.
        local_without_leader = (ctx.header.request_api_key == ApiKey.DESCRIBE_QUORUM
                                and raft.leader_id < 0)
        # Logger levels (BROKER_LOGGER) are this broker's own: Kafka never forwards them.
        own_loggers = (ctx.header.request_api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
                       and all(r.resource_type == BROKER_LOGGER_RESOURCE
                               for r in request.resources))
        if ctx.forwarded or raft.is_leader or local_without_leader or own_loggers:
            try:
                return await handler(ctx, request)
            except KafkaError as exc:
                # Leadership moved while the change was on its way to the quorum: the new
                # active controller takes it (the change may have committed anyway, as in
                # Kafka, and then answers TOPIC_ALREADY_EXISTS or the like).
                if ctx.forwarded or exc.code != ErrorCode.NOT_CONTROLLER:
                    raise
        # The request's own timeout bounds the forwarding (CreateTopics, DeleteTopics and
        # CreatePartitions carry one); a change must not land long after its client gave up.
        timeout_ms = getattr(request, "timeout_ms", 0) or FORWARD_TIMEOUT_S * 1000
        try:
            return await broker.forwarding.forward(ctx.header.request_api_key, ctx.api_version,
                                                   request, ctx.client_id,
                                                   min(timeout_ms / 1000, FORWARD_TIMEOUT_S),
                                                   ctx.principal, ctx.client_host)
        except KafkaError as exc:  # no controller in time: every entry says so
            return error_response(ctx.header.request_api_key, request, exc)
    return forward_or_handle


def error_response(api_key: int, request: Any, error: KafkaError) -> Any:
    """The answer giving every entry of a forwarded request `error` (Kafka's
    getErrorResponse), at the top level where the API has one, else on every entry."""
    code, message = int(error.code), error.message or None
    if api_key == ApiKey.DESCRIBE_QUORUM:
        return _reg["DescribeQuorumResponse"].cls(error_code=code, error_message=message,
                                                  topics=[], nodes=[])
    if api_key == ApiKey.ELECT_LEADERS:
        return elect_leaders_error(request, error)
    if api_key == ApiKey.DELETE_PARTITIONS:
        return delete_partitions_error(request, error)
    if api_key == ApiKey.ALTER_CHUNK_ASSIGNMENTS:
        return alter_chunk_assignments_error(request, error)
    if api_key == ApiKey.CREATE_ACLS:
        return create_acls_error(request, error.code, message)
    if api_key == ApiKey.DELETE_ACLS:
        return delete_acls_error(request, error.code, message)
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return alter_user_scram_credentials_error(request, error.code, message)
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        return _reg["AlterPartitionReassignmentsResponse"].cls(
            throttle_time_ms=0, error_code=code, error_message=message, responses=[])
    if api_key == ApiKey.UPDATE_FEATURES:
        cls = _reg["UpdateFeaturesResponse"].cls
        return cls(throttle_time_ms=0, error_code=code, error_message=message, results=[
            cls.UpdatableFeatureResult(feature=u.feature, error_code=code, error_message=message)
            for u in request.feature_updates])
    if api_key == ApiKey.UNREGISTER_BROKER:
        return _reg["UnregisterBrokerResponse"].cls(throttle_time_ms=0, error_code=code,
                                                    error_message=message)
    if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
        return _reg["ListPartitionReassignmentsResponse"].cls(
            throttle_time_ms=0, error_code=code, error_message=message, topics=[])
    if api_key == ApiKey.CREATE_TOPICS:
        cls = _reg["CreateTopicsResponse"].cls
        return cls(throttle_time_ms=0, topics=[cls.CreatableTopicResult(
            name=t.name, topic_id=ZERO_UUID, error_code=code, error_message=message,
            num_partitions=-1, replication_factor=-1, configs=None) for t in request.topics])
    if api_key == ApiKey.DELETE_TOPICS:
        cls = _reg["DeleteTopicsResponse"].cls
        names = ([t.name for t in request.topics] if request.topics
                 else list(request.topic_names or ()))
        return cls(throttle_time_ms=0, responses=[cls.DeletableTopicResult(
            name=n, topic_id=ZERO_UUID, error_code=code, error_message=message) for n in names])
    if api_key == ApiKey.CREATE_PARTITIONS:
        cls = _reg["CreatePartitionsResponse"].cls
        return cls(throttle_time_ms=0, results=[cls.CreatePartitionsTopicResult(
            name=t.name, error_code=code, error_message=message) for t in request.topics])
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        name = ("AlterConfigsResponse" if api_key == ApiKey.ALTER_CONFIGS
                else "IncrementalAlterConfigsResponse")
        cls = _reg[name].cls
        return cls(throttle_time_ms=0, responses=[cls.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources])
    cls = _reg["AlterClientQuotasResponse"].cls
    return cls(throttle_time_ms=0, entries=[cls.EntryData(
        error_code=code, error_message=message,
        entity=[cls.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity]) for entry in request.entries])


def serialize_principal(principal: KafkaPrincipal) -> bytes:
    """An Envelope's RequestPrincipal: DefaultPrincipalData v0 behind its int16 version."""
    data = _PRINCIPAL_DATA.cls(type=principal.principal_type, name=principal.name,
                               token_authenticated=False)
    return SHORT.pack(0) + _PRINCIPAL_DATA.encode(data, 0)


def deserialize_principal(data: bytes | memoryview) -> KafkaPrincipal:
    """The principal of an Envelope; KafkaError(INVALID_REQUEST) when it does not decode."""
    try:
        (version,) = SHORT.unpack_from(data, 0)
        decoded = _PRINCIPAL_DATA.decode_all(memoryview(data)[2:], version)
    except (DecodeError, struct.error) as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"bad Envelope principal: {exc}") from None
    return KafkaPrincipal(decoded.type, decoded.name)


def _host_address(host: str) -> bytes:
    """A client's address as the Envelope carries it (4 or 16 bytes); loopback for our own."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_pton(family, host)
        except OSError:
            continue
    return b"\x7f\x00\x00\x01"


class ForwardingManager:
    """Sends requests to the active controller; owned by the broker's event loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._correlation = 0

    async def forward(self, api_key: int, api_version: int, request: Any,
                      client_id: str | None, timeout_s: float = FORWARD_TIMEOUT_S,
                      principal: KafkaPrincipal | None = None, client_host: str = "") -> Any:
        """The active controller's answer to `request`, once this node has applied what the
        controller had committed when it answered; KafkaError(REQUEST_TIMED_OUT) past the
        deadline. `principal` and `client_host` name the client the request is made for (the
        controller authorizes it as that client); None: this node's own request."""
        broker = self.broker
        raft = broker.controller.raft
        self._correlation += 1
        inner = encode_request(api_key, api_version, self._correlation, client_id, request)[4:]
        envelope = _reg["EnvelopeRequest"].cls(
            request_data=inner,
            request_principal=b"" if principal is None else serialize_principal(principal),
            client_host_address=_host_address(client_host))
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 "the active controller did not answer in time")
            leader = raft.leader_id  # this node itself, when leadership came here meanwhile
            if leader < 0:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                answer = await broker.node_channels.request(leader, ApiKey.ENVELOPE, 0, envelope,
                                                            remaining)
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.debug("forwarding to controller %d failed: %s", leader, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code == ErrorCode.NOT_CONTROLLER:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if answer.error_code:
                raise KafkaError(ErrorCode(answer.error_code), "the controller refused the "
                                 "forwarded request")
            _, body = decode_response(answer.response_data, api_key, api_version)
            try:
                await asyncio.wait_for(raft.wait_applied_offset(answer.committed_offset),
                                       max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the change is committed but "
                                 "this broker has not caught up with it in time") from None
            return body

    # -- what brokers ask the controller for themselves ------------------------------------

    async def create_topics(self, creations: list[TopicCreation]) -> list[TopicCreationResult]:
        """CreateTopics through the active controller (internal topics, auto-creation)."""
        cls = _reg["CreateTopicsRequest"].cls
        request = cls(timeout_ms=int(FORWARD_TIMEOUT_S * 1000), validate_only=False, topics=[
            cls.CreatableTopic(
                name=c.name, num_partitions=c.num_partitions,
                replication_factor=c.replication_factor,
                assignments=[cls.CreatableReplicaAssignment(partition_index=p, broker_ids=r)
                             for p, r in sorted((c.assignments or {}).items())],
                configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in c.configs.items()])
            for c in creations])
        response = await self.forward(ApiKey.CREATE_TOPICS, 7, request, "kafka-ext-broker")
        return [TopicCreationResult(
            t.name, ErrorCode(t.error_code), t.error_message, t.topic_id or ZERO_UUID,
            t.num_partitions, t.replication_factor,
            {c.name: c.value for c in t.configs or () if c.value is not None})
            for t in response.topics]

    async def alter_topic_configs(self, topic: str, changes: list[tuple[str, int, str | None]]
                                  ) -> None:
        """IncrementalAlterConfigs of one topic through the active controller."""
        cls = _reg["IncrementalAlterConfigsRequest"].cls
        request = cls(validate_only=False, resources=[cls.AlterConfigsResource(
            resource_type=2, resource_name=topic, configs=[
                cls.AlterableConfig(name=n, config_operation=op, value=v)
                for n, op, v in changes])])
        response = await self.forward(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request,
                                      "kafka-ext-broker")
        for result in response.responses:
            if result.error_code:
                raise KafkaError(ErrorCode(result.error_code), result.error_message or "")

    async def allocate_producer_ids(self) -> int:
        """A block of PRODUCER_ID_BLOCK_SIZE producer ids from the active controller."""
        request = _reg["AllocateProducerIdsRequest"].cls(broker_id=self.broker.node_id,
                                                         broker_epoch=-1)
        response = await self.forward(ApiKey.ALLOCATE_PRODUCER_IDS, 0, request,
                                      "kafka-ext-broker")
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "producer ids not allocated")
        return int(response.producer_id_start)


# -- the controller's side ------------------------------------------------------------------------

async def handle_envelope(ctx: RequestContext, request: Any) -> Any:
    """Run a forwarded request through this node's own handler, as the active controller;
    NOT_CONTROLLER when leadership has moved (the sender retries with the new leader)."""
    Response = _reg["EnvelopeResponse"].cls
    broker = ctx.broker
    raft = broker.controller.raft
    if not raft.is_leader:
        return Response(response_data=None, error_code=ErrorCode.NOT_CONTROLLER)
    # An Envelope with no principal is the sending node's own request: it runs as that node.
    principal = (deserialize_principal(request.request_principal) if request.request_principal
                 else ctx.principal)
    try:
        client_host = socket.inet_ntop(
            socket.AF_INET6 if len(request.client_host_address) == 16 else socket.AF_INET,
            bytes(request.client_host_address))
    except (OSError, ValueError):
        return Response(response_data=None, error_code=ErrorCode.INVALID_REQUEST)
    try:
        frame = await broker.dispatcher.handle_forwarded(ctx.connection, request.request_data,
                                                         principal, client_host)
    except KafkaError as exc:
        return Response(response_data=None, error_code=exc.code)
    if frame is None:
        return Response(response_data=None, error_code=ErrorCode.INVALID_REQUEST)
    data = b"".join(bytes(part) for part in frame)[4:]  # without the size prefix
    return Response(response_data=data, error_code=0, committed_offset=raft.applied_offset)


async def handle_allocate_producer_ids(ctx: RequestContext, request: Any) -> Any:
    Response = _reg["AllocateProducerIdsResponse"].cls
    try:
        first = await ctx.broker.controller.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE)
    except KafkaError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, producer_id_start=-1,
                        producer_id_len=0)
    return Response(throttle_time_ms=0, error_code=0, producer_id_start=first,
                    producer_id_len=PRODUCER_ID_BLOCK_SIZE)

