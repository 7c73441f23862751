"""The registry of compiled messages: every schema under `protocol_schemas/`, every version.

Compiled once, the first time the registry is asked for (the broker asks at start-up), so a
request never waits for code generation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kafka_ext.protocol.compiler import Decoder, Encoder, MessageCompiler
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.schema import MessageSpec, Versions, load_schemas, schema_root

# Kafka's messages on the keys the proposals took (76/77: share groups, docs/protocol.md). They are
# compiled so that a stock client's request on such a key can be answered in Kafka's own format,
# but they are never what a key means to the dispatcher.
SHADOWED_DIR = "shadowed"

# What a malformed input can make the generated code raise besides DecodeError.
_DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError)


@dataclass(slots=True)
class MessageType:
    """One schema compiled: its class and a decoder and encoder per valid version."""

    spec: MessageSpec
    cls: Any  # generated at start-up: attributes are not known to the type checker
    decoders: dict[int, Decoder] = field(default_factory=dict)
    encoders: dict[int, Encoder] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def api_key(self) -> int | None:
        return self.spec.api_key

    @property
    def versions(self) -> Versions:
        return self.spec.valid_versions

    def is_flexible(self, version: int) -> bool:
        return version in self.spec.flexible_versions

    def decode(self, buf: Any, version: int, pos: int = 0) -> tuple[Any, int]:
        """Decode one message at `pos`; bad bytes raise DecodeError and nothing else."""
        decoder = self.decoders.get(version)
        if decoder is None:
            raise DecodeError(f"{self.name} has no version {version}")
        try:
            return decoder(buf, pos)
        except DecodeError:
            raise
        except _DECODE_FAILURES as exc:
            raise DecodeError(f"{self.name} v{version}: {exc}") from None

    def decode_all(self, buf: Any, version: int) -> Any:
        """Decode a buffer that holds exactly one message."""
        message, end = self.decode(buf, version)
        if end != len(buf):
            raise DecodeError(f"{self.name} v{version}: {len(buf) - end} bytes left over")
        return message

    def encode_into(self, message: Any, version: int, out: bytearray, parts: list | None) -> None:
        self.encoders[version](message, out, parts)

    def encode(self, message: Any, version: int) -> bytes:
        out = bytearray()
        self.encoders[version](message, out, None)
        return bytes(out)


class Registry:
    """All compiled messages, by name and, for requests and responses, by API key.

    `shadowed_requests`/`shadowed_responses` hold Kafka's messages on keys that mean one of our
    APIs (the names in `shadowed`); `requests`/`responses` never do.
    """

    def __init__(self, specs: dict[str, MessageSpec], shadowed: frozenset[str] = frozenset()
                 ) -> None:
        self.by_name: dict[str, MessageType] = {}
        self.requests: dict[int, MessageType] = {}
        self.responses: dict[int, MessageType] = {}
        self.shadowed_requests: dict[int, MessageType] = {}
        self.shadowed_responses: dict[int, MessageType] = {}
        for name, spec in specs.items():
            compiler = MessageCompiler(spec)
            mtype = MessageType(spec, compiler.message_class)
            if spec.valid_versions.highest is not None:
                for version in spec.valid_versions:
                    mtype.decoders[version], mtype.encoders[version] = compiler.compile_version(version)
            self.by_name[name] = mtype
            if spec.api_key is None:
                continue
            in_shadow = name in shadowed
            if spec.type == "request":
                (self.shadowed_requests if in_shadow else self.requests)[spec.api_key] = mtype
            elif spec.type == "response":
                (self.shadowed_responses if in_shadow else self.responses)[spec.api_key] = mtype

    def __getitem__(self, name: str) -> MessageType:
        return self.by_name[name]


@cache
def registry() -> Registry:
    """The process-wide registry, compiled on first use."""
    root = schema_root()
    shadowed = frozenset(path.stem for path in (root / SHADOWED_DIR).glob("*.json"))
    return Registry(load_schemas(root), shadowed)
