"""`kafka-ext log-dirs`: kafka-log-dirs.sh's flags, over kafka-python's DescribeLogDirs.

Prints the JBOD proposal's JSON (KIP-113 "Scripts"): `version` and `log_dirs`, each with
`is_live`, `path` and its `partitions` (`topic`, `partition`, `size`, `is_temporary`), plus
the broker id, the error name of an offline dir, total/usable bytes and each partition's
offset lag. confluent-kafka 2.16 has no DescribeLogDirs, so the tool uses kafka-python.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kafka.admin import KafkaAdminClient

from kafka_ext.cli.client_config import UsageError, read_properties_file

REQUEST_TIMEOUT_MS = 30_000
STORAGE_ERROR_NAMES = {56: "KAFKA_STORAGE_ERROR", 57: "LOG_DIR_NOT_FOUND"}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `log-dirs` with kafka-log-dirs.sh's flags."""
    parser = subparsers.add_parser(
        "log-dirs", help="describe the log dirs of brokers (kafka-log-dirs.sh)",
        description="Query brokers for their log directories, the partitions in each, their "
                    "sizes, and whether a directory is online.")
    parser.add_argument("--describe", action="store_true", required=True,
                        help="describe the specified log directories on the specified brokers")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (passed to the admin client)")
    parser.add_argument("--topic-list", default="", metavar="T1,T2",
                        help="comma-separated topics to report; all topics when empty")
    parser.add_argument("--broker-list", default="", metavar="B1,B2",
                        help="comma-separated broker ids to query; all brokers when empty")
    parser.set_defaults(run=run)


def admin_client(bootstrap_server: str, command_config: str | None) -> KafkaAdminClient:
    """A kafka-python admin client; a --command-config file's keys map '.' to '_'."""
    settings: dict[str, Any] = {}
    if command_config is not None:
        for key, value in read_properties_file(command_config).items():
            settings[key.replace(".", "_")] = value
    settings.update(bootstrap_servers=bootstrap_server, request_timeout_ms=REQUEST_TIMEOUT_MS)
    return KafkaAdminClient(**settings)


def _ids(text: str, flag: str) -> list[int] | None:
    if not text.strip():
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} expects comma-separated broker ids, got {text!r}") from None


def describe(admin: KafkaAdminClient, topics: list[str] | None,
             brokers: list[int] | None) -> dict[str, Any]:
    """The proposal's JSON document for the given brokers and topics."""
    answers = admin.describe_log_dirs(topic_partitions=topics or None, brokers=brokers)
    log_dirs = []
    for answer in answers:
        for d in answer["log_dirs"]:
            error = d["error_code"]
            log_dirs.append({
                "broker": answer["broker"],
                "path": d["log_dir"],
                "is_live": error == 0,
                "error": None if error == 0 else STORAGE_ERROR_NAMES.get(error, str(error)),
                "total_bytes": d.get("total_bytes", -1),
                "usable_bytes": d.get("usable_bytes", -1),
                "partitions": sorted(
                    ({"topic": t["name"], "partition": p["partition_index"],
                      "size": p["partition_size"], "offset_lag": p["offset_lag"],
                      "is_temporary": p["is_future_key"]}
                     for t in d["topics"] for p in t["partitions"]),
                    key=lambda p: (p["topic"], p["partition"], p["is_temporary"])),
            })
    return {"version": 1, "log_dirs": log_dirs}


def run(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topic_list.split(",") if t.strip()]
    brokers = _ids(args.broker_list, "--broker-list")
    admin = admin_client(args.bootstrap_server, args.command_config)
    try:
        print("Querying brokers for log directories information", file=sys.stderr)
        document = describe(admin, topics, brokers)
    finally:
        admin.close()
    print(json.dumps(document))
    return 0
