"""Log4jController: the broker's log layout, and its logger levels read and set at run time.

Mirrors Kafka's kafka.utils.Log4jController over Python's logging. Each event is one line in
Kafka's log4j layout `[%d] %p %m (%c)%n`, e.g. `[2026-11-26 03:30:00,123] INFO message
(kafka_ext.server.broker)`, with Kafka's level names (WARN, FATAL, TRACE); a traceback follows
its event's line, as log4j prints a stack trace. The levels are the BROKER_LOGGER configs
(resource type 8, KIP-412): DescribeConfigs lists every logger with its level, and
IncrementalAlterConfigs SETs a level or DELETEs one (the logger then inherits its parent's).
Changes live in memory only, as in Kafka. Loggers are Python's dotted names (`kafka_ext.server`
covers every server module); the root logger is `root`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import TextIO

from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server.config import BrokerConfig, ConfigEntry, ConfigSource, ConfigType

BROKER_LOGGER_RESOURCE = 8  # ConfigResource.Type.BROKER_LOGGER
ROOT_LOGGER = "root"
TRACE = 5  # below DEBUG, as log4j's TRACE
# Kafka's LogLevelConfig.VALID_LOG_LEVELS, as Python levels.
LEVELS: dict[str, int] = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
                          "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG,
                          "TRACE": TRACE}
_LEVEL_NAMES = {level: name for name, level in LEVELS.items()}
LAYOUT = "[%(asctime)s] %(kafka_level)s %(message)s (%(name)s)"
# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def level_name(level: int) -> str:
    """Kafka's name of a Python level; an in-between level takes the next one up."""
    for known in sorted(_LEVEL_NAMES):
        if level <= known:
            return _LEVEL_NAMES[known]
    return "FATAL"


class KafkaLayout(logging.Formatter):
    """log4j's `[%d] %p %m (%c)%n`: the time as log4j's ISO8601 (`2026-11-26 03:30:00,123`,
    Python's default asctime), Kafka's level names."""

    def __init__(self) -> None:
        super().__init__(LAYOUT)

    def format(self, record: logging.LogRecord) -> str:
        record.kafka_level = level_name(record.levelno)
        return super().format(record)


def configure_logging(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send every logger's events to `stream` (stderr) in Kafka's layout, root at `level`."""
    logging.addLevelName(TRACE, "TRACE")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(KafkaLayout())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def start_up_message(config: BrokerConfig) -> str:
    """The line a broker logs first: what runs, as what, where."""
    listeners = ",".join(f"{lst.name}://{lst.host}:{lst.port}" for lst in config.listeners)
    return (f"kafka-ext {_version()} starting: node.id={config.node_id}, "
            f"process.roles={','.join(config.process_roles)}, listeners={listeners}, "
            f"log.dirs={','.join(str(d) for d in config.log_dirs)}")


def _version() -> str:
    try:
        return metadata.version("kafka-ext")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


# -- BROKER_LOGGER configs ---------------------------------------------------------------------

def loggers() -> dict[str, str]:
    """Every logger known to this process with its effective level, root first (Kafka's
    Log4jController.loggers); a package name with loggers below it counts as a logger."""
    out = {ROOT_LOGGER: level_name(logging.getLogger().level)}
    for name in sorted(logging.Logger.manager.loggerDict):
        out[name] = level_name(logging.getLogger(name).getEffectiveLevel())
    return out


def describe_loggers(names: Iterable[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs entries of BROKER_LOGGER: every logger (or those named) and its level."""
    levels = loggers()
    wanted = levels if names is None else [n for n in names if n in levels]
    return [ConfigEntry(name, levels[name], False, False,
                        ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, (), ConfigType.UNKNOWN, None)
            for name in wanted]


def logger_exists(name: str) -> bool:
    return name == ROOT_LOGGER or name in logging.Logger.manager.loggerDict


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def validate_change(name: str, operation: int, value: str | None) -> None:
    """Kafka's validateLogLevelConfigs: INVALID_CONFIG for an unknown logger or level,
    INVALID_REQUEST for APPEND/SUBTRACT or for unsetting the root logger's level."""
    if operation in (OP_APPEND, OP_SUBTRACT):
        op = "APPEND" if operation == OP_APPEND else "SUBTRACT"
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"{op} operation is not allowed for the BROKER_LOGGER resource")
    if operation not in (OP_SET, OP_DELETE):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation}")
    if not logger_exists(name):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
    if operation == OP_DELETE:
        if name == ROOT_LOGGER:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
    elif value not in LEVELS:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Cannot set the log level of {name} to {value} as it is not a "
                         f"supported log level. Valid log levels are {', '.join(LEVELS)}")


def check_resource_name(resource_name: str, node_id: int) -> None:
    """A BROKER_LOGGER resource names this broker, as Kafka requires (INVALID_REQUEST)."""
    if not resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if resource_name != str(node_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id} "
                         f"but received {resource_name}")


def alter_loggers(changes: Iterable[tuple[str, int, str | None]], validate_only: bool) -> None:
    """IncrementalAlterConfigs of BROKER_LOGGER: (logger, operation, level) changes, all
    validated before any applies. SET gives a logger a level; DELETE unsets it (the logger
    then inherits its parent's level)."""
    changes = list(changes)
    for name, operation, value in changes:
        validate_change(name, operation, value)
    if validate_only:
        return
    log = logging.getLogger(__name__)
    for name, operation, value in changes:
        if operation == OP_SET and value is not None:
            log.info("Updating the log level of %s to %s", name, value)
            _logger(name).setLevel(LEVELS[value])
        else:
            log.info("Unset the log level of %s", name)
            _logger(name).setLevel(logging.NOTSET)
