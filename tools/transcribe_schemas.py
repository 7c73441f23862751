"""Transcribe Apache Kafka's JSON message definitions into `protocol_schemas/`, then self-check.

Keeps the wire facts (names, types, versions, tags, defaults), drops Kafka's prose and comments,
applies our version floors (Kafka 3.9's ranges, see VERSION_FLOORS) and adds kafka-ext's tagged
extension fields.
Hand-written proposal schemas (new APIs and records) are not generated here, only checked.

Usage: python tools/transcribe_schemas.py [--source DIR] [--out DIR] [--check-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Kafka's own definitions, kept beside this checkout as reference data (never installed).
DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "kafka-protocol"
DEFAULT_OUT = ROOT / "protocol_schemas"

# Standard APIs we implement (request + response each).
STANDARD_APIS: tuple[str, ...] = (
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch",
    "CreateTopics", "DeleteTopics", "CreatePartitions", "DeleteRecords", "DescribeConfigs",
    "AlterConfigs", "IncrementalAlterConfigs", "DescribeCluster", "FindCoordinator", "JoinGroup",
    "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", "OffsetDelete",
    "ListGroups", "DescribeGroups", "DeleteGroups", "InitProducerId", "AddPartitionsToTxn",
    "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "WriteTxnMarkers", "DescribeProducers",
    "DescribeTransactions", "ListTransactions", "SaslHandshake", "SaslAuthenticate", "CreateAcls",
    "DescribeAcls", "DeleteAcls", "AlterReplicaLogDirs", "DescribeLogDirs",
    "AlterPartitionReassignments", "ListPartitionReassignments", "ElectLeaders",
    "BrokerRegistration", "BrokerHeartbeat", "AlterPartition", "Vote", "BeginQuorumEpoch",
    "EndQuorumEpoch", "FetchSnapshot", "DescribeQuorum", "AllocateProducerIds", "UnregisterBroker",
    "DescribeTopicPartitions", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    "DescribeClientQuotas", "AlterClientQuotas", "Envelope",
)

# Lowest version we transcribe; absent means Kafka's full range. DESIGN §4: every version Kafka 3.9
# serves, so no API has a floor today (Produce v0-2 and Fetch v0-3 came with message formats v0/v1,
# issue 23); the mechanism stays for an API whose old versions we cannot serve.
VERSION_FLOORS: dict[str, int] = {}

# Group coordinator records: file stem -> record type (the key's version number on disk).
GROUP_RECORD_TYPES: dict[str, int] = {
    "OffsetCommit": 1, "GroupMetadata": 2, "ConsumerGroupMetadata": 3,
    "ConsumerGroupPartitionMetadata": 4, "ConsumerGroupMemberMetadata": 5,
    "ConsumerGroupTargetAssignmentMetadata": 6, "ConsumerGroupTargetAssignmentMember": 7,
    "ConsumerGroupCurrentMemberAssignment": 8,
}

# KRaft control records: name -> ControlRecordType value.
RAFT_CONTROL_TYPES: dict[str, int] = {
    "LeaderChangeMessage": 2, "SnapshotHeaderRecord": 3, "SnapshotFooterRecord": 4,
    "KRaftVersionRecord": 5, "VotersRecord": 6,
}

DATA_MESSAGES: tuple[str, ...] = (
    "ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "DefaultPrincipalData",
)

TOP_KEYS: tuple[str, ...] = (
    "apiKey", "type", "name", "about", "validVersions", "flexibleVersions", "fields", "commonStructs",
)
FIELD_KEYS: tuple[str, ...] = (
    "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "mapKey", "ignorable",
    "default", "entityType", "flexibleVersions", "about", "fields",
)
PRIMITIVES: frozenset[str] = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "string", "bytes",
    "uuid", "records",
})
KNOWN_TYPES: frozenset[str] = frozenset({
    "request", "response", "header", "metadata", "data", "coordinator-key", "coordinator-value",
})
TAG_BASE = 10000  # first tag number kafka-ext uses for its own tagged fields

VERSION_RE = re.compile(r"^(\d+)(\+|-(\d+))?$")


@dataclass(slots=True, frozen=True)
class VersionRange:
    """An inclusive version range; `high` None means open-ended, `empty` means "none"."""

    low: int
    high: int | None
    empty: bool = False

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse Kafka's "3+", "1-4", "2" or "none"."""
        if text == "none":
            return cls(0, -1, empty=True)
        match = VERSION_RE.match(text)
        if match is None:
            raise ValueError(f"bad version range {text!r}")
        low = int(match.group(1))
        if match.group(2) == "+":
            return cls(low, None)
        high = int(match.group(3)) if match.group(3) is not None else low
        return cls(low, high)

    def contains(self, version: int) -> bool:
        """Whether `version` lies in this range."""
        if self.empty:
            return False
        return self.low <= version and (self.high is None or version <= self.high)

    def intersects(self, other: VersionRange) -> bool:
        """Whether the two ranges share a version."""
        if self.empty or other.empty:
            return False
        top_a = self.high if self.high is not None else 1 << 30
        top_b = other.high if other.high is not None else 1 << 30
        return max(self.low, other.low) <= min(top_a, top_b)


