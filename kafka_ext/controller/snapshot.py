"""KRaft snapshots of the metadata image (KIP-630): Kafka's MetadataImage.write(ImageWriter),
RecordsSnapshotWriter/RecordsSnapshotReader framing and Snapshots' file names.

`image_records` turns a MetadataImage into the records whose replay from an empty image gives
it back; `snapshot_bytes`/`decode_snapshot` frame records as a snapshot (pure, no I/O); the
file functions at the end store them as `<end offset:020d>-<epoch:010d>.checkpoint` in the
metadata partition's dir, as Kafka does. The file functions block on disk: call them off the
event loop.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kafka_ext.controller.delegation_tokens import delegation_token_records
from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.metadata_log import decode_metadata_record, encode_metadata_record
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import NO_PARTITION_LEADER_EPOCH
from kafka_ext.protocol.records import (
    ControlRecordType,
    Record,
    build_batch,
    control_record,
    control_record_type,
    decode_records,
)
from kafka_ext.security.sasl import SCRAM_MECHANISMS
from kafka_ext.storage.checkpoints import CorruptCheckpointError, fsync_dir, write_atomically

METADATA_VERSION_FEATURE = "metadata.version"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"  # a snapshot being written; a leftover after a crash
DELETED_SUFFIX = ".checkpoint.deleted"  # Kafka renames a snapshot to this before deleting it
# A snapshot's records go in batches of at most this many bytes (one bigger record goes alone).
MAX_BATCH_BYTES = 1024 * 1024
# Upper bound of a v2 record's bytes beyond its value: length, attributes, timestamp and offset
# deltas, null key, value length and header count varints. Keeps batches under the limit.
_RECORD_OVERHEAD_BYTES = 28
_SNAPSHOT_NAME = re.compile(r"^([0-9]{20})-([0-9]{10})\.checkpoint$")
_CONTROL_NAMES = {ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeaderRecord",
                  ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooterRecord",
                  ControlRecordType.KRAFT_VERSION: "KRaftVersionRecord",
                  ControlRecordType.KRAFT_VOTERS: "VotersRecord"}


# -- the image as records (MetadataImage.write) ----------------------------------------------


def image_records(image: MetadataImage) -> list[Any]:
    """The records whose replay from an empty image rebuilds `image` (offset aside).

    In Kafka's order (features with metadata.version first, cluster, topics, configs, client
    quotas, producer ids), each part sorted, so equal images give equal records. ValueError
    for an image whose topics by name and by id disagree (a TopicRecord reused a live name):
    no sequence of records this writes rebuilds it.
    """
    _check_topics(image)
    return [*_feature_records(image), *_broker_records(image), *_log_dir_records(image),
            *_topic_records(image),
            *_config_records(image), *_client_quota_records(image),
            *_scram_records(image), *_acl_records(image), *delegation_token_records(image),
            *_producer_id_records(image)]


_PRIOR_EPOCH = registry()["PartitionRecord"].cls.PriorLeaderEpoch


def _new(record_type: str, **fields: Any) -> Any:
    return registry()[record_type].cls(**fields)


def _check_topics(image: MetadataImage) -> None:
    by_name, by_id = image.topics_by_name, image.topics_by_id
    names = sorted({t.name for t in by_id.values() if by_name.get(t.name) != t}
                   | {t.name for t in by_name.values() if by_id.get(t.topic_id) != t})
    if names:
        raise ValueError(f"the image's topics by name and by id disagree on {names}: "
                         "no snapshot rebuilds it")


def _feature_records(image: MetadataImage) -> Iterator[Any]:
    # metadata.version first: Kafka reads it before any record whose meaning depends on it.
    for name in sorted(image.features, key=lambda n: (n != METADATA_VERSION_FEATURE, n)):
        yield _new("FeatureLevelRecord", name=name, feature_level=image.features[name])


def _broker_records(image: MetadataImage) -> Iterator[Any]:
    """Each registered broker as its RegisterBrokerRecord (fenced and shutting-down state
    included); its log dirs follow in _log_dir_records."""
    cls = registry()["RegisterBrokerRecord"].cls
    for broker_id in sorted(image.brokers):
        b = image.brokers[broker_id]
        yield cls(broker_id=b.broker_id, incarnation_id=b.incarnation_id,
                  broker_epoch=b.broker_epoch, rack=b.rack, fenced=b.fenced,
                  in_controlled_shutdown=b.in_controlled_shutdown, features=[],
                  end_points=[cls.BrokerEndpoint(name=e.listener_name, host=e.host,
                                                 port=e.port,
                                                 security_protocol=e.security_protocol)
                              for e in b.endpoints], log_dirs=[])


def _log_dir_records(image: MetadataImage) -> Iterator[Any]:
    """KIP-858 dirs per broker. The image keeps no broker registration (endpoints, epoch), so
    these are BrokerRegistrationChangeRecords with LogDirs only, as the controller writes them.
    An offline dir is one that left the set: list online + offline first, then online alone."""
    for broker in sorted(image.broker_log_dirs.keys() | image.offline_log_dirs.keys()):
        online = image.broker_log_dirs.get(broker, ())
        offline = image.offline_log_dirs.get(broker, ())
        if offline:
            yield _new("BrokerRegistrationChangeRecord", broker_id=broker, broker_epoch=-1,
                       log_dirs=[*online, *offline])
        yield _new("BrokerRegistrationChangeRecord", broker_id=broker, broker_epoch=-1,
                   log_dirs=list(online))


def _topic_records(image: MetadataImage) -> Iterator[Any]:
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        yield _new("TopicRecord", name=name, topic_id=topic.topic_id)
        for partition_id in sorted(topic.partitions):
            p = topic.partitions[partition_id]
            yield _new("PartitionRecord", partition_id=partition_id, topic_id=topic.topic_id,
                       replicas=list(p.replicas), isr=list(p.isr), leader=p.leader,
                       leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                       diskless_coordinator=p.diskless_coordinator,
                       adding_replicas=list(p.adding_replicas),
                       removing_replicas=list(p.removing_replicas),
                       directories=list(p.directories),
                       prior_leader_epochs=[_PRIOR_EPOCH(partition=q, leader_epoch=e)
                                            for q, e in p.prior_leader_epochs],
                       mode=p.mode, start_offset=p.start_offset,
                       start_timestamp=p.start_timestamp,
                       eligible_leader_replicas=list(p.elr) if p.elr else None,
                       last_known_elr=list(p.last_known_elr) if p.last_known_elr else None)
            for c in p.chunks:
                yield _new("ChunkRecord", partition_id=partition_id, topic_id=topic.topic_id,
                           start_offset=c.start_offset, start_timestamp=c.start_timestamp,
                           stop_offset=c.stop_offset, end_offset=c.end_offset,
                           chunk_epoch=c.chunk_epoch, replicas=list(c.replicas),
                           directories=list(c.directories), isr=list(c.isr),
                           removing_replicas=list(c.removing_replicas),
                           adding_replicas=list(c.adding_replicas), epoch=c.partition_epoch,
                           max_timestamp=c.max_timestamp, size_bytes=c.size_bytes)
        if topic.deletion is not None:
            yield _new("DeleteTopicPartitionsRecord", topic_id=topic.topic_id,
                       delete_partitions=topic.deletion.first_removed,
                       delete_partitions_delay_timestamp=topic.deletion.delete_at_ms,
                       create_timestamp=topic.deletion.requested_ms)


def _config_records(image: MetadataImage) -> Iterator[Any]:
    for (resource_type, resource_name), values in sorted(image.configs.items()):
        if not values:
            # The image keeps a resource whose last config was deleted, as {}; a delete of a
            # config it never had rebuilds exactly that.
            yield _new("ConfigRecord", resource_type=resource_type,
                       resource_name=resource_name, name="", value=None)
        for name in sorted(values):
            yield _new("ConfigRecord", resource_type=resource_type,
                       resource_name=resource_name, name=name, value=values[name])


def _client_quota_records(image: MetadataImage) -> Iterator[Any]:
    entity_cls = registry()["ClientQuotaRecord"].cls.EntityData
    # A None name (the default entity) sorts before every name, without comparing None to str.
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: [
            (entity_type, name is not None, name or "") for entity_type, name in item[0]]):
        for key in sorted(values):
            yield _new("ClientQuotaRecord", key=key, value=values[key], remove=False,
                       entity=[entity_cls(entity_type=t, entity_name=n) for t, n in entity])


def _scram_records(image: MetadataImage) -> Iterator[Any]:
    for user in sorted(image.scram_credentials):
        mechanisms = image.scram_credentials[user]
        for mechanism in sorted(mechanisms):
            credential = mechanisms[mechanism]
            yield _new("UserScramCredentialRecord", name=user,
                       mechanism=SCRAM_MECHANISMS[mechanism], salt=credential.salt,
                       stored_key=credential.stored_key, server_key=credential.server_key,
                       iterations=credential.iterations)


def _acl_records(image: MetadataImage) -> Iterator[Any]:
    for acl_id in sorted(image.acls):
        acl = image.acls[acl_id]
        yield _new("AccessControlEntryRecord", id=acl_id, resource_type=acl.resource_type,
                   resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                   principal=acl.principal, host=acl.host, operation=acl.operation,
                   permission_type=acl.permission_type)


def _producer_id_records(image: MetadataImage) -> Iterator[Any]:
    if image.next_producer_id > 0:  # 0 is an empty image's: nothing handed out yet
        yield _new("ProducerIdsRecord", broker_id=-1, broker_epoch=-1,
                   next_producer_id=image.next_producer_id)


# -- snapshot framing (RecordsSnapshotWriter / RecordsSnapshotReader), pure ------------------


def snapshot_bytes(records: Sequence[Any], *, last_contained_log_time_ms: int,
                   controls: Iterable[tuple[ControlRecordType, Any]] = (),
                   partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                   max_batch_bytes: int = MAX_BATCH_BYTES) -> bytes:
    """Kafka's snapshot layout, offsets from 0: a control batch (SnapshotHeaderRecord, then
    `controls` such as KRaftVersionRecord and VotersRecord), the metadata records in batches of
    at most max_batch_bytes, a SnapshotFooterRecord batch. Every timestamp is
    last_contained_log_time_ms, so the same arguments give the same bytes."""
    time_ms = last_contained_log_time_ms
    header = _new("SnapshotHeaderRecord", version=0, last_contained_log_timestamp=time_ms)
    head = [(ControlRecordType.SNAPSHOT_HEADER, header), *controls]
    out = bytearray(build_batch([_control(i, t, m, time_ms) for i, (t, m) in enumerate(head)],
                                is_control=True, partition_leader_epoch=partition_leader_epoch))
    offset = len(head)
    for values in _batched(records, max_batch_bytes):
        out += build_batch([Record(offset + i, time_ms, None, v) for i, v in enumerate(values)],
                           base_offset=offset, partition_leader_epoch=partition_leader_epoch)
        offset += len(values)
    footer = _new("SnapshotFooterRecord", version=0)
    out += build_batch([_control(offset, ControlRecordType.SNAPSHOT_FOOTER, footer, time_ms)],
                       base_offset=offset, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)
    return bytes(out)


def _control(offset: int, control_type: ControlRecordType, message: Any, time_ms: int) -> Record:
    value = bytearray()
    registry()[type(message).__name__].encode_into(message, 0, value, None)
    return control_record(control_type, bytes(value), offset=offset, timestamp_ms=time_ms)


def _batched(records: Sequence[Any], max_batch_bytes: int) -> Iterator[list[bytes]]:
    """The framed record values, cut into batches that stay within max_batch_bytes."""
    values: list[bytes] = []
    size = 0
    for record in records:
        value = encode_metadata_record(record)
        cost = len(value) + _RECORD_OVERHEAD_BYTES
        if values and size + cost > max_batch_bytes:
            yield values
            values, size = [], 0
        values.append(value)
        size += cost
    if values:
        yield values


def decode_snapshot(data: bytes, *, partition_leader_epoch: int | None = None
                    ) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(control records by type name, (type name, record) of each metadata record) of a whole
    snapshot; DecodeError unless it is batches with offsets 0, 1, ... that open with a
    SnapshotHeaderRecord and end with a SnapshotFooterRecord, each batch of the same partition
    leader epoch (`partition_leader_epoch`, else the first batch's)."""
    reg = registry()
    controls: dict[str, Any] = {}
    records: list[tuple[str, Any]] = []
    pos = next_offset = 0
    while pos < len(data):
        header, batch = decode_records(data, pos)  # a torn or lying batch raises here
        if partition_leader_epoch is None:
            partition_leader_epoch = header.partition_leader_epoch
        # The voters checkpoint `storage format --standalone` wrote before snapshots carried
        # their epoch has none (-1): still the snapshot its name says.
        if header.partition_leader_epoch not in (partition_leader_epoch,
                                                 NO_PARTITION_LEADER_EPOCH):
            raise DecodeError(f"batch at {pos} has partition leader epoch "
                              f"{header.partition_leader_epoch}, not {partition_leader_epoch}")
        for record in batch:
            if "SnapshotFooterRecord" in controls:
                raise DecodeError(f"offset {record.offset} follows the SnapshotFooterRecord")
            if record.offset != next_offset:
                raise DecodeError(f"record at offset {record.offset}, expected {next_offset}")
            if record.value is None:
                raise DecodeError(f"record at offset {record.offset} has no value")
            if not header.is_control:
                records.append(decode_metadata_record(record.value))
            else:
                name = _CONTROL_NAMES.get(control_record_type(record))
                if name is not None:
                    controls[name], _ = reg[name].decode(record.value, 0, 0)
            if next_offset == 0 and "SnapshotHeaderRecord" not in controls:
                raise DecodeError("the snapshot does not open with a SnapshotHeaderRecord")
            next_offset += 1
        if next_offset != header.next_offset:
            raise DecodeError(f"batch at {pos} ends at offset {next_offset}, its header says "
                              f"{header.next_offset}")
        pos += header.size_bytes
    if "SnapshotFooterRecord" not in controls:
        raise DecodeError("not a whole snapshot: no SnapshotFooterRecord")
    return controls, records


