"""Our codec against kio (an independent implementation): same values, same bytes, both ways.

Values are drawn from our schemas, passed through kio's types (which narrow a few fields: error
codes must be known to kio, timestamps must fit a datetime) and converted back; that narrowed
value is the reference for both libraries. Our extension fields (tags >= 10000) stay default.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import typing
import uuid
from functools import cache
from pkgutil import resolve_name
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import is_optional
from kio.static.constants import EntityType
from kio.static.primitive import Records, f64

from kafka_ext.protocol.compiler import field_default
from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.schema import FieldSpec, StructSpec, snake_case
from tests.unit.protocol.strategies import (
    all_message_versions,
    as_plain,
    is_extension_field,
    message_values,
)

KIO_SETTINGS = settings(
    max_examples=15, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Kafka renamed these fields (KIP-853) without changing the wire format; kio has the new names.
KNOWN_RENAMES = {
    "candidate_epoch": "replica_epoch",
    "candidate_id": "replica_id",
    "candidate_directory_id": "replica_directory_id",
}
# kio's own encodings of int16/int32/int64 fields: the wire type each stands for.
KIO_WIRE_TYPES = {
    "error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
ONE_MS = datetime.timedelta(milliseconds=1)
KIO_ERROR_CODES = sorted(KioErrorCode, key=int)
KIO_ERROR_VALUES = {int(code) for code in KIO_ERROR_CODES}
# Bounds that keep kio's float-based timedelta/datetime conversions exact.
TIMEDELTA_I64_LIMIT_MS = 2**48
DATETIME_LIMIT_MS = 2**40  # year 2004: kio reads datetimes through float seconds, exact below this


def _kio_entity_type(mtype: MessageType) -> tuple[str, EntityType]:
    name, kind = mtype.name, mtype.spec.type
    if kind == "request":
        return snake_case(name.removesuffix("Request")), EntityType.request
    if kind == "response":
        return snake_case(name.removesuffix("Response")), EntityType.response
    if kind == "header":
        return snake_case(name), EntityType.header
    return snake_case(name), EntityType.data


@cache
def kio_class(name: str, version: int) -> type | None:
    """kio's class for our message at `version`, or None when kio does not have it."""
    mtype = registry()[name]
    kio_name, entity_type = _kio_entity_type(mtype)
    by_type: Any = schema_name_map.get(kio_name, {}).get(version, {})
    path = by_type.get(entity_type)
    return None if path is None else resolve_name(path)


def _shared_message_versions() -> list[tuple[str, int]]:
    return [(n, v) for n, v in all_message_versions() if kio_class(n, v) is not None]


SHARED = _shared_message_versions()
SHARED_IDS = [f"{n}-v{v}" for n, v in SHARED]


# -- field pairing -------------------------------------------------------------------------

@dataclasses.dataclass(slots=True, frozen=True)
class Pair:
    """One of our fields and kio's field for it, with kio's encoding of the value."""

    ours: FieldSpec
    kio: dataclasses.Field
    kio_type: str | None      # kafka_type metadata (None for struct fields)
    kio_optional: bool
    kio_struct: type | None   # element class for struct fields


def _struct_class_of(kio_field: dataclasses.Field) -> type | None:
    annotation: Any = kio_field.type
    while True:
        args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
        if not args:
            break
        annotation = args[0]
    is_struct = isinstance(annotation, type) and dataclasses.is_dataclass(annotation)
    return annotation if is_struct else None


_PAIRS: dict[tuple[int, type, int], tuple[Pair, ...]] = {}


def _pairs(spec: StructSpec, kio_cls: type, version: int) -> tuple[Pair, ...]:
    """Our fields of `spec` at `version` (extensions left out) beside kio's, in schema order."""
    key = (id(spec), kio_cls, version)
    if key not in _PAIRS:
        _PAIRS[key] = _pair_fields(spec, kio_cls, version)
    return _PAIRS[key]


def _pair_fields(spec: StructSpec, kio_cls: type, version: int) -> tuple[Pair, ...]:
    ours = [f for f in spec.fields if version in f.versions and not is_extension_field(f)]
    theirs = dataclasses.fields(kio_cls)
    assert [f.attr for f in ours] == [_our_name(k.name, ours) for k in theirs], (
        f"{spec.name} v{version}: ours {[f.attr for f in ours]} kio {[k.name for k in theirs]}")
    result = []
    for f, k in zip(ours, theirs, strict=True):
        kio_type = k.metadata.get("kafka_type")
        if kio_type is not None:
            wire = KIO_WIRE_TYPES.get(kio_type, kio_type)
            assert wire == f.element_type, f"{spec.name}.{f.attr}: ours {f.type} kio {kio_type}"
        result.append(Pair(f, k, kio_type, is_optional(k), _struct_class_of(k)))
    return tuple(result)


def _our_name(kio_name: str, ours: list[FieldSpec]) -> str:
    names = {f.attr for f in ours}
    for candidate in (kio_name, f"{kio_name}_ms", kio_name.rstrip("_")):
        if candidate in names:
            return candidate
    return next((o for o, k in KNOWN_RENAMES.items() if k == kio_name), kio_name)


# -- conversion ----------------------------------------------------------------------------

def to_kio(spec: StructSpec, kio_cls: type, obj: Any, version: int) -> Any:
    """Our object as kio's, narrowing values kio's types cannot hold."""
    kwargs: dict[str, Any] = {}
    for p in _pairs(spec, kio_cls, version):
        value = getattr(obj, p.ours.attr)
        if value is None:
            kwargs[p.kio.name] = None
        elif p.ours.is_array:
            kwargs[p.kio.name] = tuple(_scalar_to_kio(p, item, version) for item in value)
        else:
            kwargs[p.kio.name] = _scalar_to_kio(p, value, version)
    return kio_cls(**kwargs)