def load_kafka_json(path: Path) -> dict[str, Any]:
    """Read one of Kafka's definition files, dropping its `//` comment lines."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("//")]
    return json.loads("\n".join(lines))


def clean_field(field: dict[str, Any], floor: int) -> dict[str, Any] | None:
    """A field without prose, or None when it only existed below `floor`."""
    field = dict(field)
    if "versions" not in field:
        # Kafka lets a tagged-only field omit `versions`; it then equals taggedVersions.
        field["versions"] = field["taggedVersions"]
    if "default" in field and not isinstance(field["default"], str):
        field["default"] = json.dumps(field["default"])  # the dialect writes defaults as strings
    if isinstance(field.get("tag"), str):
        field["tag"] = int(field["tag"])  # a few of Kafka's files quote the tag number
    versions = VersionRange.parse(field["versions"])
    if versions.high is not None and versions.high < floor:
        return None
    out: dict[str, Any] = {}
    for key in FIELD_KEYS:
        if key == "about" or key not in field:
            continue
        if key == "fields":
            kept = [c for c in (clean_field(f, floor) for f in field["fields"]) if c is not None]
            out["fields"] = kept
        else:
            out[key] = field[key]
    return out


def struct_names_used(fields: list[dict[str, Any]], into: set[str]) -> None:
    """Collect every struct type named by `fields`, recursively."""
    for field in fields:
        base = field["type"].removeprefix("[]")
        if base not in PRIMITIVES:
            into.add(base)
        struct_names_used(field.get("fields", []), into)


def transcribe(raw: dict[str, Any], floor: int = 0, **overrides: Any) -> dict[str, Any]:
    """One cleaned schema: Kafka's facts only, version floor applied, `overrides` on top."""
    src = dict(raw)
    src.update(overrides)
    if floor:
        top = VersionRange.parse(src["validVersions"]).high
        src["validVersions"] = f"{floor}-{top}" if top != floor else str(floor)
    fields = [c for c in (clean_field(f, floor) for f in src["fields"]) if c is not None]
    out: dict[str, Any] = {}
    for key in TOP_KEYS:
        if key == "fields":
            out["fields"] = fields
        elif key == "commonStructs" and "commonStructs" in src:
            used: set[str] = set()
            struct_names_used(fields, used)
            structs = []
            for cs in src["commonStructs"]:
                cleaned = clean_field(cs, floor)
                if cleaned is not None:
                    struct_names_used(cleaned.get("fields", []), used)
                    structs.append(cleaned)
            structs = [cs for cs in structs if cs["name"] in used]
            if structs:
                out["commonStructs"] = structs
        elif key in src and key != "commonStructs":
            out[key] = src[key]
    return out


# ---------------------------------------------------------------------------------------------
# kafka-ext extensions to standard messages: tagged fields numbered from 10000 (DESIGN.md §1/§4).
# ---------------------------------------------------------------------------------------------

