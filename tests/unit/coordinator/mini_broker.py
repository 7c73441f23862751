"""A broker without sockets for coordinator tests: real logs, replica manager and controller."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka_ext.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID
from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.replication.replica_manager import ReplicaManager
from kafka_ext.server.config import (
    BrokerConfig,
    build_config,
    format_config_value,
    validate_topic_config,
)
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_manager import LogManager

CLUSTER_ID = "coordinator-tests-0000"


async def _run_now(fn: Callable[[], Any]) -> Any:
    return fn()


class MiniBroker:
    """The parts of Broker a coordinator uses, wired as Broker.start wires them; no network."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        raw = {"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
               "node.id": "1", "group.initial.rebalance.delay.ms": "0"}
        raw.update(overrides or {})
        self.config: BrokerConfig = build_config(raw)
        self.node_id = 1
        self.log_manager = LogManager([data_dir], node_id=1, cluster_id=CLUSTER_ID)
        self.replica_manager = ReplicaManager(1, self.log_manager, self.log_config_for,
                                              lambda path: None)
        self.controller: QuorumController = None  # type: ignore[assignment]

    def log_config_for(self, topic: str, image: Any = None) -> LogConfig:
        image = image or self.controller.image
        return LogConfig.from_topic_configs(dict(image.topic_configs(topic)))

    async def start(self) -> None:
        self.log_manager.load()
        metadata_log = self.log_manager.get_log(METADATA_TOPIC, 0)
        if metadata_log is None:
            metadata_log = self.log_manager.create_log(METADATA_TOPIC, 0, METADATA_TOPIC_ID,
                                                       LogConfig())
        self.controller = QuorumController(
            1, metadata_log, default_partitions=1, default_replication_factor=1,
            validate_topic_config=lambda n, v: format_config_value(validate_topic_config(n, v))
            or "", run_blocking=_run_now)
        self.controller.load()
        await self.controller.bootstrap()
        self.replica_manager.apply_image(None, self.controller.image)
        self.controller.listeners.append(self.replica_manager.apply_image)

    def stop(self) -> None:
        self.log_manager.close()
