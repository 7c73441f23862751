"""Kafka's Java client properties as our client's keyword arguments.

The console tools take `--producer-property`/`--consumer-property` and properties files as
Kafka's tools do; these tables map the property names our client honours to its arguments
(librdkafka spellings the tools used before, such as `batch.num.messages`, too). Serializer
classes mean nothing to a client of bytes and are skipped; other names are returned as unknown
so the tool can warn, as Kafka logs "supplied but isn't a known config". Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Our client speaks PLAINTEXT only: the broker serves no TLS or SASL listener yet.
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT"})
_IGNORED_SUFFIXES = (".serializer", ".deserializer")


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return text == "true"


def _int(value: str) -> int:
    return int(value.strip())


def _text(value: str) -> str:
    return value.strip()


Conversion = tuple[str, Callable[[str], Any]]

PRODUCER_PROPERTIES: dict[str, Conversion] = {
    "client.id": ("client_id", _text),
    "acks": ("acks", _text),
    "request.required.acks": ("acks", _text),
    "enable.idempotence": ("enable_idempotence", _bool),
    "linger.ms": ("linger_ms", _int),
    "batch.size": ("batch_size_bytes", _int),
    "batch.num.messages": ("batch_max_records", _int),
    "compression.type": ("compression", _text),
    "compression.codec": ("compression", _text),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "message.timeout.ms": ("delivery_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "max.request.size": ("max_request_size_bytes", _int),
    "buffer.memory": ("buffer_memory_bytes", _int),
    "max.block.ms": ("max_block_ms", _int),
}

CONSUMER_PROPERTIES: dict[str, Conversion] = {
    "group.id": ("group_id", _text),
    "group.instance.id": ("group_instance_id", _text),
    "client.id": ("client_id", _text),
    "auto.offset.reset": ("auto_offset_reset", _text),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int),
    "isolation.level": ("isolation_level", _text),
    "session.timeout.ms": ("session_timeout_ms", _int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int),
    "max.poll.interval.ms": ("rebalance_timeout_ms", _int),
    "fetch.min.bytes": ("fetch_min_bytes", _int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int),
    "fetch.wait.max.ms": ("fetch_max_wait_ms", _int),
    "fetch.max.bytes": ("fetch_max_bytes", _int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int),
    "max.poll.records": ("max_poll_records", _int),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
}


def client_kwargs(props: Mapping[str, str], table: Mapping[str, Conversion]
                  ) -> tuple[dict[str, Any], list[str]]:
    """(keyword arguments, unknown property names) for `props`; `bootstrap.servers` becomes
    `bootstrap_servers`. Raises ValueError for a malformed value or a security protocol our
    client cannot speak."""
    kwargs: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in props.items():
        if key == "bootstrap.servers":
            kwargs["bootstrap_servers"] = value.strip()
        elif key == "security.protocol":
            if value.strip().upper() not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ValueError(f"security.protocol={value}: kafka-ext's client speaks "
                                 f"PLAINTEXT only")
        elif key.endswith(_IGNORED_SUFFIXES):
            continue
        elif key in table:
            name, convert = table[key]
            try:
                kwargs[name] = convert(value)
            except ValueError as exc:
                raise ValueError(f"{key}={value}: {exc}") from None
        else:
            unknown.append(key)
    return kwargs, unknown
