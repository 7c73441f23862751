"""Kafka tool flags (`--property k=v`, `--command-config file`) to confluent-kafka client configs.

Kafka's tools take Java client property files; librdkafka shares most key names, so keys pass
through unchanged except the Java-only ones translated or dropped here.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafka_ext.server.config import parse_properties


class UsageError(Exception):
    """A command-line flag is missing, malformed, or conflicts with another; exits with code 2."""


# Java (de)serializer classes have no librdkafka meaning: the Python tools deal in bytes.
_JAVA_ONLY_SUFFIXES = (".serializer", ".deserializer")
_JAAS_RE = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_key_values(pairs: Iterable[str], flag: str) -> dict[str, str]:
    """Turn repeated `key=value` flag values into a dict; a pair without '=' is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def read_properties_file(path: str) -> dict[str, str]:
    """Read a Java properties file (as `--command-config` and `--producer.config` take)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_properties(text)


def to_librdkafka(props: dict[str, str]) -> dict[str, str]:
    """Translate Java client properties to librdkafka ones (JAAS PLAIN/SCRAM credentials)."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if key.endswith(_JAVA_ONLY_SUFFIXES):
            continue
        if key == "sasl.jaas.config":
            for field_name, field_value in _JAAS_RE.findall(value):
                out[f"sasl.{field_name}"] = field_value
            continue
        out[key] = value
    return out


def client_config(bootstrap_server: str, config_file: str | None,
                  properties: Iterable[str], flag: str) -> dict[str, str]:
    """Client settings from `--bootstrap-server`, a properties file, then `flag k=v` values."""
    props: dict[str, str] = {}
    if config_file is not None:
        props.update(read_properties_file(config_file))
    props.update(parse_key_values(properties, flag))
    out = to_librdkafka(props)
    out["bootstrap.servers"] = bootstrap_server
    return out


def our_client_overrides(config_file: str | None, properties: list[str], flag: str,
                         known: Any) -> dict[str, Any]:
    """Keyword arguments of our client from Kafka's client properties (a properties file, then
    --*-property pairs); unknown keys are warned about as Kafka's tools do."""
    from kafka_ext.client.config import client_kwargs

    props: dict[str, str] = {}
    if config_file is not None:
        props.update(read_properties_file(config_file))
    props.update(parse_key_values(properties, flag))
    try:
        overrides, unknown = client_kwargs(props, known)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for key in unknown:
        print(f"WARN The configuration '{key}' was supplied but isn't a known config.",
              file=sys.stderr)
    return overrides
