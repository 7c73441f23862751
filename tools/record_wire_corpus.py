"""Record real stock-client requests for the wire fuzzer's corpus (tests/data/wire_corpus/).

Starts a broker, puts a loopback TCP proxy in front of it (the broker advertises the proxy, so
every connection the clients open goes through it), drives kafka-python, confluent-kafka and
aiokafka through typical work (metadata, admin calls, plain, compressed, idempotent and
transactional produce, fetch, list offsets, classic and KIP-848 consumer groups), and saves
each client-to-broker frame, size prefix included, as one `.bin` file: the first frame of each
(client, API key, version, flavour), where the flavour tells Produce batches apart by codec and
producer kind and Metadata/Fetch requests by whether they name topics. `corpus.json` lists the
files and the topics the requests name, which the fuzzer creates on the broker it attacks.

Usage: python tools/record_wire_corpus.py [--out DIR]    (re-runnable; replaces DIR's files)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import aiokafka  # noqa: E402
import aiokafka.admin  # noqa: E402
import confluent_kafka  # noqa: E402
import kafka  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource  # noqa: E402
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka.protocol.admin.topics import ElectionType  # noqa: E402

from kafka_ext.protocol.errors import DecodeError  # noqa: E402
from kafka_ext.protocol.framing import decode_request_header  # noqa: E402
from kafka_ext.protocol.messages import registry  # noqa: E402
from kafka_ext.protocol.record_batch import (  # noqa: E402
    COMPRESSION_MASK,
    MAGIC_POS,
    TRANSACTIONAL_FLAG,
    Compression,
    iter_batch_headers,
)
from tests.integration.conftest import BrokerProcess, free_port  # noqa: E402

OUT = ROOT / "tests" / "data" / "wire_corpus"
# Bigger frames are left out: the corpus stays small and mutations stay cheap.
MAX_FRAME_BYTES = 16 * 1024
LEGACY_ATTRIBUTES_POS = 17  # of a magic v0/v1 message: offset, size, crc, magic, attributes
CLIENTS = {"rdkafka": "confluent", "kafka-python": "kafka-python", "aiokafka": "aiokafka"}

# The topics the recorded requests name, with their partition counts.
TOPICS = {
    "wire-corpus-plain": 3,
    "wire-corpus-compressed": 1,
    "wire-corpus-txn": 1,
    "wire-corpus-group": 2,
    "wire-corpus-kip848": 2,
    "wire-corpus-admin": 2,
}
# A codec of the topic's own: batches in the producers' other codecs are decompressed and
# recompressed on append, so mutated compressed bytes reach the broker's decompressors.
TOPIC_CONFIGS = {"wire-corpus-compressed": {"compression.type": "lz4"}}
DOOMED_TOPIC = "wire-corpus-doomed"  # created and deleted by the admin clients
TIMEOUT_S = 30.0
log = logging.getLogger("record_wire_corpus")


# -- the proxy -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded:
    client: str
    api_key: int
    api_version: int
    flavour: str
    frame: bytes  # size prefix included


class Recorder:
    """Keeps the first frame of each (client, api key, version, flavour); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kept: dict[tuple[str, int, int, str], Recorded] = {}
        self.seen = 0

    def add(self, frame: bytes) -> None:
        body = frame[4:]
        try:
            header, pos = decode_request_header(body)
        except DecodeError:
            return
        client = next((name for prefix, name in CLIENTS.items()
                       if (header.client_id or "").startswith(prefix)), None)
        if client is None or len(frame) > MAX_FRAME_BYTES:
            return
        api_key, version = header.request_api_key, header.request_api_version
        flavour = _flavour(api_key, version, body, pos)
        key = (client, api_key, version, flavour)
        with self._lock:
            self.seen += 1
            self.kept.setdefault(key, Recorded(client, api_key, version, flavour, frame))


