"""The authorizer's decisions (StandardAuthorizer semantics), ACL validation and filters."""

from __future__ import annotations

import uuid

import pytest

from kafka_ext.security.acl import (
    AclEntry,
    AclFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    validate_acl,
)
from kafka_ext.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(resource_type: int, name: str, operation: int, permission: int = ALLOW,
        principal: str = "User:alice", pattern: int = LITERAL, host: str = "*") -> AclEntry:
    return AclEntry(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*acls: AclEntry, super_users: tuple[str, ...] = (),
               allow_if_no_acl: bool = False) -> Authorizer:
    auth = Authorizer(super_users, allow_if_no_acl)
    auth.update({uuid.uuid4(): a for a in acls})
    return auth


def test_literal_prefixed_and_wildcard_resources() -> None:
    auth = authorizer(acl(TOPIC, "orders", Op.READ), acl(TOPIC, "logs-", Op.WRITE,
                                                         pattern=PREFIXED),
                      acl(GROUP, "*", Op.READ))
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders-2")
    assert auth.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "logs-app")
    assert not auth.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "log")
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, GROUP, "anything")
    assert not auth.authorize(BOB, "10.0.0.1", Op.READ, TOPIC, "orders")


def test_deny_wins_over_allow_and_describe_is_implied() -> None:
    auth = authorizer(acl(TOPIC, "*", Op.ALL, principal="User:*"),
                      acl(TOPIC, "secret", Op.READ, DENY, principal="User:bob"))
    assert auth.authorize(BOB, "h", Op.WRITE, TOPIC, "secret")
    assert not auth.authorize(BOB, "h", Op.READ, TOPIC, "secret")
    assert auth.authorize(ALICE, "h", Op.READ, TOPIC, "secret")
    implied = authorizer(acl(TOPIC, "t", Op.WRITE), acl(TOPIC, "c", Op.ALTER_CONFIGS))
    assert implied.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")
    assert implied.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, TOPIC, "c")
    assert not implied.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    # A DENY of DESCRIBE does not deny READ (only ALL or the operation itself denies).
    only_describe_denied = authorizer(acl(TOPIC, "t", Op.READ),
                                      acl(TOPIC, "t", Op.DESCRIBE, DENY))
    assert only_describe_denied.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert not only_describe_denied.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")


def test_hosts_super_users_and_resources_without_acls() -> None:
    auth = authorizer(acl(TOPIC, "t", Op.READ, host="10.0.0.1"), super_users=("User:admin",))
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "t")
    assert not auth.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "t")
    assert auth.authorize(KafkaPrincipal("User", "admin"), "x", Op.DELETE, CLUSTER,
                          "kafka-cluster")
    assert not auth.authorize(ALICE, "h", Op.READ, TOPIC, "untouched")
    permissive = authorizer(acl(TOPIC, "t", Op.READ), allow_if_no_acl=True)
    assert permissive.authorize(BOB, "h", Op.READ, TOPIC, "untouched")
    assert not permissive.authorize(BOB, "h", Op.READ, TOPIC, "t")  # t has ACLs: none for bob


def test_authorized_operations_bits_and_authorize_any() -> None:
    auth = authorizer(acl(TOPIC, "t", Op.READ), acl(TOPIC, "p-", Op.WRITE, pattern=PREFIXED))
    bits = auth.authorized_operations(ALICE, "h", TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert auth.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not auth.authorize_any(BOB, "h", Op.WRITE, TOPIC)
    denied = authorizer(acl(TOPIC, "p-", Op.WRITE, pattern=PREFIXED),
                        acl(TOPIC, "*", Op.WRITE, DENY))
    assert not denied.authorize_any(ALICE, "h", Op.WRITE, TOPIC)


@pytest.mark.parametrize(("entry", "problem"), [
    (acl(ResourceType.ANY, "t", Op.READ), "Invalid resource type"),
    (acl(TOPIC, "t", Op.READ, pattern=PatternType.MATCH), "LITERAL or PREFIXED"),
    (acl(TOPIC, "t", Op.ANY), "Invalid operation"),
    (acl(TOPIC, "t", Op.READ, AclPermissionType.ANY), "Invalid permission type"),
    (acl(CLUSTER, "other", Op.ALTER), "kafka-cluster"),
    (acl(TOPIC, "t", Op.READ, principal="alice"), "Type:name"),
    (acl(GROUP, "g", Op.WRITE), "not valid for resource type GROUP"),
])
def test_invalid_acls_are_named(entry: AclEntry, problem: str) -> None:
    found = validate_acl(entry)
    assert found is not None and problem in found
    assert validate_acl(acl(TOPIC, "t", Op.READ)) is None


def test_filters_match_exactly_or_as_a_resource_would() -> None:
    literal = acl(TOPIC, "orders", Op.READ)
    prefixed = acl(TOPIC, "ord", Op.WRITE, pattern=PREFIXED)
    wildcard = acl(TOPIC, "*", Op.DESCRIBE)
    everything = [literal, prefixed, wildcard, acl(GROUP, "g", Op.READ)]
    assert [a for a in everything if AclFilter(TOPIC).matches(a)] == [literal, prefixed,
                                                                       wildcard]
    match = AclFilter(TOPIC, "orders", PatternType.MATCH)
    assert [a for a in everything if match.matches(a)] == [literal, prefixed, wildcard]
    exact = AclFilter(TOPIC, "orders", LITERAL, principal="User:alice", operation=Op.READ)
    assert [a for a in everything if exact.matches(a)] == [literal]
