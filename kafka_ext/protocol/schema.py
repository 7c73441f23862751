"""Loads message schemas written in Kafka's JSON dialect into plain specs; the compiler's input.

Pure: it reads text handed to it (or files under `protocol_schemas/`) and knows nothing of
sockets. Field names keep Kafka's CamelCase in the spec; the compiler turns them into
snake_case attributes.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PRIMITIVE_TYPES = frozenset({
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "uuid", "records",
})


@dataclass(slots=True, frozen=True)
class Versions:
    """An inclusive version range; `highest` is None for an open range like "3+"."""

    lowest: int
    highest: int | None

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int) or self.lowest < 0:
            return False
        return version >= self.lowest and (self.highest is None or version <= self.highest)

    def __iter__(self) -> Iterator[int]:
        if self.highest is None:
            raise ValueError("cannot iterate an open version range")
        return iter(range(self.lowest, self.highest + 1))


NO_VERSIONS = Versions(-1, -1)


@dataclass(slots=True)
class FieldSpec:
    """One field of a struct, as the schema declares it."""

    name: str                       # Kafka's name, e.g. "ThrottleTimeMs"
    attr: str                       # Python attribute, e.g. "throttle_time_ms"
    type: str                       # "int32", "string", "[]int32", "[]TopicData", "TopicData"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str | None
    ignorable: bool
    map_key: bool
    struct: StructSpec | None = None  # set when the type (or element type) is a struct
    # A field may opt out of compact encoding (RequestHeader.ClientId): None = the message's.
    flexible_versions: Versions | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass(slots=True)
class StructSpec:
    """A named struct: the message itself, a nested struct, or a common struct."""

    name: str
    fields: list[FieldSpec] = field(default_factory=list)


@dataclass(slots=True)
class MessageSpec:
    """One schema file: a request, response, header, record or data message."""

    name: str
    type: str
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec
    common_structs: dict[str, StructSpec]

    def all_structs(self) -> list[StructSpec]:
        """Every struct reachable from the message, each once, parents before children."""
        seen: dict[str, StructSpec] = {}

        def walk(spec: StructSpec) -> None:
            seen[spec.name] = spec
            for f in spec.fields:
                if f.struct is not None and f.struct.name not in seen:
                    walk(f.struct)

        walk(self.struct)
        return list(seen.values())


_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z\d])([A-Z])")


def snake_case(name: str) -> str:
    """ThrottleTimeMs -> throttle_time_ms; ISRNodes -> isr_nodes."""
    attr = _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", name)).lower()
    return attr + "_" if keyword.iskeyword(attr) else attr


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def parse_schema(text: str) -> MessageSpec:
    """Parse one schema document (JSON, `//` comment lines allowed)."""
    raw = json.loads(_strip_comments(text))
    valid = Versions.parse(raw.get("validVersions"))
    common = {s["name"]: StructSpec(s["name"]) for s in raw.get("commonStructs", [])}
    top = StructSpec(raw["name"])
    structs: dict[str, StructSpec] = dict(common)

    def build_fields(spec: StructSpec, raw_fields: list[dict], parent_versions: Versions) -> None:
        for rf in raw_fields:
            ftype = rf["type"]
            versions = Versions.parse(rf.get("versions"))
            f = FieldSpec(
                name=rf["name"], attr=snake_case(rf["name"]), type=ftype, versions=versions,
                nullable_versions=Versions.parse(rf.get("nullableVersions")),
                tagged_versions=Versions.parse(rf.get("taggedVersions")),
                tag=rf.get("tag"), default=_default_text(rf.get("default")),
                ignorable=bool(rf.get("ignorable", False)), map_key=bool(rf.get("mapKey", False)),
                flexible_versions=(Versions.parse(rf["flexibleVersions"])
                                   if "flexibleVersions" in rf else None),
            )
            element = f.element_type
            if element not in PRIMITIVE_TYPES:
                if "fields" in rf:
                    child = StructSpec(element)
                    structs[element] = child
                    build_fields(child, rf["fields"], versions)
                    f.struct = child
                elif element in structs:
                    f.struct = structs[element]
                else:
                    raise ValueError(f"{raw['name']}: field {f.name} has unknown type {ftype}")
            spec.fields.append(f)

    for s in raw.get("commonStructs", []):
        build_fields(common[s["name"]], s["fields"], valid)
    build_fields(top, raw.get("fields", []), valid)
    return MessageSpec(
        name=raw["name"], type=raw.get("type", "data"), api_key=raw.get("apiKey"),
        valid_versions=valid, flexible_versions=Versions.parse(raw.get("flexibleVersions")),
        struct=top, common_structs=common,
    )


def _default_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def schema_root() -> Path:
    """`protocol_schemas/` beside the package (source checkout or editable install)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "protocol_schemas", here.parents[1] / "protocol_schemas"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("protocol_schemas/ not found beside the kafka_ext package")


def load_schemas(root: Path | None = None) -> dict[str, MessageSpec]:
    """Every schema file under `root`, by message name."""
    root = root or schema_root()
    specs: dict[str, MessageSpec] = {}
    for path in sorted(root.rglob("*.json")):
        spec = parse_schema(path.read_text())
        if spec.name in specs:
            raise ValueError(f"duplicate schema name {spec.name} in {path}")
        specs[spec.name] = spec
    return specs
