"""The reassignment JSON of `kafka-ext reassign-partitions` (KIP-113's `log_dirs`)."""

from __future__ import annotations

import json

import pytest

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.main import build_parser
from kafka_ext.cli.reassign_partitions import ANY, ReplicaTarget, parse_reassignment


def test_log_dirs_pair_with_replicas_in_order() -> None:
    text = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["/d1", "any"]},
        {"topic": "u", "partition": 3, "replicas": [2]}]})
    assert parse_reassignment(text) == [
        ReplicaTarget("t", 0, 1, "/d1"), ReplicaTarget("t", 0, 2, ANY),
        ReplicaTarget("u", 3, 2, ANY)]  # no log_dirs: "any" for every replica


@pytest.mark.parametrize("entry", [
    {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["/d1"]},
    {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["relative/dir"]},
    {"topic": "t", "replicas": [1]},
])
def test_malformed_reassignments_are_usage_errors(entry: dict) -> None:
    with pytest.raises(UsageError):
        parse_reassignment(json.dumps({"version": 1, "partitions": [entry]}))


def test_subcommands_take_kafkas_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(["log-dirs", "--describe", "--bootstrap-server", "h:1",
                              "--topic-list", "a,b", "--broker-list", "1"])
    assert (args.topic_list, args.broker_list) == ("a,b", "1")
    args = parser.parse_args(["reassign-partitions", "--verify", "--bootstrap-server", "h:1",
                              "--reassignment-json-file", "f.json", "--timeout", "3"])
    assert args.verify and args.timeout == 3.0