# -- snapshot files (Kafka's Snapshots and FileRawSnapshotWriter) ----------------------------


def snapshot_path(partition_dir: Path, end_offset: int, epoch: int) -> Path:
    """`<end offset>-<epoch>.checkpoint`: the snapshot of every record before end_offset."""
    return partition_dir / f"{end_offset:020d}-{epoch:010d}{SNAPSHOT_SUFFIX}"


def read_snapshot(path: Path, *, partition_leader_epoch: int | None = None
                  ) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """`decode_snapshot` of a file; CorruptCheckpointError naming it if it does not parse."""
    try:
        return decode_snapshot(path.read_bytes(), partition_leader_epoch=partition_leader_epoch)
    except DecodeError as exc:
        raise CorruptCheckpointError(path, str(exc)) from None


def write_snapshot(partition_dir: Path, end_offset: int, epoch: int, image: MetadataImage,
                   last_contained_log_time_ms: int, *,
                   max_batch_bytes: int = MAX_BATCH_BYTES) -> Path:
    """Write `image` (the state after every record before end_offset) as the snapshot
    (end_offset, epoch): through a `.checkpoint.part` file, fsynced, renamed, dir fsynced."""
    path = snapshot_path(partition_dir, end_offset, epoch)
    data = snapshot_bytes(image_records(image), partition_leader_epoch=epoch,
                          last_contained_log_time_ms=last_contained_log_time_ms,
                          max_batch_bytes=max_batch_bytes)
    write_atomically(path, data, tmp_suffix=".part")
    return path


