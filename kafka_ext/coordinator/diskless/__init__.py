"""The Diskless coordinator (KIP-1164): a coordinator runtime tenant with SQLite state."""

from kafka_ext.coordinator.diskless.coordinator import (
    DISKLESS_METADATA_TOPIC,
    DisklessCoordinator,
)

__all__ = ["DISKLESS_METADATA_TOPIC", "DisklessCoordinator"]
