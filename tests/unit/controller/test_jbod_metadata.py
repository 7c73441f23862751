"""JBOD in the metadata: offline log dirs in the image (KIP-858) and the dynamic move throttle."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.controller.cluster_control import BrokerListener
from kafka_ext.controller.image import BROKER_RESOURCE, MetadataImage
from kafka_ext.controller.quorum_controller import ConfigChange, QuorumController, image_from_log
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.config import (
    ConfigError,
    ConfigSource,
    DynamicBrokerConfig,
    build_config,
    describe_broker_configs,
    validate_dynamic_broker_config,
)
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_config import LogConfig

DIR_A, DIR_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
SET, DELETE = 0, 1


async def _run_now(fn: Callable[[], Any]) -> Any:
    return fn()


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[QuorumController]:
    log = UnifiedLog(tmp_path / "__cluster_metadata-0", LogConfig())
    controller = QuorumController(1, log, default_partitions=1, default_replication_factor=1,
                                  validate_topic_config=lambda n, v: v, run_blocking=_run_now)
    controller.load()
    await controller.bootstrap()
    yield controller
    log.close()


def _change(broker: int, dirs: list[uuid.UUID]) -> Any:
    return registry()["BrokerRegistrationChangeRecord"].cls(broker_id=broker, broker_epoch=0,
                                                            log_dirs=dirs)


def test_a_dir_missing_from_the_registration_is_offline_until_it_returns() -> None:
    image = MetadataImage().apply(0, "BrokerRegistrationChangeRecord", _change(1, [DIR_A, DIR_B]))
    assert image.broker_log_dirs[1] == (DIR_A, DIR_B) and image.offline_log_dirs[1] == ()
    failed = image.apply(1, "BrokerRegistrationChangeRecord", _change(1, [DIR_A]))
    assert failed.broker_log_dirs[1] == (DIR_A,) and failed.offline_log_dirs[1] == (DIR_B,)
    assert image.offline_log_dirs[1] == ()  # images are never mutated
    back = failed.apply(2, "BrokerRegistrationChangeRecord", _change(1, [DIR_A, DIR_B]))
    assert back.offline_log_dirs[1] == ()


async def test_controller_records_dirs_reported_offline_and_replays_them(
        controller: QuorumController, tmp_path: Path) -> None:
    await controller.register_broker(1, uuid.uuid4(),
                                     [BrokerListener("PLAINTEXT", "localhost", 9092, 0)], None,
                                     [DIR_A, DIR_B])
    assert controller.image.broker_log_dirs[1] == (DIR_A, DIR_B)
    end = controller.log.log_end_offset
    await controller.mark_log_dirs_offline(1, [uuid.UUID(int=0xC)])  # not its dir: nothing
    assert controller.log.log_end_offset == end
    await controller.mark_log_dirs_offline(1, [DIR_B])
    assert controller.image.offline_log_dirs[1] == (DIR_B,)
    end = controller.log.log_end_offset
    await controller.mark_log_dirs_offline(1, [DIR_B])  # already offline: nothing written
    assert controller.log.log_end_offset == end
    assert image_from_log(controller.log).offline_log_dirs == {1: (DIR_B,)}


async def test_move_throttle_is_a_dynamic_broker_config(controller: QuorumController) -> None:
    await controller.alter_configs(BROKER_RESOURCE, "1",
                                   [ConfigChange("intra.broker.throttled.rate", SET, " 1000 ")],
                                   validate_only=False)
    assert controller.image.configs[(BROKER_RESOURCE, "1")] == {
        "intra.broker.throttled.rate": "1000"}
    for bad in ("0", "fast"):
        with pytest.raises(KafkaError) as caught:
            await controller.alter_configs(
                BROKER_RESOURCE, "1", [ConfigChange("intra.broker.throttled.rate", SET, bad)],
                validate_only=False)
        assert caught.value.code == ErrorCode.INVALID_CONFIG
    await controller.alter_configs(BROKER_RESOURCE, "1",
                                   [ConfigChange("intra.broker.throttled.rate", DELETE, None)],
                                   validate_only=False)
    assert controller.image.configs[(BROKER_RESOURCE, "1")] == {}


def test_only_listed_broker_configs_change_at_run_time() -> None:
    assert validate_dynamic_broker_config("intra.broker.throttled.rate", "5") == "5"
    with pytest.raises(ConfigError):
        validate_dynamic_broker_config("num.replica.move.threads", "2")


def test_describe_configs_shows_the_dynamic_throttle_first() -> None:
    config = build_config({"intra.broker.throttled.rate": "300"})
    entries = describe_broker_configs(
        DynamicBrokerConfig.of(config, {"intra.broker.throttled.rate": "100"},
                               {"intra.broker.throttled.rate": "200"}),
        ["intra.broker.throttled.rate", "log.dirs"])
    rate, dirs = entries
    assert (rate.value, rate.source, rate.read_only) == (
        "100", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in rate.synonyms][:2] == [
        ("100", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("200", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert dirs.read_only
