"""ACLs and the decision they make, with the semantics of Kafka's StandardAuthorizer.

An ACL allows or denies one principal (or `User:*`), from one host (or `*`), one operation on
resources named literally, by prefix, or by the wildcard literal `*`. A request is allowed when
the principal is a super user, or no DENY ACL matches and an ALLOW ACL for the operation (or one
that implies it) does. A resource no ACL names at all is allowed only with
`allow.everyone.if.no.acl.found`. The set lives in the metadata image, so every node decides
alike; `AclIndex` is built once per set and answers with dictionary lookups.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from kafka_ext.security.principal import KafkaPrincipal


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# An ALLOW of any of these operations also allows DESCRIBE (or DESCRIBE_CONFIGS), as in Kafka.
_IMPLIED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.ALTER_CONFIGS,),
}

# The operations each resource type knows: what KIP-430's authorized-operations fields list.
RESOURCE_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL, as AccessControlEntryRecord carries it."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls's filter: None (or ANY / MATCH) fields match everything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    def matches(self, acl: AclEntry) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            # The ACLs that would apply to the named resource: literal, wildcard or prefix.
            if self.resource_name is not None and not _pattern_applies(acl, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or acl.permission_type == self.permission_type)


def _pattern_applies(acl: AclEntry, name: str) -> bool:
    if acl.pattern_type == PatternType.LITERAL:
        return acl.resource_name in (name, WILDCARD)
    return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)


def validate_acl(acl: AclEntry) -> str | None:
    """Why CreateAcls refuses an ACL (INVALID_REQUEST's message), or None when it is whole."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or \
            acl.resource_type not in ResourceType._value2member_map_:
        return "Invalid resource type"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid pattern type: an ACL is LITERAL or PREFIXED"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or \
            acl.operation not in AclOperation._value2member_map_:
        return "Invalid operation"
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "Invalid permission type"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    try:
        KafkaPrincipal.parse(acl.principal)
    except ValueError as exc:
        return str(exc)
    if not acl.host:
        return "Host should not be empty"
    resource_ops = RESOURCE_OPERATIONS.get(ResourceType(acl.resource_type), ())
    if acl.operation != AclOperation.ALL and AclOperation(acl.operation) not in resource_ops:
        return (f"ACL operation {AclOperation(acl.operation).name} is not valid for resource "
                f"type {ResourceType(acl.resource_type).name}")
    return None


class AclIndex:
    """The ACLs of one image arranged for lookups; immutable, built once per ACL set."""

    def __init__(self, acls: Iterable[AclEntry]) -> None:
        self._literal: dict[tuple[int, str], list[AclEntry]] = {}
        self._prefixed: dict[int, list[AclEntry]] = {}
        for acl in acls:
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                self._literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)

    def of_type(self, resource_type: int) -> list[AclEntry]:
        """Every ACL on resources of one type."""
        found = [acl for (kind, _), acls in self._literal.items() if kind == resource_type
                 for acl in acls]
        return found + self._prefixed.get(resource_type, [])

    def matching(self, resource_type: int, name: str) -> list[AclEntry]:
        """Every ACL that names this resource: literally, as `*`, or by a prefix of it."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        for acl in self._prefixed.get(resource_type, ()):
            if name.startswith(acl.resource_name):
                found.append(acl)
        return found


class Authorizer:
    """Decisions for one broker: super users, the default for unnamed resources, the ACLs."""

    def __init__(self, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: Mapping[uuid.UUID, AclEntry] | None = None
        self._index = AclIndex(())

    def update(self, acls: Mapping[uuid.UUID, AclEntry]) -> None:
        """Take a new image's ACL set (cheap when it is the same set as before)."""
        if acls is not self._acls:
            self._acls = acls
            self._index = AclIndex(acls.values())

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        acls = self._index.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        allowing = (operation, AclOperation.ALL, *_IMPLIED_BY.get(operation, ()))
        allowed = False
        for acl in acls:
            if acl.principal != principal_text and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.operation in allowing:
                allowed = True
        return allowed

    def authorize_any(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether some resource of the type allows `operation`: an ALLOW ACL of the principal
        for it exists and no DENY of it covers every name (a DENY on the literal `*`). With no
        ACL at all for the type, allow.everyone.if.no.acl.found decides."""
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        acls = self._index.of_type(resource_type)
        if not acls:
            return self.allow_if_no_acl
        allowing = (operation, AclOperation.ALL)
        allowed = False
        for acl in acls:
            if acl.principal not in (principal_text, WILDCARD_PRINCIPAL) or \
                    acl.host not in (WILDCARD, host) or acl.operation not in allowing:
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
            else:
                allowed = True
        return allowed

    def authorized_operations(self, principal: KafkaPrincipal, host: str,
                              resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit field: bit N set when operation N is allowed on the resource."""
        bits = 0
        for operation in RESOURCE_OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits
