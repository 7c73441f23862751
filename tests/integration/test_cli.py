"""The `kafka-ext` command line as subprocesses against a running broker (stock confluent-kafka)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 120.0
DELETE_DEADLINE_S = 30.0


def kafka_ext(*args: str, stdin: bytes | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `kafka-ext <args>` from this checkout and capture its output."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "kafka_ext.cli.main", *args], input=stdin,
                          capture_output=True, cwd=REPO_ROOT, env=full_env,
                          timeout=COMMAND_TIMEOUT_S, check=False)


def topics(broker: Any, *args: str) -> subprocess.CompletedProcess[bytes]:
    return kafka_ext("topics", "--bootstrap-server", broker.bootstrap, *args)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(broker: Any, topic: str, partitions: int = 1, *extra: str) -> None:
    out = ok(topics(broker, "--create", "--topic", topic, "--partitions", str(partitions),
                    "--replication-factor", "1", *extra))
    assert out == f"Created topic {topic}.\n"


# --- topics -------------------------------------------------------------------------------------


def test_create_prints_created_and_list_shows_topic(broker: Any) -> None:
    topic = new_topic_name("cli-create")
    create(broker, topic, 3)
    listed = ok(topics(broker, "--list")).splitlines()
    assert topic in listed
    assert listed == sorted(listed)


def test_describe_prints_kafka_topics_layout(broker: Any) -> None:
    topic = new_topic_name("cli-describe")
    create(broker, topic, 3, "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    lines = ok(topics(broker, "--describe", "--topic", topic)).splitlines()
    assert len(lines) == 4
    head = re.fullmatch(rf"Topic: {topic}\tTopicId: ([A-Za-z0-9_-]{{22}})\tPartitionCount: 3\tReplicationFactor: 1"
                        r"\tConfigs: (.*)", lines[0])
    assert head is not None, lines[0]
    assert head[1] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert sorted(head[2].split(",")) == ["cleanup.policy=compact", "retention.ms=3600000"]
    for partition, line in enumerate(lines[1:]):
        row = re.fullmatch(rf"\tTopic: {topic}\tPartition: {partition}\tLeader: (\d+)"
                           r"\tReplicas: (\d+)\tIsr: (\d+)\tElr: \tLastKnownElr: ", line)  # ELR off
        assert row is not None, line
        assert row[1] == row[2] == row[3]


def test_describe_without_topic_covers_every_topic(broker: Any) -> None:
    first, second = new_topic_name("cli-all-a"), new_topic_name("cli-all-b")
    create(broker, first)
    create(broker, second, 2)
    heads = [line for line in ok(topics(broker, "--describe")).splitlines()
             if line.startswith("Topic: ")]
    named = [line.split("\t")[0].removeprefix("Topic: ") for line in heads]
    assert first in named and second in named


def test_create_existing_topic_fails_unless_if_not_exists(broker: Any) -> None:
    topic = new_topic_name("cli-twice")
    create(broker, topic)
    again = topics(broker, "--create", "--topic", topic, "--partitions", "1")
    assert again.returncode == 1
    assert b"already exists" in again.stderr
    quiet = topics(broker, "--create", "--topic", topic, "--partitions", "1", "--if-not-exists")
    assert ok(quiet) == ""


def test_create_with_invalid_topic_config_is_refused(broker: Any) -> None:
    topic = new_topic_name("cli-badconfig")
    result = topics(broker, "--create", "--topic", topic, "--config", "retention.ms=soon")
    assert result.returncode == 1
    assert b"retention.ms" in result.stderr
    assert topic not in ok(topics(broker, "--list")).splitlines()


def test_alter_adds_partitions(broker: Any) -> None:
    topic = new_topic_name("cli-alter")
    create(broker, topic, 1)
    ok(topics(broker, "--alter", "--topic", topic, "--partitions", "4"))
    lines = ok(topics(broker, "--describe", "--topic", topic)).splitlines()
    assert "\tPartitionCount: 4\t" in lines[0]
    partitions = [re.findall(r"\tPartition: (\d+)\t", line) for line in lines[1:]]
    assert partitions == [["0"], ["1"], ["2"], ["3"]]


def test_delete_removes_topic(broker: Any) -> None:
    topic = new_topic_name("cli-delete")
    create(broker, topic)
    assert ok(topics(broker, "--delete", "--topic", topic)) == ""
    deadline = time.monotonic() + DELETE_DEADLINE_S
    while topic in ok(topics(broker, "--list")).splitlines():  # deletion may finish asynchronously
        assert time.monotonic() < deadline, f"{topic} still listed after delete"


def test_missing_topic_fails_unless_if_exists(broker: Any) -> None:
    topic = new_topic_name("cli-missing")
    for action in (["--delete"], ["--describe"], ["--alter", "--partitions", "2"]):
        result = topics(broker, *action, "--topic", topic)
        assert result.returncode == 1, action
        assert f"Topic '{topic}' does not exist as expected".encode() in result.stderr
        assert ok(topics(broker, *action, "--topic", topic, "--if-exists")) == ""


def test_topics_flags_that_do_not_combine_are_usage_errors(broker: Any) -> None:
    result = topics(broker, "--create")
    assert result.returncode == 2 and b"--topic is required" in result.stderr
    result = topics(broker, "--list", "--describe")
    assert result.returncode == 2


# --- console producer and consumer --------------------------------------------------------------


def test_console_round_trip_keeps_keys_values_and_order(broker: Any) -> None:
    topic = new_topic_name("cli-roundtrip")
    create(broker, topic, 1)
    lines = [f"key-{i}:value {i} with spaces" for i in range(100)]
    produced = kafka_ext("console-producer", "--bootstrap-server", broker.bootstrap,
                         "--topic", topic, "--property", "parse.key=true",
                         "--property", "key.separator=:",
                         stdin="".join(line + "\n" for line in lines).encode())
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = kafka_ext("console-consumer", "--bootstrap-server", broker.bootstrap,
                         "--topic", topic, "--from-beginning", "--max-messages", "100",
                         "--property", "print.key=true", "--property", "key.separator=:")
    assert ok(consumed).splitlines() == lines
    assert b"Processed a total of 100 messages" in consumed.stderr


def test_console_consumer_prints_timestamp_partition_offset_columns(broker: Any) -> None:
    topic = new_topic_name("cli-columns")
    create(broker, topic, 1)
    before_ms = int(time.time() * 1000)
    ok(kafka_ext("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 stdin=b"v0\nv1\nv2\n"))
    consumed = ok(kafka_ext(
        "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", "3", "--property", "print.timestamp=true",
        "--property", "print.partition=true", "--property", "print.offset=true",
        "--property", "print.key=true"))
    rows = consumed.splitlines()
    assert len(rows) == 3
    for offset, row in enumerate(rows):
        match = re.fullmatch(rf"CreateTime:(\d+)\tPartition:0\tOffset:{offset}\tnull\tv{offset}", row)
        assert match is not None, row
        assert int(match[1]) >= before_ms - 60_000


def test_console_consumer_reads_one_partition_from_an_offset(broker: Any) -> None:
    topic = new_topic_name("cli-offset")
    create(broker, topic, 1)
    ok(kafka_ext("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 stdin=b"".join(b"m%d\n" % i for i in range(10))))
    consumed = ok(kafka_ext("console-consumer", "--bootstrap-server", broker.bootstrap,
                            "--topic", topic, "--partition", "0", "--offset", "7",
                            "--max-messages", "3"))
    assert consumed.splitlines() == ["m7", "m8", "m9"]


def test_console_consumer_timeout_on_empty_topic_reports_zero(broker: Any) -> None:
    topic = new_topic_name("cli-empty")
    create(broker, topic, 2)
    result = kafka_ext("console-consumer", "--bootstrap-server", broker.bootstrap,
                       "--topic", topic, "--from-beginning", "--timeout-ms", "1500")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout == b""
    assert b"Processed a total of 0 messages" in result.stderr


def test_console_producer_rejects_line_without_key_separator(broker: Any) -> None:
    topic = new_topic_name("cli-nokey")
    create(broker, topic, 1)
    result = kafka_ext("console-producer", "--bootstrap-server", broker.bootstrap,
                       "--topic", topic, "--property", "parse.key=true",
                       stdin=b"k\tv\nno separator here\n")
    assert result.returncode == 1
    assert b"No key separator found on line number 2" in result.stderr


# --- server start-up (no broker needed) ---------------------------------------------------------


def test_server_config_error_exits_2_naming_the_key(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nnum.partitions=zero\n")
    result = kafka_ext("server", str(props))
    assert result.returncode == 2
    message = result.stderr.decode()
    assert message.startswith("kafka-ext: config error: ")
    assert "num.partitions" in message and "'zero'" in message


def test_server_unknown_env_key_exits_2(tmp_path: Path) -> None:
    result = kafka_ext("server", "--override", f"log.dirs={tmp_path}",
                       env={"KAFKA_EXT_NOT_A_KEY": "1"})
    assert result.returncode == 2
    assert b"KAFKA_EXT_NOT_A_KEY" in result.stderr


def test_server_refuses_a_tls_listener_without_a_keystore(tmp_path: Path) -> None:
    result = kafka_ext("server", "--override", f"log.dirs={tmp_path}",
                       "--override", "listeners=SSL://127.0.0.1:0")
    assert result.returncode == 2
    message = result.stderr.decode()
    assert message.startswith("kafka-ext: config error: ")
    assert "listener SSL uses TLS but has no keystore" in message
    assert not (tmp_path / "meta.properties").exists()  # refused before touching the log dir


@pytest.mark.parametrize("source", ["env", "override"])
def test_server_print_config_shows_effective_values(tmp_path: Path, source: str) -> None:
    if source == "env":
        result = kafka_ext("server", "--print-config", "--override", f"log.dirs={tmp_path}",
                           env={"KAFKA_EXT_NUM_PARTITIONS": "6"})
    else:
        result = kafka_ext("server", "--print-config", "--override", f"log.dirs={tmp_path}",
                           "--override", "num.partitions=6")
    lines = ok(result).splitlines()
    assert "num.partitions=6" in lines
    assert f"log.dirs={tmp_path}" in lines
