"""What a log read returns: zero-copy slices of segment maps; mirrors Kafka's FetchDataInfo."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class LogOffsetMetadata:
    """Where an offset lives: its segment and byte position there (Kafka's LogOffsetMetadata)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


@dataclass(slots=True)
class FetchDataInfo:
    """Whole batches read from a log: `memoryview` slices of segment mmaps, never copies.

    The views keep their mmap alive; hold them only until the response is written.
    """

    fetch_offset_metadata: LogOffsetMetadata
    records: list[memoryview] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        """Total bytes of every slice."""
        return sum(len(view) for view in self.records)
