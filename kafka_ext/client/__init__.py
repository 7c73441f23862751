"""kafka-ext's own asyncio client on our codec: the reference for the proposals' client side.

`Producer`, `Consumer` and `Admin` speak Kafka's protocol through `kafka_ext.protocol` and name
themselves `kafka-ext-client` in ApiVersions, which shows them the extension APIs. They
implement KIP-253's partition counts and consumer gating and partition reduction's modes
(docs/client.md); stock clients stay the judge of wire compatibility.

The names below load on first use, so the broker and tools that only need `probe` do not
import the asyncio client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafka_ext.client.accumulator import RecordMetadata
    from kafka_ext.client.admin import Admin, AdminError, NewTopic, PartitionDeletion
    from kafka_ext.client.consumer import Consumer
    from kafka_ext.client.fetcher import ConsumerRecord
    from kafka_ext.client.metadata import PartitionMode, TopicMetadata, TopicPartition
    from kafka_ext.client.producer import Producer

_EXPORTS = {
    "RecordMetadata": "accumulator", "Admin": "admin", "AdminError": "admin",
    "NewTopic": "admin", "PartitionDeletion": "admin", "Consumer": "consumer",
    "ConsumerRecord": "fetcher", "PartitionMode": "metadata", "TopicMetadata": "metadata",
    "TopicPartition": "metadata", "Producer": "producer",
}

__all__ = [
    "Admin", "AdminError", "Consumer", "ConsumerRecord", "NewTopic", "PartitionDeletion",
    "PartitionMode", "Producer", "RecordMetadata", "TopicMetadata", "TopicPartition",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
