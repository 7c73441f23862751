"""server/log4j_controller.py: Kafka's log layout and the BROKER_LOGGER level changes."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server.config import ConfigSource, build_config
from kafka_ext.server.log4j_controller import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    KafkaLayout,
    alter_loggers,
    check_resource_name,
    describe_loggers,
    level_name,
    start_up_message,
)

NAME = "kafka_ext.tests.log4j"


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of this test's own, its level unset again afterwards."""
    made = logging.getLogger(NAME)
    yield made
    made.setLevel(logging.NOTSET)


def test_an_event_is_one_line_in_kafkas_layout() -> None:
    record = logging.LogRecord("kafka.server.ReplicaManager", logging.WARNING, __file__, 1,
                               "lag of %d", (3,), None)
    line = KafkaLayout().format(record)
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] WARN lag of 3 "
                        r"\(kafka\.server\.ReplicaManager\)", line), line


def test_python_levels_take_kafkas_names() -> None:
    assert [level_name(lv) for lv in (5, 10, 20, 30, 40, 50, 60)] == [
        "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "FATAL"]
    assert level_name(25) == "WARN"  # an in-between level takes the next one up


def test_set_then_delete_a_level_as_broker_logger_configs(logger: logging.Logger) -> None:
    handler_output = io.StringIO()
    handler = logging.StreamHandler(handler_output)
    logger.addHandler(handler)
    try:
        alter_loggers([(NAME, OP_SET, "TRACE")], validate_only=False)
        (entry,) = describe_loggers([NAME])
        assert (entry.value, entry.source) == ("TRACE", ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG)
        logger.log(5, "traced")
        assert "traced" in handler_output.getvalue()
        alter_loggers([(NAME, OP_DELETE, None)], validate_only=False)
        assert logger.level == logging.NOTSET  # inherits its parent's level again
    finally:
        logger.removeHandler(handler)
    everything = [e.name for e in describe_loggers(None)]
    assert everything[0] == "root" and NAME in everything


def test_validate_only_changes_nothing(logger: logging.Logger) -> None:
    alter_loggers([(NAME, OP_SET, "ERROR")], validate_only=True)
    assert logger.level == logging.NOTSET


@pytest.mark.parametrize(("change", "code"), [
    (("no.such.logger.anywhere", OP_SET, "DEBUG"), ErrorCode.INVALID_CONFIG),
    ((NAME, OP_SET, "debug"), ErrorCode.INVALID_CONFIG),  # levels are upper case, as Kafka's
    (("root", OP_DELETE, None), ErrorCode.INVALID_REQUEST),
    ((NAME, OP_APPEND, "DEBUG"), ErrorCode.INVALID_REQUEST),
])
def test_bad_changes_get_kafkas_errors_and_nothing_applies(
        logger: logging.Logger, change: tuple[str, int, str | None], code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as refused:
        alter_loggers([(NAME, OP_SET, "ERROR"), change], validate_only=False)
    assert refused.value.code == code
    assert logger.level == logging.NOTSET  # validated first: the good change did not apply


def test_the_resource_must_name_this_broker() -> None:
    check_resource_name("3", 3)
    for name in ("", "4"):
        with pytest.raises(KafkaError) as refused:
            check_resource_name(name, 3)
        assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_the_start_up_line_names_version_node_roles_listeners_and_dirs() -> None:
    config = build_config({"node.id": "7", "listeners": "PLAINTEXT://127.0.0.1:9192",
                           "log.dirs": "/data/a,/data/b"})
    line = start_up_message(config)
    assert line.startswith("kafka-ext ") and " starting: node.id=7, " in line
    assert ("process.roles=broker,controller, listeners=PLAINTEXT://127.0.0.1:9192, "
            "log.dirs=/data/a,/data/b") in line