CHUNK_STRUCT_FIELDS: list[dict[str, Any]] = [
    {"name": "StartOffset", "type": "int64", "versions": "9+", "default": "-1",
     "about": "First offset held by the chunk."},
    {"name": "StartTimestamp", "type": "int64", "versions": "9+", "default": "-1",
     "about": "Timestamp (ms) of the chunk's start offset."},
    {"name": "StopOffset", "type": "int64", "versions": "9+", "default": "-1",
     "about": "Last offset a reader may read from the chunk (inclusive)."},
    {"name": "EndOffset", "type": "int64", "versions": "9+", "default": "-1",
     "about": "Last offset stored in the chunk (inclusive)."},
    {"name": "ReplicaNodes", "type": "[]int32", "versions": "9+", "entityType": "brokerId",
     "about": "Brokers that host a replica of the chunk."},
    {"name": "IsrNodes", "type": "[]int32", "versions": "9+", "entityType": "brokerId",
     "about": "Brokers that hold a complete copy of the chunk."},
]


def ext(name: str, type_: str, tag: int, flexible_from: str, about: str,
        **extra: Any) -> dict[str, Any]:
    """A kafka-ext tagged field present from the struct's first flexible version."""
    field: dict[str, Any] = {"name": name, "type": type_, "versions": flexible_from}
    nullable = extra.pop("nullableVersions", None)
    if nullable is not None:
        field["nullableVersions"] = nullable
    field["taggedVersions"] = flexible_from
    field["tag"] = tag
    field.update(extra)
    field["about"] = about
    return field


def find_struct(schema: dict[str, Any], path: list[str]) -> list[dict[str, Any]]:
    """The `fields` list reached by following field names from the top of `schema`."""
    fields = schema["fields"]
    for name in path:
        match = [f for f in fields if f["name"] == name]
        if not match:
            raise KeyError(f"{schema['name']}: no field {name!r} on the way to {path}")
        fields = match[0]["fields"]
    return fields


def metadata_response_extensions(schema: dict[str, Any]) -> None:
    """Chunks (seed 000), partition mode (seed 002), produce gateways (seed 003) per partition."""
    partition = find_struct(schema, ["Topics", "Partitions"])
    partition.append(ext(
        "StartOffset", "int64", TAG_BASE, "9+",
        "Chunks: start offset of the active chunk; -1 when the partition has no chunks.",
        default="-1"))
    partition.append(ext(
        "Chunks", "[]MetadataResponseChunk", TAG_BASE + 1, "9+",
        "Chunks: the inactive chunks of the partition, oldest first.",
        ignorable=True, fields=copy.deepcopy(CHUNK_STRUCT_FIELDS)))
    partition.append(ext(
        "Mode", "int8", TAG_BASE + 2, "9+",
        "Partition reduction: 0 ReadWrite, 1 ReadOnly, -1 None.", default="0"))
    partition.append(ext(
        "PreferredProduceBrokers", "[]int32", TAG_BASE + 3, "9+",
        "Diskless: produce gateways of the partition's coordinator, in the client's rack first.",
        entityType="brokerId"))


def produce_request_extensions(schema: dict[str, Any]) -> None:
    """KIP-253: the partition count the producer used when choosing a partition."""
    topic = find_struct(schema, ["TopicData"])
    topic.append(ext(
        "PartitionNumber", "int32", TAG_BASE, "9+",
        "KIP-253: the topic's partition count the producer expects; -1 skips the check.",
        default="-1"))


def heartbeat_position_struct(side: str) -> list[dict[str, Any]]:
    """KIP-253 topic entry of a Heartbeat request or response (`side` is Request/Response)."""
    return [
        {"name": "Topic", "type": "string", "versions": "4+", "entityType": "topicName",
         "about": "Topic name."},
        {"name": "Partitions", "type": f"[]Heartbeat{side}Partition", "versions": "4+",
         "about": "Partitions of the topic.", "fields": [
             {"name": "Partition", "type": "int32", "versions": "4+", "about": "Partition index."},
             {"name": "NeedPosition", "type": "bool", "versions": "4+", "default": "false",
              "about": "Ask the other side to include its position of this partition next time."},
             {"name": "Position", "type": "int64", "versions": "4+", "default": "-1",
              "about": "Position of the partition: the member's (request) or the group's "
                       "(response); -1 if unknown."},
         ]},
    ]