def _flavour(api_key: int, version: int, body: bytes, pos: int) -> str:
    """What tells requests of one API apart for the fuzzer: codec and producer of a Produce
    batch, topics named or not in Metadata, partitions or an empty incremental Fetch."""
    mtype = registry().requests.get(api_key)
    if mtype is None or version not in mtype.versions:
        return ""
    try:
        request, _ = mtype.decode(body, version, pos)
    except DecodeError:
        return "undecodable"
    if api_key == 0:
        flavours = set()
        for topic in request.topic_data:
            for part in topic.partition_data:
                records = bytes(part.records or b"")
                if len(records) > LEGACY_ATTRIBUTES_POS and records[MAGIC_POS] < 2:
                    codec = Compression(records[LEGACY_ATTRIBUTES_POS] & COMPRESSION_MASK)
                    flavours.add(f"{codec.name.lower()}-magic{records[MAGIC_POS]}")
                    continue
                for _, h in iter_batch_headers(records):
                    name = Compression(h.attributes & COMPRESSION_MASK).name.lower()
                    kind = ("txn" if h.attributes & TRANSACTIONAL_FLAG
                            else "idempotent" if h.producer_id >= 0 else "plain")
                    flavours.add(f"{name}-{kind}")
        return "+".join(sorted(flavours)) or "empty"
    if api_key == 3:
        return "all" if request.topics is None else "named" if request.topics else "none"
    if api_key == 1:
        return "partitions" if request.topics else "empty"
    return ""


class Proxy:
    """Loopback TCP proxy: forwards both ways, hands each client-to-broker frame to the recorder."""

    def __init__(self, port: int, target_port: int, recorder: Recorder) -> None:
        self.target_port = target_port
        self.recorder = recorder
        self.port = port
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray()
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
                buf += chunk
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if size < 0 or len(buf) < 4 + size:
                        break
                    self.recorder.add(bytes(buf[:4 + size]))
                    del buf[:4 + size]
        except OSError:
            pass
        finally:
            _close_both(src, dst)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            _close_both(src, dst)

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()