def _scalar_to_kio(p: Pair, value: Any, version: int) -> Any:
    if p.kio_struct is not None:
        return to_kio(p.ours.struct, p.kio_struct, value, version)  # type: ignore[arg-type]
    t = p.kio_type
    if t == "error_code":
        return (KioErrorCode(value) if value in KIO_ERROR_VALUES
                else KIO_ERROR_CODES[value % len(KIO_ERROR_CODES)])
    if t == "timedelta_i32":
        return datetime.timedelta(milliseconds=value)
    if t == "timedelta_i64":
        limit = TIMEDELTA_I64_LIMIT_MS
        return datetime.timedelta(milliseconds=max(-limit, min(value, limit)))
    if t == "datetime_i64":
        if value < 0 and p.kio_optional:
            return None
        return EPOCH + abs(value) % DATETIME_LIMIT_MS * ONE_MS
    if t == "uuid":
        return None if value.int == 0 else value
    if t == "records":
        return Records(bytes(value))
    if t == "float64":
        return f64(value)
    return value


def from_kio(cls: type, spec: StructSpec, kio_obj: Any, version: int) -> Any:
    """kio's object as ours; our extension fields keep their defaults."""
    kwargs: dict[str, Any] = {}
    for p in _pairs(spec, type(kio_obj), version):
        value = getattr(kio_obj, p.kio.name)
        if value is None and p.kio_type not in ("uuid", "datetime_i64"):
            kwargs[p.ours.attr] = None
        elif p.ours.is_array:
            kwargs[p.ours.attr] = [_scalar_from_kio(cls, p, item, version) for item in value]
        else:
            kwargs[p.ours.attr] = _scalar_from_kio(cls, p, value, version)
    return cls(**kwargs)


def _scalar_from_kio(parent: type, p: Pair, value: Any, version: int) -> Any:
    if p.kio_struct is not None:
        child = getattr(parent, p.ours.struct.name)  # type: ignore[union-attr]
        return from_kio(child, p.ours.struct, value, version)  # type: ignore[arg-type]
    t = p.kio_type
    if t in ("timedelta_i32", "timedelta_i64"):
        return value // ONE_MS
    if t == "datetime_i64":
        return -1 if value is None else (value - EPOCH) // ONE_MS
    if t == "uuid":
        return uuid.UUID(int=0) if value is None else value
    if t in ("error_code", "int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(value)
    if t == "records":
        return bytes(value)
    if t == "float64":
        return float(value)
    return value


def kio_encode(kio_obj: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(kio_obj))(buffer, kio_obj)
    return buffer.getvalue()


def kio_decode(kio_cls: type, data: bytes) -> Any:
    obj: Any
    obj, size = entity_reader(kio_cls)(data, 0)
    assert size == len(data), f"kio read {size} of {len(data)} bytes"
    return obj


# -- tests ---------------------------------------------------------------------------------

def test_kio_covers_every_standard_request_and_response_we_share_with_it() -> None:
    names = {n for n, _ in SHARED}
    for expected in ("ProduceRequest", "FetchResponse", "MetadataResponse", "ApiVersionsRequest",
                     "RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription"):
        assert expected in names
    assert len(SHARED) > 400


@pytest.mark.parametrize(("name", "version"), SHARED, ids=SHARED_IDS)
def test_encoding_is_byte_identical_to_kio_and_each_decodes_the_other(name: str,
                                                                      version: int) -> None:
    mtype = registry()[name]
    kio_cls = kio_class(name, version)
    assert kio_cls is not None

    @KIO_SETTINGS
    @given(message_values(name, version, unknown_tags=False, with_extensions=False))
    def check(drawn: Any) -> None:
        theirs = to_kio(mtype.spec.struct, kio_cls, drawn, version)
        ours = from_kio(mtype.cls, mtype.spec.struct, theirs, version)
        their_bytes = kio_encode(theirs)
        our_bytes = mtype.encode(ours, version)
        assert our_bytes == their_bytes
        decoded = mtype.decode_all(their_bytes, version)
        assert as_plain(mtype, decoded, version) == as_plain(mtype, ours, version)
        assert kio_decode(kio_cls, our_bytes) == theirs

    check()


@pytest.mark.parametrize(("name", "version"), SHARED, ids=SHARED_IDS)
def test_schema_defaults_match_kio_defaults(name: str, version: int) -> None:
    """A default that differs from Kafka's changes what an omitted tagged field means."""
    mtype = registry()[name]
    kio_cls = kio_class(name, version)
    assert kio_cls is not None
    mismatches = []
    for spec, cls in _walk_structs(mtype.spec.struct, kio_cls, version):
        for p in _pairs(spec, cls, version):
            if p.kio.default is dataclasses.MISSING or p.ours.is_array or p.kio_struct:
                continue
            ours = field_default(p.ours)
            theirs = p.kio.default
            if p.kio_type == "uuid" and theirs is None:
                theirs = uuid.UUID(int=0)
            elif p.kio_type == "datetime_i64" and theirs is None:
                theirs = -1
            elif theirs is not None and p.kio_type is not None:
                theirs = _scalar_from_kio(cls, p, theirs, version)
            if ours != theirs:
                mismatches.append((spec.name, p.ours.attr, ours, theirs))
    assert mismatches == []


def _walk_structs(spec: StructSpec, kio_cls: type, version: int):  # type: ignore[no-untyped-def]
    yield spec, kio_cls
    for p in _pairs(spec, kio_cls, version):
        if p.kio_struct is not None and p.ours.struct is not None:
            yield from _walk_structs(p.ours.struct, p.kio_struct, version)