def heartbeat_request_extensions(schema: dict[str, Any]) -> None:
    """KIP-253: positions the coordinator asked for, and partitions whose position we want."""
    schema["fields"].append(ext(
        "Topics", "[]HeartbeatRequestTopic", TAG_BASE, "4+",
        "KIP-253: positions reported by the member and positions it asks for.",
        fields=heartbeat_position_struct("Request")))


def heartbeat_response_extensions(schema: dict[str, Any]) -> None:
    """KIP-253: the group's positions the member asked for, and positions the group wants."""
    schema["fields"].append(ext(
        "Topics", "[]HeartbeatResponseTopic", TAG_BASE, "4+",
        "KIP-253: the group's positions of requested partitions and positions asked from the member.",
        fields=heartbeat_position_struct("Response")))


def partition_record_extensions(schema: dict[str, Any]) -> None:
    """Chunk start, partition mode, KIP-253 prior epochs and diskless coordinator of a partition."""
    change = schema["name"] == "PartitionChangeRecord"
    unchanged = "; -1 if unchanged" if change else ""
    schema["fields"].append(ext(
        "StartOffset", "int64", TAG_BASE, "0+",
        f"Chunks: start offset of the active chunk{unchanged}.", default="-1"))
    schema["fields"].append(ext(
        "StartTimestamp", "int64", TAG_BASE + 1, "0+",
        f"Chunks: timestamp (ms) of the active chunk's start offset{unchanged}.", default="-1"))
    schema["fields"].append(ext(
        "Mode", "int8", TAG_BASE + 2, "0+",
        "Partition reduction: 0 ReadWrite, 1 ReadOnly, -1 None"
        + ("; -2 if unchanged." if change else "."), default="-2" if change else "0"))
    if change:
        return
    schema["fields"].append(ext(
        "PriorLeaderEpochs", "[]PriorLeaderEpoch", TAG_BASE + 3, "0+",
        "KIP-253: leader epoch of each lower-numbered partition when this one was created.",
        fields=[
            {"name": "Partition", "type": "int32", "versions": "0+",
             "about": "A partition with a smaller index."},
            {"name": "LeaderEpoch", "type": "int32", "versions": "0+",
             "about": "Its leader epoch when this partition was created."},
        ]))
    schema["fields"].append(ext(
        "DisklessCoordinator", "int32", TAG_BASE + 4, "0+",
        "Diskless: partition of __diskless_metadata whose coordinator owns this partition; "
        "-1 for classic partitions.", default="-1"))


def vote_pre_vote(schema: dict[str, Any]) -> None:
    """KIP-996 (Kafka 4.0): Vote v2 adds PreVote; our reference definitions predate it."""
    schema["validVersions"] = "0-2"
    if schema["type"] == "request":
        partition = schema["fields"][-1]["fields"][-1]
        partition["fields"].append({"name": "PreVote", "type": "bool", "versions": "2+",
                                    "about": "Whether this is a pre-vote (no epoch change)."})


def envelope_response_extensions(schema: dict[str, Any]) -> None:
    """KIP-590 forwarding: the metadata offset the controller had applied when it answered,
    so the forwarding broker answers only once its own metadata has caught up with it."""
    schema["fields"].append(ext(
        "CommittedOffset", "int64", TAG_BASE, "0+",
        "Offset after the last metadata record the controller had applied.", default="-1"))


EXTENSIONS: dict[str, Any] = {
    "EnvelopeResponse": envelope_response_extensions,
    "VoteRequest": vote_pre_vote,
    "VoteResponse": vote_pre_vote,
    "MetadataResponse": metadata_response_extensions,
    "ProduceRequest": produce_request_extensions,
    "HeartbeatRequest": heartbeat_request_extensions,
    "HeartbeatResponse": heartbeat_response_extensions,
    "PartitionRecord": partition_record_extensions,
    "PartitionChangeRecord": partition_record_extensions,
}