def _close_both(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


# -- the clients' work -------------------------------------------------------------------------


def _step(what: str, fn: Callable[[], Any]) -> None:
    """Run one piece of client work; a failure is logged, not fatal (its frames still count)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - a recording step the broker refuses is still recorded
        log.warning("%s failed: %r", what, exc)


def drive_confluent(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def wait(futures: dict[Any, Any]) -> None:
        for future in futures.values():
            future.result(timeout=TIMEOUT_S)

    _step("create topics", lambda: wait(admin.create_topics(
        [NewTopic(name, count, 1, config=TOPIC_CONFIGS.get(name, {}))
         for name, count in TOPICS.items()]
        + [NewTopic(DOOMED_TOPIC, 1, 1)], operation_timeout=TIMEOUT_S)))
    _step("describe topics", lambda: admin.list_topics(timeout=TIMEOUT_S))
    _step("create partitions", lambda: wait(admin.create_partitions(
        [NewPartitions("wire-corpus-admin", 3)], validate_only=True)))
    topic_config = ConfigResource(ConfigResource.Type.TOPIC, "wire-corpus-admin")
    _step("describe configs", lambda: wait(admin.describe_configs(
        [topic_config, ConfigResource(ConfigResource.Type.BROKER, "1")])))
    _step("incremental alter configs", lambda: wait(admin.incremental_alter_configs([
        ConfigResource(ConfigResource.Type.TOPIC, "wire-corpus-admin", incremental_configs=[
            confluent_kafka.admin.ConfigEntry(
                "retention.ms", "86400000",
                incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)])])))
    _step("describe cluster", lambda: admin.describe_cluster().result(timeout=TIMEOUT_S))
    acls = confluent_kafka.admin.AclBindingFilter(  # None: any name, principal, host
        confluent_kafka.admin.ResourceType.ANY, None,  # type: ignore[arg-type]
        confluent_kafka.admin.ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
        confluent_kafka.admin.AclOperation.ANY, confluent_kafka.admin.AclPermissionType.ANY)
    _step("describe acls", lambda: admin.describe_acls(acls).result(timeout=TIMEOUT_S))
    _step("describe scram", lambda: admin.describe_user_scram_credentials().result(  # type: ignore[union-attr]
        timeout=TIMEOUT_S))

    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        topic = "wire-corpus-plain" if codec == "none" else "wire-corpus-compressed"
        _step(f"produce {codec}", partial(_confluent_produce, bootstrap, topic, {
            "compression.type": codec, "enable.idempotence": False}))
    _step("produce idempotent", lambda: _confluent_produce(
        bootstrap, "wire-corpus-plain", {"enable.idempotence": True}))
    _step("transaction", lambda: _confluent_transaction(bootstrap))
    _step("classic group", lambda: _confluent_group(bootstrap, {}, "wire-corpus-group",
                                                    "wire-corpus-classic-confluent"))
    _step("kip848 group", lambda: _confluent_group(
        bootstrap, {"group.protocol": "consumer"}, "wire-corpus-kip848",
        "wire-corpus-kip848-confluent"))
    _step("list offsets", lambda: wait(admin.list_offsets({
        confluent_kafka.TopicPartition("wire-corpus-plain", 0):
            confluent_kafka.admin.OffsetSpec.latest(),
        confluent_kafka.TopicPartition("wire-corpus-plain", 1):
            confluent_kafka.admin.OffsetSpec.earliest()})))
    _step("list groups", lambda: admin.list_consumer_groups().result(timeout=TIMEOUT_S))
    _step("describe groups", lambda: wait(admin.describe_consumer_groups(
        ["wire-corpus-classic-confluent", "wire-corpus-kip848-confluent"])))
    _step("group offsets", lambda: wait(admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions("wire-corpus-classic-confluent")])))
    _step("alter group offsets", lambda: wait(admin.alter_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions("wire-corpus-classic-confluent", [
            confluent_kafka.TopicPartition("wire-corpus-group", 0, 1)])])))
    _step("delete records", lambda: wait(admin.delete_records(
        [confluent_kafka.TopicPartition("wire-corpus-plain", 2, 1)])))
    _step("delete groups", lambda: wait(admin.delete_consumer_groups(
        ["wire-corpus-classic-confluent"])))
    _step("delete topics", lambda: wait(admin.delete_topics([DOOMED_TOPIC],
                                                            operation_timeout=TIMEOUT_S)))


def _confluent_produce(bootstrap: str, topic: str, config: dict[str, Any]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                         **config})
    for i in range(5):
        producer.produce(topic, key=b"k%d" % i if i % 2 else None, value=b"v%d" % i * 10,
                         partition=i % TOPICS.get(topic, 1),
                         headers=[("h", b"x%d" % i)] if i % 3 == 0 else None)
    producer.produce(topic, key=b"tombstone", value=None, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def _confluent_transaction(bootstrap: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": "wire-corpus-txn-confluent"})
    producer.init_transactions(TIMEOUT_S)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap,
                                         "group.id": "wire-corpus-txn-group"})
    producer.begin_transaction()
    for i in range(3):
        producer.produce("wire-corpus-txn", value=b"t%d" % i, partition=0)
    producer.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("wire-corpus-plain", 0, 1)],
        consumer.consumer_group_metadata(), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("wire-corpus-txn", value=b"aborted", partition=0)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    consumer.close()


def _confluent_group(bootstrap: str, config: dict[str, Any], topic: str, group: str) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False,
                                         "isolation.level": "read_committed", **config})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    for _ in range(10):
        consumer.poll(0.2)
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=TIMEOUT_S)
    consumer.offsets_for_times([confluent_kafka.TopicPartition("wire-corpus-plain", 0, 0)],
                               timeout=TIMEOUT_S)
    consumer.close()


def drive_kafka_python(bootstrap: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    _step("create topics", lambda: admin.create_topics(
        [kafka.admin.NewTopic(DOOMED_TOPIC, 1, 1)]))
    _step("describe configs", lambda: admin.describe_configs(
        [kafka.admin.ConfigResource("TOPIC", "wire-corpus-admin"),
         kafka.admin.ConfigResource("BROKER", "1")]))
    _step("alter configs", lambda: admin.alter_configs(
        [kafka.admin.ConfigResource("TOPIC", "wire-corpus-admin",
                                    configs={"retention.ms": "86400000"})]))
    _step("create partitions", lambda: admin.create_partitions(
        {"wire-corpus-admin": kafka.admin.NewPartitions(3)}, validate_only=True))
    _step("describe cluster", admin.describe_cluster)
    _step("describe topics", lambda: admin.describe_topics(["wire-corpus-plain"]))
    _step("describe log dirs", admin.describe_log_dirs)
    _step("list groups", admin.list_groups)
    _step("describe features", admin.describe_features)
    _step("describe quorum", admin.describe_metadata_quorum)
    _step("describe topic partitions", lambda: admin.describe_topic_partitions(
        ["wire-corpus-plain"]))
    _step("list reassignments", admin.list_partition_reassignments)
    _step("describe scram", admin.describe_user_scram_credentials)
    _step("describe acls", lambda: admin.describe_acls(kafka.admin.ACLFilter(
        principal=None, host=None, operation=kafka.admin.ACLOperation.ANY,
        permission_type=kafka.admin.ACLPermissionType.ANY,
        resource_pattern=kafka.admin.ResourcePatternFilter(
            kafka.admin.ResourceType.ANY, None, kafka.admin.ACLResourcePatternType.ANY))))

    for python_codec in (None, "gzip", "lz4", "zstd"):
        topic = "wire-corpus-plain" if python_codec is None else "wire-corpus-compressed"
        _step(f"produce {python_codec}", partial(_kafka_python_produce, bootstrap, topic, {
            "compression_type": python_codec, "enable_idempotence": python_codec is None}))
    _step("produce plain", lambda: _kafka_python_produce(
        bootstrap, "wire-corpus-plain", {"enable_idempotence": False}))
    _step("transaction", lambda: _kafka_python_transaction(bootstrap))
    _step("describe transactions", lambda: admin.describe_transactions(
        ["wire-corpus-txn-kafka-python"]))
    _step("list transactions", admin.list_transactions)
    _step("describe producers", lambda: admin.describe_producers(
        [kafka.TopicPartition("wire-corpus-plain", 0)]))
    _step("list offsets", lambda: admin.list_partition_offsets(
        {kafka.TopicPartition("wire-corpus-plain", 0): kafka.admin.OffsetSpec.LATEST}))
    _step("group", lambda: _kafka_python_group(bootstrap))
    _step("describe groups", lambda: admin.describe_groups(
        ["wire-corpus-classic-kafka-python"]))
    _step("group offsets", lambda: admin.list_group_offsets(
        {"wire-corpus-classic-kafka-python": None}))
    _step("alter group offsets", lambda: admin.alter_group_offsets(
        "wire-corpus-classic-kafka-python",
        {kafka.TopicPartition("wire-corpus-group", 1): kafka.OffsetAndMetadata(1, "", -1)}))
    _step("delete records", lambda: admin.delete_records(
        {kafka.TopicPartition("wire-corpus-plain", 2): 1}))
    _step("elect leaders", lambda: admin.elect_leaders(
        ElectionType.PREFERRED, [kafka.TopicPartition("wire-corpus-plain", 0)],
        raise_errors=False))
    _step("delete groups", lambda: admin.delete_groups(["wire-corpus-classic-kafka-python"]))
    # Old protocol versions: message format v0/v1 on Produce, down-converted Fetch answers.
    for old in ((0, 10, 1), (0, 9)):
        for old_codec in (None, "gzip"):
            _step(f"produce {old_codec} as {old}", partial(
                _kafka_python_produce, bootstrap, "wire-corpus-plain",
                {"compression_type": old_codec, "api_version": old, "enable_idempotence": False},
                headers=False))
        _step(f"fetch as {old}", partial(_kafka_python_fetch, bootstrap, old))
    _step("delete topics", lambda: admin.delete_topics([DOOMED_TOPIC]))
    admin.close()


def _kafka_python_produce(bootstrap: str, topic: str, config: dict[str, Any],
                          headers: bool = True) -> None:
    """Five records, with keys and (where the message format has them) headers."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, **config)
    for i in range(5):
        producer.send(topic, key=b"k%d" % i if i % 2 else None, value=b"v%d" % i * 10,
                      partition=i % TOPICS.get(topic, 1),
                      headers=[("h", b"x%d" % i)] if headers and i % 3 == 0 else None)
    producer.flush(TIMEOUT_S)
    producer.close(timeout=10)


def _kafka_python_fetch(bootstrap: str, api_version: tuple[int, ...]) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                                   group_id=None, auto_offset_reset="earliest",
                                   enable_auto_commit=False)
    tp = kafka.TopicPartition("wire-corpus-plain", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    for _ in range(5):
        consumer.poll(timeout_ms=200)
    consumer.end_offsets([tp])
    consumer.close()


def _kafka_python_transaction(bootstrap: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap,
                                   transactional_id="wire-corpus-txn-kafka-python")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send("wire-corpus-txn", value=b"t%d" % i, partition=0)
    producer.send_offsets_to_transaction(
        {kafka.TopicPartition("wire-corpus-plain", 0): kafka.OffsetAndMetadata(1, "", -1)},
        "wire-corpus-txn-group")
    producer.commit_transaction()
    producer.close(timeout=10)


def _kafka_python_group(bootstrap: str) -> None:
    consumer = kafka.KafkaConsumer("wire-corpus-group", bootstrap_servers=bootstrap,
                                   group_id="wire-corpus-classic-kafka-python",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   isolation_level="read_committed")
    deadline = time.monotonic() + TIMEOUT_S
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=200)
    for _ in range(5):
        consumer.poll(timeout_ms=200)
    consumer.commit({kafka.TopicPartition("wire-corpus-group", 0):
                     kafka.OffsetAndMetadata(1, "", -1)})
    consumer.committed(kafka.TopicPartition("wire-corpus-group", 0))
    consumer.end_offsets([kafka.TopicPartition("wire-corpus-plain", 0)])
    consumer.offsets_for_times({kafka.TopicPartition("wire-corpus-plain", 0): 0})
    consumer.close()


