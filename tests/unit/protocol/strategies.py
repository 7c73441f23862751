"""Hypothesis strategies built from the compiled schemas: one strategy per (message, version).

A value drawn for a version sets only the fields that version carries (with their types' ranges
and the version's nullability); every other field keeps its schema default, so a round trip
through that version must give back an equal object.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import strategies as st

from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.schema import FieldSpec, StructSpec

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
EXTENSION_TAG_MIN = 10000  # DESIGN.md §1: our tags (and the proposals') start here
MAX_ARRAY_ITEMS = 3        # enough to exercise counts; keeps examples small and fast
MAX_TEXT_CHARS = 12
MAX_BYTES = 24

FieldFilter = Callable[[FieldSpec], bool]


def all_message_versions(kinds: tuple[str, ...] | None = None) -> list[tuple[str, int]]:
    """Every (message name, version) in the registry, optionally only some schema types."""
    reg = registry()
    pairs: list[tuple[str, int]] = []
    for name, mtype in sorted(reg.by_name.items()):
        if kinds is not None and mtype.spec.type not in kinds:
            continue
        if mtype.versions.highest is None:
            continue
        pairs.extend((name, v) for v in mtype.versions)
    return pairs


def is_extension_field(f: FieldSpec) -> bool:
    """A tagged field of ours or the proposals' (tag >= 10000)."""
    return f.tag is not None and f.tag >= EXTENSION_TAG_MIN


def uuids() -> st.SearchStrategy[uuid.UUID]:
    return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())


def texts() -> st.SearchStrategy[str]:
    # Surrogates cannot be encoded as UTF-8; hypothesis excludes them by default.
    return st.text(max_size=MAX_TEXT_CHARS)


def primitive(type_name: str) -> st.SearchStrategy[Any]:
    """Values of one primitive wire type, over its whole range."""
    if type_name in INT_RANGES:
        low, high = INT_RANGES[type_name]
        return st.integers(low, high)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if type_name == "string":
        return texts()
    if type_name == "bytes":
        return st.binary(max_size=MAX_BYTES)
    if type_name == "records":
        return st.binary(max_size=MAX_BYTES)
    if type_name == "uuid":
        return uuids()
    raise ValueError(f"no strategy for {type_name}")


def _unknown_tags(known: set[int]) -> st.SearchStrategy[list[tuple[int, bytes]] | None]:
    """None or a non-empty ascending list of tags the struct does not know (decode keeps order)."""
    tag = st.integers(0, 2**20).filter(lambda t: t not in known)
    entries = st.lists(st.tuples(tag, st.binary(max_size=8)), min_size=1, max_size=2,
                       unique_by=lambda item: item[0])
    return st.one_of(st.none(), entries.map(sorted))


def struct_values(cls: type, spec: StructSpec, version: int, flexible: bool, *,
                  unknown_tags: bool, skip: FieldFilter) -> st.SearchStrategy[Any]:
    """Instances of `cls` with every field the version carries drawn; the others default."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    known_tags: set[int] = set()
    for f in spec.fields:
        if version not in f.versions or skip(f):
            continue
        if flexible and version in f.tagged_versions and f.tag is not None:
            known_tags.add(f.tag)
        kwargs[f.attr] = field_values(cls, f, version, flexible, unknown_tags=unknown_tags,
                                      skip=skip)
    if flexible and unknown_tags:
        kwargs["unknown_tagged_fields"] = _unknown_tags(known_tags)
    return st.builds(cls, **kwargs)


def field_values(parent: type, f: FieldSpec, version: int, flexible: bool, *,
                 unknown_tags: bool, skip: FieldFilter) -> st.SearchStrategy[Any]:
    """Values for one field at one version (nullability is the version's)."""
    if f.struct is not None:
        child_cls = getattr(parent, f.struct.name)
        element = struct_values(child_cls, f.struct, version, flexible,
                                unknown_tags=unknown_tags, skip=skip)
    else:
        element = primitive(f.element_type)
    value = st.lists(element, max_size=MAX_ARRAY_ITEMS) if f.is_array else element
    if version in f.nullable_versions:
        value = st.one_of(st.none(), value)
    return value


@cache
def message_values(name: str, version: int, unknown_tags: bool = True,
                   with_extensions: bool = True) -> st.SearchStrategy[Any]:
    """Messages of type `name` valid at `version`.

    unknown_tags: also draw unknown tagged fields in flexible versions.
    with_extensions: draw our own tagged fields (tag >= 10000) too, else leave them default.
    """
    mtype = registry()[name]
    skip: FieldFilter = (lambda f: False) if with_extensions else is_extension_field
    return struct_values(mtype.cls, mtype.spec.struct, version, mtype.is_flexible(version),
                         unknown_tags=unknown_tags, skip=skip)


def as_plain(mtype: MessageType, obj: Any, version: int) -> Any:
    """The fields `version` carries, as nested dicts and lists; records and bytes as bytes.

    Comparing these gives a readable diff and ignores fields the version does not carry.
    """
    flexible = mtype.is_flexible(version)
    return _plain_struct(mtype.spec.struct, obj, version, flexible)


def _plain_struct(spec: StructSpec, obj: Any, version: int, flexible: bool) -> Any:
    if obj is None:
        return None
    out: dict[str, Any] = {}
    for f in spec.fields:
        if version not in f.versions:
            continue
        out[f.attr] = _plain_value(f, getattr(obj, f.attr), version, flexible)
    unknown = obj.unknown_tagged_fields
    if flexible and unknown:
        out["unknown_tagged_fields"] = [(tag, bytes(data)) for tag, data in unknown]
    return out


def _plain_value(f: FieldSpec, value: Any, version: int, flexible: bool) -> Any:
    if value is None:
        return None
    if f.is_array:
        if f.struct is not None:
            return [_plain_struct(f.struct, item, version, flexible) for item in value]
        return list(value)
    if f.struct is not None:
        return _plain_struct(f.struct, value, version, flexible)
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value