def write_schema(path: Path, schema: dict[str, Any]) -> None:
    """Write one schema as 2-space indented JSON with a trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=2) + "\n")


def extend(schema: dict[str, Any]) -> dict[str, Any]:
    """Apply our tagged-field extensions to `schema` if it has any."""
    hook = EXTENSIONS.get(schema["name"])
    if hook is not None:
        hook(schema)
    return schema


def generate(source: Path, out: Path) -> int:
    """Write every standard schema; return how many files were written."""
    written = 0
    msg = source / "message"
    for header in ("RequestHeader", "ResponseHeader"):
        write_schema(out / "headers" / f"{header}.json", transcribe(load_kafka_json(msg / f"{header}.json")))
        written += 1
    for api in STANDARD_APIS:
        floor = VERSION_FLOORS.get(api, 0)
        for kind, folder in (("Request", "requests"), ("Response", "responses")):
            raw = load_kafka_json(msg / f"{api}{kind}.json")
            write_schema(out / folder / f"{api}{kind}.json", extend(transcribe(raw, floor)))
            written += 1
    for path in sorted((source / "metadata").glob("*.json")):
        if path.stem == "ZkMigrationRecord":
            continue
        write_schema(out / "records" / "metadata" / path.name, extend(transcribe(load_kafka_json(path))))
        written += 1
    for path in sorted((source / "group-coordinator").glob("*.json")):
        if path.stem.startswith("Share"):
            continue
        stem = path.stem
        kind = "coordinator-key" if stem.endswith("Key") else "coordinator-value"
        record_type = GROUP_RECORD_TYPES[stem.removesuffix("Key").removesuffix("Value")]
        schema = transcribe(load_kafka_json(path), apiKey=record_type, type=kind)
        write_schema(out / "records" / "group" / path.name, schema)
        written += 1
    for stem, kind in (("TransactionLogKey", "coordinator-key"), ("TransactionLogValue", "coordinator-value")):
        raw = load_kafka_json(source / "transaction-coordinator" / f"{stem}.json")
        write_schema(out / "records" / "txn" / f"{stem}.json", transcribe(raw, apiKey=0, type=kind))
        written += 1
    write_schema(out / "records" / "raft" / "QuorumStateData.json",
                 transcribe(load_kafka_json(source / "raft" / "QuorumStateData.json")))
    written += 1
    for name, control_type in RAFT_CONTROL_TYPES.items():
        schema = transcribe(load_kafka_json(msg / f"{name}.json"), apiKey=control_type)
        write_schema(out / "records" / "raft" / f"{name}.json", schema)
        written += 1
    write_schema(out / "records" / "storage" / "ProducerSnapshot.json",
                 transcribe(load_kafka_json(source / "storage" / "ProducerSnapshot.json")))
    written += 1
    for name in DATA_MESSAGES:
        write_schema(out / "data" / f"{name}.json", transcribe(load_kafka_json(msg / f"{name}.json")))
        written += 1
    return written


# ---------------------------------------------------------------------------------------------
# Self-check over every committed schema (standard and hand-written).
# ---------------------------------------------------------------------------------------------

def check_fields(where: str, fields: list[dict[str, Any]], flexible: VersionRange,
                 valid: VersionRange, structs: set[str], problems: list[str]) -> None:
    """Check one struct's fields: versions parse, tags unique and only in flexible versions."""
    tags: dict[int, str] = {}
    names: set[str] = set()
    for field in fields:
        name = field.get("name", "?")
        here = f"{where}.{name}"
        for key in field:
            if key not in FIELD_KEYS:
                problems.append(f"{here}: unknown key {key!r}")
        if name in names:
            problems.append(f"{here}: duplicate field name")
        names.add(name)
        try:
            versions = VersionRange.parse(field["versions"])
            for key in ("nullableVersions", "taggedVersions", "flexibleVersions"):
                if key in field:
                    VersionRange.parse(field[key])
        except (KeyError, ValueError) as exc:
            problems.append(f"{here}: {exc}")
            continue
        if not versions.intersects(valid):
            problems.append(f"{here}: versions {field['versions']} outside validVersions")
        if ("tag" in field) != ("taggedVersions" in field):
            problems.append(f"{here}: tag and taggedVersions must come together")
        if "taggedVersions" in field:
            tagged = VersionRange.parse(field["taggedVersions"])
            if tagged.low < flexible.low or flexible.empty:
                problems.append(f"{here}: taggedVersions {field['taggedVersions']} not flexible")
            tag = field["tag"]
            if not isinstance(tag, int) or tag < 0:
                problems.append(f"{here}: bad tag {tag!r}")
            elif tag in tags:
                problems.append(f"{here}: tag {tag} also used by {tags[tag]}")
            else:
                tags[tag] = name
        ftype = field.get("type", "")
        base = ftype.removeprefix("[]")
        if base not in PRIMITIVES:
            if "fields" in field:
                if base in structs:
                    problems.append(f"{here}: struct {base} defined twice")
                structs.add(base)
            check_fields(here, field.get("fields", []), flexible, valid, structs, problems)


