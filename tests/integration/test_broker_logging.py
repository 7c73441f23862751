"""The broker's log: Kafka's log4j layout, the start-up line, and logger levels changed at run
time through IncrementalAlterConfigs on BROKER_LOGGER and read back with DescribeConfigs, from
a stock admin client (kafka-python)."""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from clients import ADMIN_TIMEOUT_S, wait_until
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from tests.integration.conftest import BrokerProcess, serve_for_module

LINE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "
                  r".+ \([A-Za-z_][\w.]*\)")
LOGGER = "kafka_ext.server.dispatcher"  # logs each malformed frame at DEBUG


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("logging") / "data"))


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def alter(admin: KafkaAdminClient, logger: str, op: AlterConfigOp, level: str | None) -> str:
    """IncrementalAlterConfigs of one logger of broker 1; the result, 'OK' or the error."""
    answer = admin.alter_configs(
        [ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", configs={logger: (op, level)})],
        incremental=True, raise_on_unknown=False)
    return str(answer["broker_logger"]["1"])


def described(admin: KafkaAdminClient, *loggers: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, "1",
                              configs=dict.fromkeys(loggers) if loggers else None)
    answer = admin.describe_configs([resource], config_filter="all")
    entries: dict[str, Any] = answer["broker_logger"]["1"]
    return entries


def full_log(broker: BrokerProcess) -> str:
    """The whole log (BrokerProcess.log() keeps only its tail)."""
    return broker.log_path.read_text(errors="replace")


def send_malformed_frame(broker: BrokerProcess) -> None:
    """A Metadata v12 request whose body is cut short: the broker closes the connection."""
    client_id = b"logging-test"
    body = struct.pack(">hhih", 3, 12, 7, len(client_id)) + client_id + b"\x00" + b"\xff" * 3
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(1) == b""  # closed, nothing answered


def test_every_line_is_in_kafka_layout_and_the_first_says_what_starts(
        broker: BrokerProcess) -> None:
    lines = full_log(broker).splitlines()
    assert lines
    assert [line for line in lines if not LINE.fullmatch(line)] == []
    first = lines[0]
    assert " INFO kafka-ext " in first and first.endswith("(kafka_ext.server.broker)")
    for part in ("node.id=1", "process.roles=broker,controller",
                 f"listeners=PLAINTEXT://127.0.0.1:{broker.port}",
                 f"log.dirs={broker.data_dir.resolve()}"):
        assert part in first, (part, first)


def test_a_level_set_at_run_time_takes_effect_and_is_described(
        broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    debug_line = "DEBUG malformed frame from 127.0.0.1"
    closing = "malformed MetadataRequest v12"  # the INFO line of every malformed frame
    assert described(admin, LOGGER)[LOGGER]["value"] == "INFO"
    assert alter(admin, LOGGER, AlterConfigOp.SET, "DEBUG") == "OK"
    entry = described(admin, LOGGER)[LOGGER]
    assert (entry["value"], entry["config_source"]) == ("DEBUG", "DYNAMIC_BROKER_LOGGER_CONFIG")
    assert described(admin)["root"]["value"] == "INFO"  # every logger is listed, root too
    send_malformed_frame(broker)
    wait_until(lambda: debug_line in full_log(broker), ADMIN_TIMEOUT_S, "the DEBUG line")

    # DELETE unsets the level: the logger inherits root's INFO again, and logs no DEBUG line.
    assert alter(admin, LOGGER, AlterConfigOp.DELETE, None) == "OK"
    assert described(admin, LOGGER)[LOGGER]["value"] == "INFO"
    debug_lines = full_log(broker).count(debug_line)
    closings = full_log(broker).count(closing)
    send_malformed_frame(broker)
    wait_until(lambda: full_log(broker).count(closing) > closings, ADMIN_TIMEOUT_S,
               "the INFO line of the second malformed frame")
    assert full_log(broker).count(debug_line) == debug_lines


def test_bad_logger_changes_get_kafka_errors(admin: KafkaAdminClient) -> None:
    assert "InvalidConfigurationError" in alter(admin, "no.such.logger", AlterConfigOp.SET,
                                                "DEBUG")
    assert "InvalidConfigurationError" in alter(admin, LOGGER, AlterConfigOp.SET, "LOUD")
    assert "InvalidRequestError" in alter(admin, "root", AlterConfigOp.DELETE, None)
    assert "InvalidRequestError" in alter(admin, LOGGER, AlterConfigOp.APPEND, "DEBUG")
