"""Authorization checks as request handlers make them (Kafka's AuthHelper).

With no authorizer configured (`authorizer.class.name` empty) every check passes at the cost of
one attribute read. Otherwise the request's principal and client host are checked against the
ACLs of this node's metadata image (security/acl.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kafka_ext.security.acl import CLUSTER_NAME, RESOURCE_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from kafka_ext.server.dispatcher import RequestContext

# KIP-430: the authorized-operations field when it was not asked for.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def authorized(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
               name: str) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.client_host, operation,
                                                      resource_type, name)


def cluster_authorized(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorized(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def topic_authorized(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return authorized(ctx, operation, ResourceType.TOPIC, topic)


def group_authorized(ctx: RequestContext, operation: AclOperation, group: str) -> bool:
    return authorized(ctx, operation, ResourceType.GROUP, group)


def transactional_id_authorized(ctx: RequestContext, operation: AclOperation,
                                transactional_id: str) -> bool:
    return authorized(ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


def any_resource_authorized(ctx: RequestContext, operation: AclOperation,
                            resource_type: ResourceType) -> bool:
    """Whether the principal may apply `operation` to some resource of the type (Kafka's
    authorizeByResourceType, as KIP-679's idempotent producers are checked)."""
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize_any(ctx.principal, ctx.client_host,
                                                          operation, resource_type)


def authorized_topics(ctx: RequestContext, operation: AclOperation,
                      topics: Iterable[str]) -> set[str]:
    """The topics of `topics` the request may apply `operation` to."""
    names = set(topics)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return names
    return {t for t in names if authorizer.authorize(ctx.principal, ctx.client_host, operation,
                                                     ResourceType.TOPIC, t)}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """KIP-430's bit field for a resource: every operation of its type the principal may use."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        # Kafka with no authorizer reports every operation of the resource type as allowed.
        return sum(1 << op for op in RESOURCE_OPERATIONS[resource_type])
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)