def collect_struct_refs(fields: list[dict[str, Any]], refs: set[str]) -> None:
    """Every non-primitive type named in `fields`."""
    for field in fields:
        base = field.get("type", "").removeprefix("[]")
        if base not in PRIMITIVES:
            refs.add(base)
        collect_struct_refs(field.get("fields", []), refs)


def check_schema(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """Check one file; append every problem found."""
    try:
        schema = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        problems.append(f"{path}: not JSON: {exc}")
        return None
    where = schema.get("name", path.stem)
    for key in schema:
        if key not in TOP_KEYS:
            problems.append(f"{where}: unknown top-level key {key!r}")
    if schema.get("type") not in KNOWN_TYPES:
        problems.append(f"{where}: bad type {schema.get('type')!r}")
    if schema.get("type") in ("request", "response") and not isinstance(schema.get("apiKey"), int):
        problems.append(f"{where}: request/response without apiKey")
    if where != path.stem:
        problems.append(f"{path}: name {where!r} differs from the file name")
    try:
        valid = VersionRange.parse(schema["validVersions"])
        flexible = VersionRange.parse(schema["flexibleVersions"])
    except (KeyError, ValueError) as exc:
        problems.append(f"{where}: {exc}")
        return schema
    structs: set[str] = set()
    for cs in schema.get("commonStructs", []):
        if cs["name"] in structs:
            problems.append(f"{where}: common struct {cs['name']} defined twice")
        structs.add(cs["name"])
        check_fields(f"{where}/{cs['name']}", cs["fields"], flexible, valid, structs, problems)
    check_fields(where, schema["fields"], flexible, valid, structs, problems)
    refs: set[str] = set()
    collect_struct_refs(schema["fields"], refs)
    for cs in schema.get("commonStructs", []):
        collect_struct_refs(cs["fields"], refs)
    for ref in sorted(refs - structs):
        problems.append(f"{where}: type {ref} is not defined")
    return schema


def check_all(out: Path) -> list[str]:
    """Check every schema under `out`, plus unique API keys per (folder, type)."""
    problems: list[str] = []
    seen: dict[tuple[str, str, int], str] = {}
    files = sorted(out.rglob("*.json"))
    for path in files:
        schema = check_schema(path, problems)
        if schema is None or "apiKey" not in schema:
            continue
        slot = (str(path.parent.relative_to(out)), schema["type"], schema["apiKey"])
        if slot in seen:
            problems.append(f"{path.name}: apiKey {schema['apiKey']} also used by {seen[slot]}")
        seen[slot] = path.name
    for path in (out / "requests").glob("*Request.json"):
        partner = out / "responses" / (path.stem.removesuffix("Request") + "Response.json")
        if not partner.exists():
            problems.append(f"{path.name}: no response schema")
            continue
        req, resp = json.loads(path.read_text()), json.loads(partner.read_text())
        for key in ("apiKey", "validVersions", "flexibleVersions"):
            if req.get(key) != resp.get(key):
                problems.append(f"{path.name}: {key} differs from its response")
    if not files:
        problems.append(f"{out}: no schemas")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Generate the standard schemas (unless --check-only) and check everything."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.check_only:
        count = generate(args.source, args.out)
        print(f"wrote {count} standard schemas to {args.out}")
    problems = check_all(args.out)
    for problem in problems:
        print(problem, file=sys.stderr)
    total = len(list(args.out.rglob("*.json")))
    print(f"checked {total} schemas: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