def drive_aiokafka(bootstrap: str) -> None:
    asyncio.run(_aiokafka_work(bootstrap))


async def _astep(what: str, coro: Any) -> None:
    try:
        await coro
    except Exception as exc:  # noqa: BLE001 - as _step
        log.warning("%s failed: %r", what, exc)


async def _aiokafka_work(bootstrap: str) -> None:
    admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await _astep("create topics", admin.create_topics([aiokafka.admin.NewTopic(
        DOOMED_TOPIC, 1, 1)]))
    await _astep("describe configs", admin.describe_configs([AioConfigResource(
        AioConfigResourceType.TOPIC, "wire-corpus-admin")], include_synonyms=True))
    await _astep("create partitions", admin.create_partitions(
        {"wire-corpus-admin": aiokafka.admin.NewPartitions(3)}, validate_only=True))
    await _astep("describe topics", admin.describe_topics(["wire-corpus-plain"]))
    await _astep("describe cluster", admin.describe_cluster())
    await _astep("list groups", admin.list_consumer_groups())
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        topic = "wire-corpus-plain" if codec is None else "wire-corpus-compressed"
        await _astep(f"produce {codec}", _aiokafka_produce(
            bootstrap, topic, {"compression_type": codec}))
    await _astep("produce idempotent", _aiokafka_produce(
        bootstrap, "wire-corpus-plain", {"enable_idempotence": True}))
    await _astep("transaction", _aiokafka_transaction(bootstrap))
    await _astep("group", _aiokafka_group(bootstrap))
    await _astep("describe groups", admin.describe_consumer_groups(
        ["wire-corpus-classic-aiokafka"]))
    await _astep("group offsets", admin.list_consumer_group_offsets(
        "wire-corpus-classic-aiokafka"))
    await _astep("delete records", admin.delete_records(
        {aiokafka.TopicPartition("wire-corpus-plain", 2): aiokafka.admin.RecordsToDelete(1)}))
    await _astep("delete topics", admin.delete_topics([DOOMED_TOPIC]))
    await admin.close()


