"""Topic and config administration against a real broker with the three stock admin clients:
confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiokafka.errors
import confluent_kafka
import kafka
import kafka.errors
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from clients import (
    ADMIN_TIMEOUT_S,
    confluent_admin,
    consume_confluent,
    create_topic,
    expected_messages,
    make_records,
    new_topic_name,
    produce_confluent,
    wait_until,
    watermarks_confluent,
)
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka.admin import AlterConfigOp, ConfigResourceType, KafkaAdminClient

TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40


@pytest.fixture
def kp_admin(broker: Any) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield admin
    admin.close()


def confluent_error(future: Any) -> KafkaError:
    """The KafkaError a failed admin future carries."""
    with pytest.raises(KafkaException) as excinfo:
        future.result(timeout=ADMIN_TIMEOUT_S)
    return excinfo.value.args[0]


def topic_names(broker: Any) -> set[str]:
    return set(confluent_admin(broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics)


def partition_count(broker: Any, topic: str) -> int:
    meta = confluent_admin(broker.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    return len(meta.topics[topic].partitions)


def run_aio_admin(broker: Any, action: Any) -> Any:
    """Start an AIOKafkaAdminClient, await `action(admin)`, close the client."""

    async def run() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await action(admin)
        finally:
            await admin.close()

    return asyncio.run(run())


# --- confluent-kafka AdminClient --------------------------------------------------------------


def test_confluent_create_describe_and_delete_topic(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-admin")
    futures = admin.create_topics([NewTopic(topic, 4, 1, config={"retention.ms": "3600000"})])
    assert futures[topic].result(timeout=ADMIN_TIMEOUT_S) is None

    meta = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics[topic]
    assert meta.error is None
    assert sorted(meta.partitions) == [0, 1, 2, 3]
    for partition in meta.partitions.values():
        assert partition.leader == 1
        assert partition.replicas == [1]
        assert partition.isrs == [1]

    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    described = admin.describe_topics(
        confluent_kafka.TopicCollection([topic]))[topic].result(timeout=ADMIN_TIMEOUT_S)
    assert described.name == topic
    assert [p.id for p in described.partitions] == [0, 1, 2, 3]

    assert admin.delete_topics([topic])[topic].result(timeout=ADMIN_TIMEOUT_S) is None
    wait_until(lambda: topic not in topic_names(broker), ADMIN_TIMEOUT_S, "topic to vanish")


def test_confluent_validate_only_create_does_not_create(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-validate")
    futures = admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True)
    assert futures[topic].result(timeout=ADMIN_TIMEOUT_S) is None
    assert topic not in topic_names(broker)
    # The name is still free: a real create succeeds afterwards.
    assert admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(
        timeout=ADMIN_TIMEOUT_S) is None
    assert partition_count(broker, topic) == 2


def test_confluent_create_existing_topic_is_topic_already_exists(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-exists")
    create_topic(broker.bootstrap, topic, 3)
    err = confluent_error(admin.create_topics([NewTopic(topic, 1, 1)])[topic])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert partition_count(broker, topic) == 3


def test_confluent_replication_factor_above_broker_count_is_invalid(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-rf")
    err = confluent_error(admin.create_topics([NewTopic(topic, 1, 3)])[topic])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert topic not in topic_names(broker)


def test_confluent_create_partitions_grows_topic_and_rejects_decrease(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-partitions")
    create_topic(broker.bootstrap, topic, 2)
    produce_confluent(broker.bootstrap, topic, make_records(10, partitions=2))

    futures = admin.create_partitions([NewPartitions(topic, 5)])
    assert futures[topic].result(timeout=ADMIN_TIMEOUT_S) is None
    wait_until(lambda: partition_count(broker, topic) == 5, ADMIN_TIMEOUT_S, "5 partitions")
    # The new partitions take writes; the old ones kept theirs.
    assert produce_confluent(broker.bootstrap, topic, make_records(5, partitions=5)) == [
        5, 5, 0, 0, 0]

    err = confluent_error(admin.create_partitions([NewPartitions(topic, 3)])[topic])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    err = confluent_error(admin.create_partitions([NewPartitions(topic, 5)])[topic])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    assert partition_count(broker, topic) == 5


def test_confluent_incremental_alter_config_shows_as_dynamic_topic_config(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-alter")
    create_topic(broker.bootstrap, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
    ])
    assert admin.incremental_alter_configs([resource])[resource].result(
        timeout=ADMIN_TIMEOUT_S) is None

    described = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([described])[described].result(timeout=ADMIN_TIMEOUT_S)
    for name, value in (("retention.ms", "7200000"), ("max.message.bytes", "65536")):
        assert configs[name].value == value
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # DELETE puts the default back.
    reset = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([reset])[reset].result(timeout=ADMIN_TIMEOUT_S)
    configs = admin.describe_configs([described])[described].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "65536"


def test_confluent_alter_config_with_bad_value_is_invalid_config(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-bad-config")
    create_topic(broker.bootstrap, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)])
    err = confluent_error(admin.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_CONFIG

    described = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([described])[described].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["retention.ms"].value == "604800000"


def test_confluent_create_topic_with_bad_config_is_invalid_config(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-bad-create")
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "shred"})])
    assert confluent_error(futures[topic]).code() == KafkaError.INVALID_CONFIG
    assert topic not in topic_names(broker)


def test_confluent_describe_cluster_names_the_single_broker(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    cluster = admin.describe_cluster().result(timeout=ADMIN_TIMEOUT_S)
    assert cluster.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]
    assert cluster.controller.id == 1
    assert admin.list_topics(timeout=ADMIN_TIMEOUT_S).cluster_id == cluster.cluster_id


def test_confluent_delete_unknown_topic_is_unknown_topic(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-missing")
    err = confluent_error(admin.delete_topics([topic])[topic])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- kafka-python KafkaAdminClient ------------------------------------------------------------


def test_kafka_python_create_list_describe_and_delete_topic(
        broker: Any, kp_admin: KafkaAdminClient) -> None:
    topic = new_topic_name("kp-admin")
    result = kp_admin.create_topics(
        {topic: {"num_partitions": 3, "replication_factor": 1,
                 "configs": {"segment.bytes": "1048576"}}})
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
    assert topic in kp_admin.list_topics()

    [described] = kp_admin.describe_topics([topic])
    assert described["name"] == topic
    assert described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]

    configs = kp_admin.describe_configs(
        [kafka.admin.ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    topic_configs = configs["topic"][topic]
    assert topic_configs["segment.bytes"]["value"] == "1048576"
    assert topic_configs["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic_configs["cleanup.policy"]["value"] == "delete"

    deleted = kp_admin.delete_topics([topic])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic, 0)]
    wait_until(lambda: topic not in kp_admin.list_topics(), ADMIN_TIMEOUT_S, "topic to vanish")


def test_kafka_python_validate_only_and_create_errors(
        broker: Any, kp_admin: KafkaAdminClient) -> None:
    topic = new_topic_name("kp-errors")
    kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                           validate_only=True)
    assert topic not in kp_admin.list_topics()

    kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kafka.errors.TopicAlreadyExistsError):
        kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})

    other = new_topic_name("kp-rf")
    result = kp_admin.create_topics({other: {"num_partitions": 1, "replication_factor": 2}},
                                    raise_errors=False)
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [
        (other, INVALID_REPLICATION_FACTOR)]
    assert other not in kp_admin.list_topics()


def test_kafka_python_create_partitions_and_incremental_alter_configs(
        broker: Any, kp_admin: KafkaAdminClient) -> None:
    topic = new_topic_name("kp-partitions")
    create_topic(broker.bootstrap, topic, 1)
    kp_admin.create_partitions({topic: 4})
    wait_until(lambda: partition_count(broker, topic) == 4, ADMIN_TIMEOUT_S, "4 partitions")
    with pytest.raises(kafka.errors.InvalidPartitionsError):
        kp_admin.create_partitions({topic: 2})

    kp_admin.alter_configs([kafka.admin.ConfigResource(
        ConfigResourceType.TOPIC, topic,
        {"retention.bytes": (AlterConfigOp.SET, "1048576")})], incremental=True)
    configs = kp_admin.describe_configs(
        [kafka.admin.ConfigResource(ConfigResourceType.TOPIC, topic, ["retention.bytes"])],
        config_filter="all")["topic"][topic]
    assert configs["retention.bytes"]["value"] == "1048576"
    assert configs["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

    result = kp_admin.alter_configs([kafka.admin.ConfigResource(
        ConfigResourceType.TOPIC, topic,
        {"retention.bytes": (AlterConfigOp.SET, "lots")})], incremental=True)
    assert str(result["topic"][topic]).startswith(
        f"[Error {INVALID_CONFIG}] InvalidConfigurationError")


def test_kafka_python_describe_cluster_and_log_dirs(
        broker: Any, kp_admin: KafkaAdminClient) -> None:
    topic = new_topic_name("kp-logdirs")
    create_topic(broker.bootstrap, topic, 2)
    produce_confluent(broker.bootstrap, topic, make_records(100, partitions=2))

    cluster = kp_admin.describe_cluster()
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, "127.0.0.1", broker.port)]
    assert cluster["controller_id"] == 1
    assert cluster["cluster_id"]

    [per_broker] = kp_admin.describe_log_dirs({topic: [0, 1]})
    assert per_broker["broker"] == 1
    [log_dir] = per_broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.data_dir)
    [topic_entry] = [t for t in log_dir["topics"] if t["name"] == topic]
    partitions = {p["partition_index"]: p for p in topic_entry["partitions"]}
    assert sorted(partitions) == [0, 1]
    for p in (0, 1):
        on_disk = sum(f.stat().st_size
                      for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))
        assert partitions[p]["partition_size"] == on_disk > 0
        assert partitions[p]["is_future_key"] is False


# --- aiokafka AIOKafkaAdminClient -------------------------------------------------------------


def test_aiokafka_create_list_describe_and_delete_topic(broker: Any) -> None:
    topic = new_topic_name("aio-admin")

    async def create(admin: AIOKafkaAdminClient) -> Any:
        return await admin.create_topics([AioNewTopic(
            topic, 2, 1, topic_configs={"retention.ms": "86400000"})])

    response = run_aio_admin(broker, create)
    assert [(t[0], t[1]) for t in response.topic_errors] == [(topic, 0)]
    assert topic in run_aio_admin(broker, lambda a: a.list_topics())

    async def describe(admin: AIOKafkaAdminClient) -> Any:
        return await admin.describe_configs(
            [AioConfigResource(AioConfigResourceType.TOPIC, topic)])

    [configs_response] = run_aio_admin(broker, describe)
    [resource] = configs_response.resources
    error_code, _message, _type, name, entries = resource[:5]
    assert (error_code, name) == (0, topic)
    values = {e[0]: e[1] for e in entries}
    assert values["retention.ms"] == "86400000"
    assert values["cleanup.policy"] == "delete"

    async def delete(admin: AIOKafkaAdminClient) -> Any:
        return await admin.delete_topics([topic])

    response = run_aio_admin(broker, delete)
    assert [tuple(t[:2]) for t in response.topic_error_codes] == [(topic, 0)]
    wait_until(lambda: topic not in topic_names(broker), ADMIN_TIMEOUT_S, "topic to vanish")


def test_aiokafka_create_errors_validate_only_and_create_partitions(broker: Any) -> None:
    topic = new_topic_name("aio-errors")
    bad_rf = new_topic_name("aio-rf")

    async def scenario(admin: AIOKafkaAdminClient) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["validate"] = await admin.create_topics([AioNewTopic(topic, 3, 1)],
                                                    validate_only=True)
        out["after_validate"] = await admin.list_topics()
        out["create"] = await admin.create_topics([AioNewTopic(topic, 3, 1)])
        out["again"] = await admin.create_topics([AioNewTopic(topic, 3, 1)])
        out["bad_rf"] = await admin.create_topics([AioNewTopic(bad_rf, 1, 5)])
        await admin.create_partitions({topic: AioNewPartitions(6)})
        with pytest.raises(aiokafka.errors.InvalidPartitionsError):
            await admin.create_partitions({topic: AioNewPartitions(2)})
        return out

    out = run_aio_admin(broker, scenario)
    assert [tuple(t[:2]) for t in out["validate"].topic_errors] == [(topic, 0)]
    assert topic not in out["after_validate"]
    assert [tuple(t[:2]) for t in out["create"].topic_errors] == [(topic, 0)]
    assert [tuple(t[:2]) for t in out["again"].topic_errors] == [(topic, TOPIC_ALREADY_EXISTS)]
    assert [tuple(t[:2]) for t in out["bad_rf"].topic_errors] == [
        (bad_rf, INVALID_REPLICATION_FACTOR)]
    wait_until(lambda: partition_count(broker, topic) == 6, ADMIN_TIMEOUT_S, "6 partitions")


def test_aiokafka_alter_configs_and_describe_cluster(broker: Any) -> None:
    topic = new_topic_name("aio-alter")
    create_topic(broker.bootstrap, topic)

    async def scenario(admin: AIOKafkaAdminClient) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["alter"] = await admin.alter_configs([AioConfigResource(
            AioConfigResourceType.TOPIC, topic, {"retention.ms": "5000"})])
        out["bad"] = await admin.alter_configs([AioConfigResource(
            AioConfigResourceType.TOPIC, topic, {"retention.ms": "soon"})])
        out["describe"] = await admin.describe_configs(
            [AioConfigResource(AioConfigResourceType.TOPIC, topic, {"retention.ms": None})])
        out["cluster"] = await admin.describe_cluster()
        return out

    out = run_aio_admin(broker, scenario)
    [alter] = out["alter"]
    assert [tuple(r[:2]) for r in alter.resources] == [(0, None)] or [
        r[0] for r in alter.resources] == [0]
    [bad] = out["bad"]
    assert [r[0] for r in bad.resources] == [INVALID_CONFIG]
    [describe] = out["describe"]
    [resource] = describe.resources
    entries = {e[0]: e for e in resource[4]}
    assert entries["retention.ms"][1] == "5000"
    cluster = out["cluster"]
    assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, "127.0.0.1", broker.port)]


def test_confluent_describe_broker_configs_shows_static_overrides(broker_factory: Any) -> None:
    broker = broker_factory({"log.segment.bytes": "2097152", "num.partitions": "3"})
    admin = confluent_admin(broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["log.segment.bytes"].value == "2097152"
    assert configs["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].value == "3"
    assert configs["log.retention.check.interval.ms"].value == "300000"
    assert configs["log.retention.check.interval.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # A topic created without settings inherits the broker's overrides.
    topic = new_topic_name("cf-inherits")
    admin.create_topics([NewTopic(topic)])[topic].result(timeout=ADMIN_TIMEOUT_S)
    wait_until(lambda: topic in topic_names(broker), ADMIN_TIMEOUT_S, "topic metadata")
    assert partition_count(broker, topic) == 3
    described = ConfigResource(ResourceType.TOPIC, topic)
    topic_configs = admin.describe_configs([described])[described].result(timeout=ADMIN_TIMEOUT_S)
    assert topic_configs["segment.bytes"].value == "2097152"
    assert topic_configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_confluent_config_errors_for_unknown_topic_and_unknown_key(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    missing = ConfigResource(ResourceType.TOPIC, new_topic_name("cf-no-such"))
    err = confluent_error(admin.describe_configs([missing])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    topic = new_topic_name("cf-unknown-key")
    create_topic(broker.bootstrap, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
    err = confluent_error(admin.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_CONFIG


def test_deleted_topic_recreated_with_same_name_starts_empty(broker: Any) -> None:
    admin = confluent_admin(broker.bootstrap)
    topic = new_topic_name("cf-recreate")
    create_topic(broker.bootstrap, topic, 2)
    produce_confluent(broker.bootstrap, topic, make_records(100, partitions=2))
    admin.delete_topics([topic])[topic].result(timeout=ADMIN_TIMEOUT_S)
    wait_until(lambda: topic not in topic_names(broker), ADMIN_TIMEOUT_S, "topic to vanish")
    wait_until(lambda: not (broker.data_dir / f"{topic}-0").exists(), ADMIN_TIMEOUT_S,
               "the partition directory to leave its log dir")

    create_topic(broker.bootstrap, topic, 1)
    records = make_records(3)
    assert produce_confluent(broker.bootstrap, topic, records) == [0, 1, 2]
    assert watermarks_confluent(broker.bootstrap, topic, 0) == (0, 3)
    assert consume_confluent(broker.bootstrap, topic, {0: 0}, 3) == expected_messages(
        records, [0, 1, 2])


def test_new_partitions_go_to_the_log_dir_with_fewest_partitions(broker_factory: Any,
                                                                  tmp_path: Any) -> None:
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    broker = broker_factory({"log.dirs": ",".join(str(d) for d in dirs)})
    topic = new_topic_name("jbod")
    create_topic(broker.bootstrap, topic, partitions=6)

    per_dir = {d: sorted(p.name for p in d.iterdir() if p.name.startswith(topic)) for d in dirs}
    assert sorted(len(names) for names in per_dir.values()) == [3, 3]
    assert sorted(per_dir[dirs[0]] + per_dir[dirs[1]]) == sorted(f"{topic}-{p}" for p in range(6))

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [per_broker] = admin.describe_log_dirs({topic: list(range(6))})
    finally:
        admin.close()
    reported = {d["log_dir"]: sorted(f"{t['name']}-{p['partition_index']}"
                                     for t in d["topics"] for p in t["partitions"])
                for d in per_broker["log_dirs"]}
    assert reported == {str(d.resolve()): names for d, names in per_dir.items()}
