"""What producer-perf-test and consumer-perf-test share: their confluent-kafka client from Java
client properties, a rich progress bar on a terminal, and the `--print-metrics` table (Kafka's
ToolsUtils.printMetrics layout).

The bar goes to stderr and only when stderr is a terminal, so stdout keeps exactly the lines
Kafka's tools print (scripts parse them); while it runs, those lines are printed above it.
Not thread-safe: the tool's one thread uses all of it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from confluent_kafka import KafkaException
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kafka_ext.cli.client_config import parse_key_values, read_properties_file, to_librdkafka

Client = TypeVar("Client")
# librdkafka's answer to a Java-only key such as buffer.memory.
_UNKNOWN_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')


def client_settings(config_file: str | None, properties: list[str], flag: str
                    ) -> dict[str, Any]:
    """librdkafka settings from a Java properties file, then `flag k=v` pairs over it."""
    props = read_properties_file(config_file) if config_file is not None else {}
    props.update(parse_key_values(properties, flag))
    return dict(to_librdkafka(props))


def new_client(factory: Callable[[dict[str, Any]], Client], settings: dict[str, Any]) -> Client:
    """The client, leaving out the keys librdkafka does not know (Java-only ones) with the
    warning Kafka's clients give for a key they do not know."""
    while True:
        try:
            return factory(settings)
        except KafkaException as exc:
            unknown = _UNKNOWN_PROPERTY.search(exc.args[0].str() if exc.args else "")
            if unknown is None or unknown[1] not in settings:
                raise
        print(f"WARN The configuration '{unknown[1]}' was supplied but isn't a known config.",
              file=sys.stderr)
        settings = {k: v for k, v in settings.items() if k != unknown[1]}


class ProgressBar:
    """A count of `total` items done; nothing at all when stderr is not a terminal."""

    def __init__(self, description: str, total: int) -> None:
        console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
            self._task = self._progress.add_task(description, total=total)

    def __enter__(self) -> ProgressBar:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, count: int = 1) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, count)


class StatisticsCollector:
    """Keeps librdkafka's latest statistics (its `stats_cb`), for `--print-metrics`."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] | None = None

    def __call__(self, stats_json: str) -> None:
        self.latest = json.loads(stats_json)


def client_metrics(stats: Mapping[str, Any], group: str) -> dict[str, float]:
    """librdkafka's client-wide numeric statistics named as Kafka names metrics:
    `group:name:{client-id=..}`."""
    tags = f"{{client-id={stats.get('client_id', '')}}}"
    return {f"{group}:{name}:{tags}": float(value) for name, value in stats.items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def print_metrics(metrics: Mapping[str, float]) -> None:
    """Kafka's metrics table: a header, then `name : value` sorted by name, 3 decimals."""
    if not metrics:
        return
    width = max(len(name) for name in metrics)
    print(f"\n{'Metric Name':<{width}}   Value")
    for name in sorted(metrics):
        print(f"{name:<{width}} : {metrics[name]:.3f}")
