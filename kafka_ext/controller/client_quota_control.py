"""Client quotas as metadata: validate AlterClientQuotas, match DescribeClientQuotas filters.

Mirrors Kafka's ClientQuotaControlManager (validation, one ClientQuotaRecord per changed key)
and ClientQuotasImage.describe (exact / default / any-name filter components, strict or not).
Pure functions of the quotas in the image: the QuorumController commits what they return.
Entities are canonical tuples of (entity type, name) sorted by type; a None name is the
entity type's default (`--entity-default`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka_ext.protocol.errors import ErrorCode, KafkaError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# The quota keys of user / client-id entities, and whether Kafka defines them as integral
# (LONG: the byte rates) or not (DOUBLE).
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
_LONG_MAX = float((1 << 63) - 1)

# DescribeClientQuotas match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

QuotaEntity = tuple[tuple[str, str | None], ...]
ClientQuotas = Mapping[QuotaEntity, Mapping[str, float]]


def quota_entity(pairs: Sequence[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical entity of (type, name) pairs; a type listed twice keeps its last name,
    as Kafka's request parsing does."""
    return tuple(sorted(dict(pairs).items()))


@dataclass(slots=True, frozen=True)
class QuotaAlteration:
    """One AlterClientQuotas entry: ops are (key, value), value None meaning remove."""

    entity: QuotaEntity
    ops: tuple[tuple[str, float | None], ...]


@dataclass(slots=True, frozen=True)
class QuotaChange:
    """One ClientQuotaRecord to write: set `key` to `value`, or remove it (value None)."""

    entity: QuotaEntity
    key: str
    value: float | None


def alter_client_quotas(current: ClientQuotas, alterations: Sequence[QuotaAlteration]
                        ) -> tuple[list[QuotaChange], dict[QuotaEntity, KafkaError | None]]:
    """The records and the per-entity outcome of a batch of alterations; changes nothing.

    As Kafka: an entity with any bad op gets INVALID_REQUEST and none of its ops are written;
    the other entities go ahead; an entity listed twice is refused the second time; only keys
    whose value changes produce a record.
    """
    changes: list[QuotaChange] = []
    results: dict[QuotaEntity, KafkaError | None] = {}
    for alteration in alterations:
        entity = alteration.entity
        wanted: dict[str, float | None] = {}
        duplicate_key = None
        for key, value in alteration.ops:
            if key in wanted:
                duplicate_key = key
            wanted[key] = value
        if duplicate_key is not None:
            results[entity] = KafkaError(
                ErrorCode.INVALID_REQUEST, f"Duplicate quota key {duplicate_key} not updating "
                f"quota for this entity {_describe(entity)}")
        if entity in results:
            results[entity] = KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"Ignoring duplicate entity {_describe(entity)}")
            continue
        try:
            changes.extend(_entity_changes(entity, wanted, current.get(entity, {})))
        except KafkaError as exc:
            results[entity] = exc
            continue
        results[entity] = None
    return changes, results


def _entity_changes(entity: QuotaEntity, wanted: Mapping[str, float | None],
                    current: Mapping[str, float]) -> list[QuotaChange]:
    check_entity(entity)
    changes = []
    for key, value in wanted.items():
        if value is None:
            if key in current:
                changes.append(QuotaChange(entity, key, None))
            continue
        check_quota_value(key, value)
        if current.get(key) != value:
            changes.append(QuotaChange(entity, key, value))
    return changes


def check_entity(entity: QuotaEntity) -> None:
    """Kafka's entity rules: user and/or client-id, names not empty (None is the default)."""
    if not entity:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    for entity_type, name in entity:
        if entity_type == IP:
            # KIP-612 connection-rate quotas are not enforced here: refuse rather than store a
            # quota that would do nothing (docs/quotas.md).
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "ip quota entities (connection_creation_rate) are not supported")
        if entity_type not in (USER, CLIENT_ID):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")


def check_quota_value(key: str, value: float) -> None:
    """Kafka's value rules: a known key, greater than 0, integral for the byte rates."""
    integral = QUOTA_KEYS.get(key)
    if integral is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not math.isfinite(value):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be a finite number")
    if value <= 0.0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if integral:
        if value > _LONG_MAX:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


@dataclass(slots=True, frozen=True)
class FilterComponent:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: int
    match: str | None


def describe_client_quotas(quotas: ClientQuotas, components: Sequence[FilterComponent],
                           strict: bool) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities matching the filter with their quotas; raises KafkaError as Kafka answers.

    An exact component matches that name, a default component the default entity, a
    specified component any name or the default; strict drops entities with other types.
    """
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} cannot "
                             "appear more than once in the filter.")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            # Kafka's answer for a type it does not know, odd as the code is.
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(c.entity_type)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
    named = exact.keys() | specified
    if IP in named and named & {USER, CLIENT_ID}:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component "
                         "combination. IP filter component should not be used with user or "
                         "clientId filter component.")
    out = []
    for entity, values in quotas.items():
        names = dict(entity)
        if strict and len(names) != len(named):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and specified <= names.keys():
            out.append((entity, dict(values)))
    return out


def _describe(entity: QuotaEntity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