async def _aiokafka_produce(bootstrap: str, topic: str, config: dict[str, Any]) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=b"k%d" % i if i % 2 else None,
                                       value=b"v%d" % i * 10, partition=i % TOPICS.get(topic, 1),
                                       headers=[("h", b"x%d" % i)] if i % 3 == 0 else None)
                   for i in range(5)]
        for future in futures:
            await future
    finally:
        await producer.stop()


async def _aiokafka_transaction(bootstrap: str) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap,
                                         transactional_id="wire-corpus-txn-aiokafka")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(3):
                await producer.send("wire-corpus-txn", value=b"t%d" % i, partition=0)
            await producer.send_offsets_to_transaction(
                {aiokafka.TopicPartition("wire-corpus-plain", 0): 1}, "wire-corpus-txn-group")
    finally:
        await producer.stop()


async def _aiokafka_group(bootstrap: str) -> None:
    consumer = aiokafka.AIOKafkaConsumer("wire-corpus-group", bootstrap_servers=bootstrap,
                                         group_id="wire-corpus-classic-aiokafka",
                                         auto_offset_reset="earliest",
                                         enable_auto_commit=False,
                                         isolation_level="read_committed")
    await consumer.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200)
        for _ in range(5):
            await consumer.getmany(timeout_ms=200)
        await consumer.commit({aiokafka.TopicPartition("wire-corpus-group", 0): 1})
        await consumer.committed(aiokafka.TopicPartition("wire-corpus-group", 0))
        await consumer.end_offsets([aiokafka.TopicPartition("wire-corpus-plain", 0)])
        await consumer.offsets_for_times({aiokafka.TopicPartition("wire-corpus-plain", 0): 0})
    finally:
        await consumer.stop()


