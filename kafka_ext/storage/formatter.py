"""Log dir identity and formatting: mirrors Kafka's Formatter, MetaPropertiesEnsemble and
BootstrapDirectory.

The one place that decides what a formatted dir is. `format_storage` is `kafka-ext storage
format`: it writes `meta.properties` (version 1, node.id, cluster.id, a directory.id per dir),
`bootstrap.checkpoint` (the initial metadata.version and features as a KRaft snapshot) and, for
a KIP-853 dynamic quorum, the voter set as the metadata log's `00000000000000000000-0000000000
.checkpoint` (KRaftVersionRecord and VotersRecord control records). `check_dir_identity` is what
the LogManager runs on each dir at start-up; `storage_problems` is what `storage info` reports.
Everything here blocks on disk: call it before the event loop serves, or off it.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.controller.snapshot import (
    METADATA_VERSION_FEATURE,
    read_snapshot,
    snapshot_bytes,
)
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.records import ControlRecordType
from kafka_ext.storage.checkpoints import (
    CorruptCheckpointError,
    MetaProperties,
    kafka_uuid_from_str,
    kafka_uuid_to_str,
    write_atomically,
)

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
# The metadata log's first snapshot (offset 0, epoch 0): where KIP-853 keeps the initial voters.
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"
KRAFT_VERSION_FEATURE = "kraft.version"
# Share groups (KIP-932): level 1 serves them. A cluster that never finalized it serves them
# too (on by default here, as `group.share.enable`); level 0 turns them off.
SHARE_VERSION_FEATURE = "share.version"

# Apache Kafka's MetadataVersion feature levels (server-common MetadataVersion), 3.3-IV3 (the
# oldest a 4.x cluster bootstraps with) to 4.0-IV3. A release name maps to its last IV.
METADATA_VERSIONS: dict[str, int] = {
    "3.3-IV3": 7, "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12,
    "3.6-IV1": 13, "3.6-IV2": 14, "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18,
    "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21, "4.0-IV0": 22, "4.0-IV1": 23, "4.0-IV2": 24,
    "4.0-IV3": 25,
}
LATEST_METADATA_VERSION = "4.0-IV3"
# Features `--feature NAME=LEVEL` may set, with the levels Kafka 4.0 knows.
FEATURE_LEVELS: dict[str, range] = {
    KRAFT_VERSION_FEATURE: range(0, 2),
    "group.version": range(0, 2),
    "transaction.version": range(0, 3),
    "eligible.leader.replicas.version": range(0, 2),
    SHARE_VERSION_FEATURE: range(0, 2),
}


class FormatError(ValueError):
    """`storage format` cannot do what was asked; the message says why and what to do."""


class LogDirIdentityError(KafkaError):
    """A log dir is unformatted, or belongs to another cluster or node: refuse to start."""


def random_uuid() -> str:
    """A fresh id as Kafka prints it: 22 characters of URL-safe base64, never starting with
    '-' (Kafka's Uuid.randomUuid avoids ids a shell would take for a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def parse_cluster_id(text: str) -> str:
    """The cluster id if it is a base64 uuid (Kafka's Uuid.fromString), else FormatError."""
    try:
        kafka_uuid_from_str(text)
    except ValueError:
        raise FormatError(f"Cluster ID string {text} does not appear to be a valid UUID: "
                          "expected 22 characters of URL-safe base64 (see `kafka-ext storage "
                          "random-uuid`)") from None
    return text


def parse_release_version(text: str) -> tuple[str, int]:
    """(name, feature level) of a metadata.version such as 3.9, 3.9-IV0 or 4.0."""
    if text in METADATA_VERSIONS:
        return text, METADATA_VERSIONS[text]
    release = [name for name in METADATA_VERSIONS if name.split("-")[0] == text]
    if release:
        return release[-1], METADATA_VERSIONS[release[-1]]
    raise FormatError(f"Unknown release version '{text}'. Supported versions are: "
                      f"{', '.join(METADATA_VERSIONS)}")


def parse_features(entries: Iterable[str]) -> dict[str, int]:
    """`NAME=LEVEL` entries of --feature, checked against the features Kafka 4.0 knows."""
    features: dict[str, int] = {}
    for entry in entries:
        name, sep, level_text = entry.partition("=")
        name = name.strip()
        if not sep or not level_text.strip().lstrip("-").isdigit():
            raise FormatError(f"Can't parse feature={entry}. The format is FEATURE=LEVEL.")
        if name == METADATA_VERSION_FEATURE:
            raise FormatError("Use --release-version instead of --feature metadata.version")
        if name not in FEATURE_LEVELS:
            raise FormatError(f"Unsupported feature: {name}. Supported features are: "
                              f"{', '.join(FEATURE_LEVELS)}")
        level = int(level_text)
        if level not in FEATURE_LEVELS[name]:
            levels = FEATURE_LEVELS[name]
            raise FormatError(f"Unsupported level {level} for feature {name}: it must be "
                              f"between {levels.start} and {levels.stop - 1}")
        if name in features:
            raise FormatError(f"Feature {name} was given twice")
        features[name] = level
    return features


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    """One initial controller of a KIP-853 quorum: `id@host:port:directoryId`."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{kafka_uuid_to_str(self.directory_id)}"


_DYNAMIC_VOTER_RE = re.compile(r"^([0-9]+)@(\[[0-9A-Fa-f:.]+\]|[^:\[\]/@]+):([0-9]+):([A-Za-z0-9_-]{22})$")


def parse_initial_controllers(text: str) -> list[DynamicVoter]:
    """--initial-controllers: comma-separated `id@host:port:directoryId` (Kafka's DynamicVoters)."""
    voters: list[DynamicVoter] = []
    for item in (part.strip() for part in text.split(",")):
        match = _DYNAMIC_VOTER_RE.match(item)
        if match is None:
            raise FormatError(f"Invalid --initial-controllers entry {item!r}: expected "
                              "id@host:port:directoryId")
        port = int(match[3])
        if port > 65535:
            raise FormatError(f"Invalid port {port} in --initial-controllers entry {item!r}")
        try:
            directory_id = kafka_uuid_from_str(match[4])
        except ValueError:
            raise FormatError(f"Invalid directory id in --initial-controllers entry {item!r}") from None
        voters.append(DynamicVoter(int(match[1]), match[2].strip("[]"), port, directory_id))
    if not voters:
        raise FormatError("--initial-controllers must name at least one controller")
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise FormatError("--initial-controllers names a node id twice")
    return voters


# -- KRaft snapshot files (bootstrap.checkpoint and the voters snapshot) ---------------------


def _snapshot_bytes(controls: Sequence[tuple[ControlRecordType, Any]],
                    records: Sequence[Any]) -> bytes:
    """A snapshot of `records` after `controls` (KRaftVersionRecord, VotersRecord), now."""
    return snapshot_bytes(records, controls=controls,
                          last_contained_log_time_ms=int(time.time() * 1000))


def bootstrap_records(metadata_level: int, features: Mapping[str, int]) -> list[Any]:
    """The FeatureLevelRecords a new cluster starts with (Kafka's BootstrapMetadata)."""
    cls = registry()["FeatureLevelRecord"].cls
    out = [cls(name=METADATA_VERSION_FEATURE, feature_level=metadata_level)]
    out += [cls(name=name, feature_level=level) for name, level in sorted(features.items())
            if name != KRAFT_VERSION_FEATURE and level > 0]  # kraft.version: a control record
    return out


def read_bootstrap_records(log_dir: Path) -> list[Any] | None:
    """The records of `<log_dir>/bootstrap.checkpoint`, or None when the dir has none."""
    path = log_dir / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        return None
    return [record for _, record in read_snapshot(path)[1]]


def _voters_record(voters: Sequence[DynamicVoter], listener_name: str) -> Any:
    cls = registry()["VotersRecord"].cls
    return cls(version=0, voters=[cls.Voter(
        voter_id=v.node_id, voter_directory_id=v.directory_id,
        endpoints=[cls.Voter.Endpoint(name=listener_name, host=v.host, port=v.port)],
        k_raft_version_feature=cls.Voter.KRaftVersionFeature(
            min_supported_version=0, max_supported_version=1)) for v in voters])


def read_bootstrap_voters(metadata_log_dir: Path) -> list[DynamicVoter] | None:
    """The KIP-853 initial voters recorded by `format --standalone/--initial-controllers`, or
    None for a static quorum (controller.quorum.voters) or a node formatted without them."""
    path = metadata_log_dir / f"{METADATA_TOPIC}-0" / BOOTSTRAP_SNAPSHOT
    if not path.exists():
        return None
    record = read_snapshot(path)[0].get("VotersRecord")
    if record is None:
        return None
    return [DynamicVoter(v.voter_id, v.endpoints[0].host if v.endpoints else "",
                         v.endpoints[0].port if v.endpoints else 0, v.voter_directory_id)
            for v in record.voters]


# -- formatting --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StorageLayout:
    """The dirs of one node and who it is: what `format` writes and start-up checks."""

    log_dirs: tuple[Path, ...]
    metadata_log_dir: Path
    node_id: int
    is_controller: bool

    @property
    def all_dirs(self) -> tuple[Path, ...]:
        """Every dir to format: the log dirs, then the metadata log dir if it is apart."""
        if self.metadata_log_dir in self.log_dirs:
            return self.log_dirs
        return (*self.log_dirs, self.metadata_log_dir)


@dataclass(frozen=True, slots=True)
class FormatRequest:
    """What `storage format` was asked for, already parsed."""

    cluster_id: str
    release_version: str = LATEST_METADATA_VERSION
    features: Mapping[str, int] | None = None
    initial_controllers: Sequence[DynamicVoter] | None = None
    controller_listener_name: str | None = None
    ignore_formatted: bool = False
    # UserScramCredentialRecords the cluster starts with (--add-scram).
    scram_records: Sequence[Any] = ()


def format_storage(layout: StorageLayout, request: FormatRequest) -> list[str]:
    """Format every unformatted dir of `layout`; returns the lines to print.

    Kafka's rules: a formatted dir fails the whole command unless ignore_formatted; the
    metadata log dir of a controller in `initial_controllers` takes that entry's directory id;
    the voter set (kraft.version 1) goes only to a controller's metadata log dir.
    """
    level = METADATA_VERSIONS[request.release_version]
    features = dict(request.features or {})
    dynamic = request.initial_controllers is not None
    kraft_version = features.get(KRAFT_VERSION_FEATURE, 1 if dynamic else 0)
    if dynamic and kraft_version == 0:
        raise FormatError("Cannot set kraft.version to 0 if KIP-853 configuration is present. "
                          "Try removing the --feature flag for kraft.version.")
    if not dynamic and kraft_version == 1 and layout.is_controller:
        raise FormatError("Cannot set kraft.version to 1 unless KIP-853 configuration is "
                          "present. Try removing the --feature flag for kraft.version.")
    unformatted: list[Path] = []
    for log_dir in layout.all_dirs:
        try:
            meta = MetaProperties.read(log_dir)
        except CorruptCheckpointError as exc:
            raise FormatError(f"Log directory {log_dir} has an unreadable meta.properties "
                              f"({exc}); remove it by hand to format the directory again") from None
        if meta is None:
            unformatted.append(log_dir)
        elif not request.ignore_formatted:
            raise FormatError(f"Log directory {log_dir} is already formatted. Use "
                              "--ignore-formatted to ignore this directory and format the others.")
    if not unformatted:
        return ["All of the log directories are already formatted."]
    records = [*bootstrap_records(level, features), *request.scram_records]
    own = {v.node_id: v for v in request.initial_controllers or ()}.get(layout.node_id)
    lines: list[str] = []
    for log_dir in unformatted:
        log_dir.mkdir(parents=True, exist_ok=True)
        is_metadata_dir = log_dir == layout.metadata_log_dir
        directory_id = own.directory_id if is_metadata_dir and own is not None else new_directory_id()
        write_atomically(log_dir / BOOTSTRAP_CHECKPOINT, _snapshot_bytes((), records))
        if is_metadata_dir and dynamic and layout.is_controller:
            assert request.initial_controllers is not None
            _write_voters_snapshot(log_dir, request.initial_controllers,
                                   request.controller_listener_name or "CONTROLLER", kraft_version)
            kind = "dynamic metadata voter directory"
        else:
            kind = "metadata directory" if is_metadata_dir else "data directory"
        MetaProperties(layout.node_id, request.cluster_id, directory_id).write(log_dir)
        lines.append(f"Formatting {kind} {log_dir} with metadata.version "
                     f"{request.release_version}.")
    return lines


def _write_voters_snapshot(metadata_log_dir: Path, voters: Sequence[DynamicVoter],
                           listener_name: str, kraft_version: int) -> None:
    cls = registry()["KRaftVersionRecord"].cls
    snapshot_dir = metadata_log_dir / f"{METADATA_TOPIC}-0"
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    controls = [(ControlRecordType.KRAFT_VERSION, cls(version=0, k_raft_version=kraft_version)),
                (ControlRecordType.KRAFT_VOTERS, _voters_record(voters, listener_name))]
    write_atomically(snapshot_dir / BOOTSTRAP_SNAPSHOT, _snapshot_bytes(controls, ()))


def new_directory_id() -> uuid.UUID:
    """A directory.id: random, never one of the ids Kafka reserves (all zero bits up to 99)."""
    while True:
        value = uuid.uuid4()
        if value.int >= 100:
            return value


# -- start-up checks -----------------------------------------------------------------------------


def format_command(config_path: str | None) -> str:
    """The command that formats this node's dirs, for error messages."""
    return (f"kafka-ext storage format -t $(kafka-ext storage random-uuid) -c "
            f"{config_path or 'server.properties'}")


def formatted_cluster_id(layout: StorageLayout, config_path: str | None) -> str:
    """The cluster id a node that is not its own quorum was formatted with (Kafka's
    MetaPropertiesEnsemble.verify): its metadata log dir must be formatted; other dirs
    may be empty (the LogManager formats them as new JBOD disks) or agree with it."""
    meta_dir = layout.metadata_log_dir
    try:
        meta = MetaProperties.read(meta_dir)
    except OSError as exc:
        raise LogDirIdentityError(ErrorCode.KAFKA_STORAGE_ERROR,
                                  f"cannot read the metadata log dir {meta_dir}: {exc}") from exc
    if meta is None:
        raise LogDirIdentityError(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"log dir {meta_dir} is not formatted (no meta.properties); format this node's "
            f"dirs first: {format_command(config_path)}")
    return meta.cluster_id


def existing_cluster_id(layout: StorageLayout) -> str | None:
    """The cluster id in the first readable meta.properties of the node's dirs, if any."""
    for log_dir in layout.all_dirs:
        try:
            meta = MetaProperties.read(log_dir)
        except (CorruptCheckpointError, OSError):
            continue  # the LogManager reports it with the directory's name
        if meta is not None:
            return meta.cluster_id
    return None


def check_dir_identity(log_dir: Path, node_id: int, cluster_id: str,
                       known_ids: Iterable[uuid.UUID]) -> uuid.UUID:
    """The directory.id of one log dir at start-up, writing meta.properties into an empty dir
    (a new JBOD disk, as Kafka does); LogDirIdentityError if it belongs elsewhere."""
    meta = MetaProperties.read(log_dir)
    if meta is None:
        meta = MetaProperties(node_id, cluster_id, new_directory_id())
        meta.write(log_dir)
        return meta.directory_id
    if meta.cluster_id != cluster_id:
        raise LogDirIdentityError(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"log dir {log_dir} belongs to cluster {meta.cluster_id!r}, but this node is "
            f"configured for cluster {cluster_id!r}; refusing to start (format it again only if "
            "its data may go)")
    if meta.node_id != node_id:
        raise LogDirIdentityError(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"log dir {log_dir} belongs to node {meta.node_id}, not node {node_id}; refusing "
            "to start")
    if meta.directory_id in set(known_ids):
        raise LogDirIdentityError(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"log dir {log_dir} has the same directory.id as another log dir (a copied dir?)")
    return meta.directory_id


def storage_info(layout: StorageLayout) -> tuple[list[str], bool]:
    """(lines, whether problems were found) for `storage info` (Kafka's StorageTool info)."""
    problems: list[str] = []
    metas: list[str] = []
    cluster_ids: set[str] = set()
    dirs = layout.all_dirs
    for log_dir in dirs:
        if not log_dir.is_dir():
            problems.append(f"{log_dir} does not exist")
            continue
        try:
            meta = MetaProperties.read(log_dir)
        except (CorruptCheckpointError, OSError) as exc:
            problems.append(f"{log_dir}: {exc}")
            continue
        if meta is None:
            problems.append(f"{log_dir} is not formatted.")
            continue
        text = (f"{{cluster.id={meta.cluster_id}, directory.id="
                f"{kafka_uuid_to_str(meta.directory_id)}, node.id={meta.node_id}, version=1}}")
        if meta.node_id != layout.node_id:
            problems.append(f"{log_dir}: node.id {meta.node_id} is not this node's "
                            f"{layout.node_id}")
        if cluster_ids and meta.cluster_id not in cluster_ids:
            problems.append(f"{log_dir}: cluster.id {meta.cluster_id} differs from another dir")
        cluster_ids.add(meta.cluster_id)
        metas.append(text)
    lines = [f"Found log director{'y' if len(dirs) == 1 else 'ies'}:"]
    lines += [f"  {d}" for d in dirs] + [""]
    lines += [f"Found metadata: {m}" for m in metas]
    if metas:
        lines.append("")
    if problems:
        lines.append(f"Found problem{'' if len(problems) == 1 else 's'}:")
        lines += [f"  {p}" for p in problems] + [""]
    return lines, bool(problems)