def read_snapshot_image(path: Path) -> MetadataImage:
    """The image a snapshot file holds, at offset end_offset - 1; CorruptCheckpointError naming
    the file if its name, framing or records are not a snapshot's."""
    parsed = _SNAPSHOT_NAME.match(path.name)
    if parsed is None:
        raise CorruptCheckpointError(path, "not a snapshot file name (<offset>-<epoch>.checkpoint)")
    end_offset, epoch = int(parsed[1]), int(parsed[2])
    _, records = read_snapshot(path, partition_leader_epoch=epoch)
    try:
        image = MetadataImage().apply_all(0, records)
    except KeyError as exc:  # an appliers' lookup: a partition of a topic the snapshot lacks
        raise CorruptCheckpointError(path, f"a record refers to {exc} before it exists") from None
    return replace(image, offset=end_offset - 1)


def list_snapshots(partition_dir: Path) -> list[tuple[int, int]]:
    """(end offset, epoch) of every whole snapshot, sorted. Deletes the `.checkpoint.part` and
    `.checkpoint.deleted` leftovers of a crash, as Kafka's log does when it opens: call it at
    start-up, never while a snapshot is being written."""
    found: list[tuple[int, int]] = []
    removed = False
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return []
    for name in names:
        parsed = _SNAPSHOT_NAME.match(name)
        if parsed is not None:
            found.append((int(parsed[1]), int(parsed[2])))
        elif _is_leftover(name):
            (partition_dir / name).unlink(missing_ok=True)
            removed = True
    if removed:
        fsync_dir(partition_dir)
    return sorted(found)


def _is_leftover(name: str) -> bool:
    """Whether name is a snapshot's name with Kafka's partial or deleted suffix."""
    return any(name.endswith(suffix)
               and _SNAPSHOT_NAME.match(name.removesuffix(suffix) + SNAPSHOT_SUFFIX) is not None
               for suffix in (PARTIAL_SUFFIX, DELETED_SUFFIX))


def delete_snapshot(partition_dir: Path, end_offset: int, epoch: int) -> bool:
    """Delete the snapshot (end_offset, epoch) durably; False if there was none."""
    path = snapshot_path(partition_dir, end_offset, epoch)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(partition_dir)
    return True