DRIVERS: dict[str, Callable[[str], None]] = {
    "confluent": drive_confluent,
    "kafka-python": drive_kafka_python,
    "aiokafka": drive_aiokafka,
}


# -- writing the corpus ------------------------------------------------------------------------


def file_name(r: Recorded) -> str:
    api = registry().requests[r.api_key].name.removesuffix("Request") \
        if r.api_key in registry().requests else f"Key{r.api_key}"
    flavour = f"-{r.flavour}" if r.flavour else ""
    return f"{r.client}-{r.api_key:02d}-{api}-v{r.api_version}{flavour}.bin"


def write_corpus(out: Path, kept: list[Recorded]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.bin"):
        old.unlink()
    entries = []
    for r in sorted(kept, key=file_name):
        name = file_name(r)
        (out / name).write_bytes(r.frame)
        entries.append({"file": name, "client": r.client, "api_key": r.api_key,
                        "api_version": r.api_version, "flavour": r.flavour,
                        "bytes": len(r.frame)})
    topics = {name: {"partitions": count, "config": TOPIC_CONFIGS.get(name, {})}
              for name, count in {**TOPICS, DOOMED_TOPIC: 1}.items()}
    manifest = {"topics": topics, "frames": entries}
    (out / "corpus.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for chatty in ("kafka", "aiokafka"):  # their connection logs drown the recorder's
        logging.getLogger(chatty).setLevel(logging.CRITICAL)
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="wire-corpus-") as tmp:
        proxy_port = free_port()
        broker = BrokerProcess(Path(tmp) / "data", {
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
            "group.initial.rebalance.delay.ms": "0"})
        broker.start()
        proxy = Proxy(proxy_port, broker.port, recorder)
        try:
            bootstrap = f"127.0.0.1:{proxy.port}"
            for name, drive in DRIVERS.items():
                log.info("driving %s", name)
                drive(bootstrap)
        finally:
            proxy.stop()
            broker.stop()
    kept = list(recorder.kept.values())
    write_corpus(args.out, kept)
    total = sum(len(r.frame) for r in kept)
    print(f"{recorder.seen} frames seen, {len(kept)} kept ({total} bytes) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
