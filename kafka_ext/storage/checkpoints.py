"""Kafka's small text files beside the logs: offset checkpoints, partition.metadata, meta.properties.

Mirrors Apache Kafka's `CheckpointFile`/`OffsetCheckpointFile`, `PartitionMetadataFile` and
`MetaProperties`. Every write is atomic (temp file, fsync, rename, fsync of the directory), so a
crash leaves either the old or the new content. All functions here block on disk I/O.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kafka_ext.protocol.errors import ErrorCode, KafkaError

CHECKPOINT_VERSION = 0  # the version line of offset and leader-epoch checkpoints
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
META_PROPERTIES_FILE = "meta.properties"
META_PROPERTIES_VERSION = 1  # KRaft's meta.properties version


class CorruptCheckpointError(KafkaError):
    """A checkpoint file whose text does not follow Kafka's format."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, f"malformed checkpoint {path}: {reason}")
        self.path = path


def kafka_uuid_to_str(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def kafka_uuid_from_str(text: str) -> uuid.UUID:
    """Parse Kafka's 22-character base64 Uuid text; ValueError if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a base64 uuid")
    return uuid.UUID(bytes=raw)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or a new file in it survives a crash (blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str | bytes, *, sync: bool = True,
                     tmp_suffix: str = ".tmp") -> None:
    """Replace path with text (or bytes) through path + tmp_suffix and a rename; with sync,
    fsync file and dir (blocks)."""
    tmp = path.with_name(path.name + tmp_suffix)
    data = text.encode("utf-8") if isinstance(text, str) else text
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    """The file's lines, or None when it does not exist."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None


def _checkpoint_entries(path: Path, lines: list[str], fields: int) -> list[list[str]]:
    """Check the version and count lines, and split each entry line into `fields` words."""
    if len(lines) < 2:
        raise CorruptCheckpointError(path, "missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(path, f"unknown version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(path, f"bad count line {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(words) != fields for words in entries):
        raise CorruptCheckpointError(path, f"expected {count} entries of {fields} fields")
    return entries


class OffsetCheckpointFile:
    """One `topic partition offset` checkpoint of a log dir (recovery points, start offsets, HWs)."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with these offsets (blocks: fsync)."""
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [
            f"{topic} {partition} {offset}"
            for (topic, partition), offset in sorted(offsets.items())
        ]
        write_atomically(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets; empty if the file is missing; CorruptCheckpointError if malformed."""
        lines = _read_lines(self.path)
        if lines is None:
            return {}
        result: dict[tuple[str, int], int] = {}
        for topic, partition, offset in _checkpoint_entries(self.path, lines, 3):
            try:
                result[(topic, int(partition))] = int(offset)
            except ValueError:
                raise CorruptCheckpointError(
                    self.path, f"bad entry {topic} {partition} {offset}"
                ) from None
        return result


class LeaderEpochCheckpointFile:
    """`leader-epoch-checkpoint`: version, count, then `epoch start_offset` lines."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
        """Atomically replace the file; sync=False skips the fsyncs (a later flush does them)."""
        items = list(entries)
        lines = [str(CHECKPOINT_VERSION), str(len(items))] + [f"{e} {o}" for e, o in items]
        write_atomically(self.path, "\n".join(lines) + "\n", sync=sync)

    def read(self) -> list[tuple[int, int]]:
        """(epoch, start_offset) entries; empty if missing; CorruptCheckpointError if malformed."""
        lines = _read_lines(self.path)
        if lines is None:
            return []
        try:
            return [(int(e), int(o)) for e, o in _checkpoint_entries(self.path, lines, 2)]
        except ValueError:
            raise CorruptCheckpointError(self.path, "non-integer entry") from None


class PartitionMetadataFile:
    """`partition.metadata`: the topic id a partition dir belongs to ("version: 0", "topic_id: ...")."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, topic_id: uuid.UUID) -> None:
        """Atomically write the topic id (blocks: fsync)."""
        write_atomically(self.path, f"version: 0\ntopic_id: {kafka_uuid_to_str(topic_id)}\n")

    def read(self) -> uuid.UUID | None:
        """The topic id, None if the file is missing; CorruptCheckpointError if malformed."""
        lines = _read_lines(self.path)
        if lines is None:
            return None
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
            raise CorruptCheckpointError(self.path, "expected 'version: 0' and 'topic_id: ...'")
        try:
            return kafka_uuid_from_str(fields["topic_id"].strip())
        except ValueError:
            raise CorruptCheckpointError(self.path, "topic_id is not a base64 uuid") from None


@dataclass(slots=True, frozen=True)
class MetaProperties:
    """A log dir's identity in `meta.properties` (KRaft version 1)."""

    node_id: int
    cluster_id: str
    directory_id: uuid.UUID

    def write(self, log_dir: Path) -> None:
        """Atomically write `<log_dir>/meta.properties` in Java properties form (blocks)."""
        text = (
            "#\n#Written by kafka-ext\n"
            f"cluster.id={self.cluster_id}\n"
            f"directory.id={kafka_uuid_to_str(self.directory_id)}\n"
            f"node.id={self.node_id}\n"
            f"version={META_PROPERTIES_VERSION}\n"
        )
        write_atomically(log_dir / META_PROPERTIES_FILE, text)

    @staticmethod
    def read(log_dir: Path) -> MetaProperties | None:
        """Parse `<log_dir>/meta.properties`; None if absent; CorruptCheckpointError if malformed."""
        path = log_dir / META_PROPERTIES_FILE
        lines = _read_lines(path)
        if lines is None:
            return None
        props: dict[str, str] = {}
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
        if props.get("version") != str(META_PROPERTIES_VERSION):
            raise CorruptCheckpointError(path, f"unsupported version {props.get('version')!r}")
        try:
            return MetaProperties(
                node_id=int(props["node.id"]),
                cluster_id=props["cluster.id"],
                directory_id=kafka_uuid_from_str(props["directory.id"]),
            )
        except (KeyError, ValueError) as exc:
            raise CorruptCheckpointError(path, f"missing or bad field: {exc}") from None
