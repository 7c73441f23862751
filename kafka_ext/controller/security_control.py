"""SCRAM credentials and ACLs as metadata: what AlterUserScramCredentials, CreateAcls and
DeleteAcls turn into, with Kafka's refusals (ScramControlManager, AclControlManager).

Pure functions of the image: each returns the records to commit and the answer per entry; the
QuorumController commits the records in one batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka_ext.controller.image import MetadataImage
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import AclEntry, AclFilter, validate_acl
from kafka_ext.security.sasl import (
    MAX_SCRAM_ITERATIONS,
    MIN_SCRAM_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    credential_from_salted_password,
)

_records = registry()

# Outcome of one entry: (error code, message or None).
Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.NONE, None)


class ScramUpsertion(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class ScramDeletion(NamedTuple):
    user: str
    mechanism: int


def scram_changes(image: MetadataImage, deletions: Sequence[ScramDeletion],
                  upsertions: Sequence[ScramUpsertion]) -> tuple[list[Any], dict[str, Outcome]]:
    """Records and per-user outcomes. A user with any refused entry changes nothing, and a
    user named twice for one mechanism is refused (DUPLICATE_RESOURCE), as in Kafka."""
    outcomes: dict[str, Outcome] = {}
    seen: dict[tuple[str, int], int] = {}
    for key in [(d.user, d.mechanism) for d in deletions] + [(u.user, u.mechanism)
                                                              for u in upsertions]:
        seen[key] = seen.get(key, 0) + 1
    for (user, _), count in seen.items():
        if count > 1:
            outcomes[user] = (ErrorCode.DUPLICATE_RESOURCE,
                              "A user credential cannot be altered twice in the same request")
    records: dict[str, list[Any]] = {}
    for deletion in deletions:
        problem = _check_user(deletion.user, deletion.mechanism)
        if problem is None and SCRAM_MECHANISM_NAMES[deletion.mechanism] not in \
                image.scram_credentials.get(deletion.user, {}):
            problem = (ErrorCode.RESOURCE_NOT_FOUND,
                       "Attempt to delete a user credential that does not exist")
        if _refuse(outcomes, deletion.user, problem):
            continue
        records.setdefault(deletion.user, []).append(_records["RemoveUserScramCredentialRecord"]
                                                     .cls(name=deletion.user,
                                                          mechanism=deletion.mechanism))
    for upsertion in upsertions:
        problem = _check_user(upsertion.user, upsertion.mechanism)
        if problem is None and not MIN_SCRAM_ITERATIONS <= upsertion.iterations <= \
                MAX_SCRAM_ITERATIONS:
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                       f"Iterations {upsertion.iterations} must be between "
                       f"{MIN_SCRAM_ITERATIONS} and {MAX_SCRAM_ITERATIONS}")
        if problem is None and (not upsertion.salt or not upsertion.salted_password):
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not "
                       "be empty")
        if _refuse(outcomes, upsertion.user, problem):
            continue
        mechanism = SCRAM_MECHANISM_NAMES[upsertion.mechanism]
        credential = credential_from_salted_password(mechanism, upsertion.salted_password,
                                                     upsertion.salt, upsertion.iterations)
        records.setdefault(upsertion.user, []).append(_records["UserScramCredentialRecord"].cls(
            name=upsertion.user, mechanism=upsertion.mechanism, salt=credential.salt,
            stored_key=credential.stored_key, server_key=credential.server_key,
            iterations=credential.iterations))
    committed: list[Any] = []
    for user, user_records in records.items():
        if user not in outcomes:
            outcomes[user] = OK
            committed += user_records
    return committed, outcomes


def _check_user(user: str, mechanism: int) -> Outcome | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in SCRAM_MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _refuse(outcomes: dict[str, Outcome], user: str, problem: Outcome | None) -> bool:
    if problem is None:
        return user in outcomes  # refused already for another of its entries
    outcomes.setdefault(user, problem)
    return True


def acl_creation_records(image: MetadataImage, acls: Sequence[AclEntry]
                         ) -> tuple[list[Any], list[Outcome]]:
    """An AccessControlEntryRecord per valid ACL not already there; an outcome per ACL."""
    existing = set(image.acls.values())
    records: list[Any] = []
    outcomes: list[Outcome] = []
    for acl in acls:
        problem = validate_acl(acl)
        if problem is not None:
            outcomes.append((ErrorCode.INVALID_REQUEST, problem))
            continue
        outcomes.append(OK)
        if acl in existing:
            continue  # creating an ACL that exists succeeds and changes nothing
        existing.add(acl)
        records.append(_records["AccessControlEntryRecord"].cls(
            id=uuid.uuid4(), resource_type=acl.resource_type, resource_name=acl.resource_name,
            pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
            operation=acl.operation, permission_type=acl.permission_type))
    return records, outcomes


def acl_deletion_records(image: MetadataImage, filters: Sequence[AclFilter]
                         ) -> tuple[list[Any], list[list[AclEntry]]]:
    """A RemoveAccessControlEntryRecord per ACL some filter matches (once, however many
    filters match it); the ACLs each filter matched."""
    removed: set[uuid.UUID] = set()
    records: list[Any] = []
    matched: list[list[AclEntry]] = []
    for acl_filter in filters:
        hits = [(acl_id, acl) for acl_id, acl in sorted(image.acls.items())
                if acl_filter.matches(acl)]
        matched.append([acl for _, acl in hits])
        for acl_id, _ in hits:
            if acl_id not in removed:
                removed.add(acl_id)
                records.append(_records["RemoveAccessControlEntryRecord"].cls(id=acl_id))
    return records, matched
