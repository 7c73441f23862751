"""`kafka-ext features` (kafka-features.sh) against a real broker: describe from ApiVersions,
upgrade / downgrade / disable through UpdateFeatures, with Kafka's lines, refusals and exit
codes; a disabled share.version turns share groups off, as on Kafka 4.2."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from tests.integration.conftest import BrokerProcess, serve_for_module
from tests.integration.test_api_audience import read_share_group_response, share_group_frame

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-features.sh"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve_for_module(BrokerProcess(tmp_path_factory.mktemp("features") / "data"))


def features(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def described(broker: BrokerProcess) -> dict[str, dict[str, str]]:
    done = features(broker, "describe")
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        fields = dict(part.split(": ", 1) for part in line.split("\t"))
        rows[fields.pop("Feature")] = fields
    return rows


def finalized(broker: BrokerProcess) -> dict[str, int]:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=15) as sock:
        answer: Any = identify(sock, "apache-kafka-java")
    return {f.name: f.max_version_level for f in answer.finalized_features}


def test_describe_lists_every_supported_feature_with_its_finalized_level(
        broker: BrokerProcess) -> None:
    rows = described(broker)
    assert sorted(rows) == ["eligible.leader.replicas.version", "group.version",
                            "kraft.version", "metadata.version", "share.version"]
    assert rows["metadata.version"]["SupportedMinVersion"] == "3.3-IV3"
    assert rows["metadata.version"]["SupportedMaxVersion"] == "4.0-IV3"
    assert rows["metadata.version"]["FinalizedVersionLevel"] == "4.0-IV3"
    assert rows["share.version"] == {"SupportedMinVersion": "0", "SupportedMaxVersion": "1",
                                     "FinalizedVersionLevel": "1",
                                     "Epoch": rows["share.version"]["Epoch"]}
    assert int(rows["share.version"]["Epoch"]) >= 0
    assert rows["eligible.leader.replicas.version"]["FinalizedVersionLevel"] == "0"


def test_upgrade_dry_run_then_upgrade_then_a_safe_downgrade(broker: BrokerProcess) -> None:
    elr = "eligible.leader.replicas.version"
    dry = features(broker, "upgrade", "--feature", f"{elr}=1", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, f"{elr} can be upgraded to 1.\n"), dry.stderr
    assert elr not in finalized(broker)
    done = features(broker, "upgrade", "--feature", f"{elr}=1")
    assert (done.returncode, done.stdout) == (0, f"{elr} was upgraded to 1.\n"), done.stderr
    assert finalized(broker)[elr] == 1
    # Lower without saying it is a downgrade: refused, as Kafka's controller refuses it.
    wrong = features(broker, "upgrade", "--feature", f"{elr}=0")
    assert wrong.returncode == 1
    assert wrong.stdout == (
        f"Could not upgrade {elr} to 0. Invalid update version 0 for feature {elr}. Can't "
        "downgrade the version of this feature without setting the upgrade type to either "
        "safe or unsafe downgrade.\n")
    assert wrong.stderr == "1 out of 1 operation(s) failed.\n"
    down = features(broker, "downgrade", "--feature", f"{elr}=0")
    assert (down.returncode, down.stdout) == (0, f"{elr} was downgraded to 0.\n"), down.stderr
    assert elr not in finalized(broker)


def test_refusals_name_the_reason_and_change_nothing(broker: BrokerProcess) -> None:
    before = finalized(broker)
    beyond = features(broker, "upgrade", "--feature", "share.version=2",
                      "--feature", "group.version=1")
    assert beyond.returncode == 1
    assert ("Could not upgrade share.version to 2. Invalid update version 2 for feature "
            "share.version. Local controller 1 only supports versions 0-1") in beyond.stdout
    assert beyond.stderr == "2 out of 2 operation(s) failed.\n"  # all or nothing
    unknown = features(broker, "upgrade", "--feature", "streams.version=1")
    assert "Local controller 1 does not support this feature." in unknown.stdout
    metadata = features(broker, "downgrade", "--metadata", "3.9-IV0")
    assert metadata.returncode == 1
    assert metadata.stdout == (
        "Could not downgrade metadata.version to 3.9-IV0. Invalid metadata.version 21. "
        "Refusing to perform the requested downgrade because it might delete metadata "
        "information.\n")
    unsafe = features(broker, "downgrade", "--metadata", "3.9-IV0", "--unsafe")
    assert "Unsafe metadata downgrade is not supported in this version." in unsafe.stdout
    usage = features(broker, "upgrade", "--feature", "share.version")
    assert usage.returncode != 0 and "NAME=LEVEL" in usage.stderr
    assert finalized(broker) == before


def test_disabling_share_version_turns_share_groups_off_and_back_on(
        broker: BrokerProcess) -> None:
    Heartbeat = registry().shadowed_requests[76].cls

    def heartbeat_error() -> int:
        body = Heartbeat(group_id="features-q", member_id="m" * 22, member_epoch=0,
                         subscribed_topic_names=["t"])
        with socket.create_connection(("127.0.0.1", broker.port), timeout=15) as sock:
            sock.sendall(share_group_frame(76, 1, 7, body))
            _, answer = read_share_group_response(sock, 76, 1)
        return int(answer.error_code)

    assert heartbeat_error() != ErrorCode.UNSUPPORTED_VERSION
    done = features(broker, "disable", "--feature", "share.version")
    assert (done.returncode, done.stdout) == (0, "share.version was disabled.\n"), done.stderr
    assert "share.version" not in finalized(broker)
    assert heartbeat_error() == ErrorCode.UNSUPPORTED_VERSION
    again = features(broker, "upgrade", "--feature", "share.version=1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert finalized(broker)["share.version"] == 1
    assert heartbeat_error() != ErrorCode.UNSUPPORTED_VERSION


def test_version_mapping_needs_no_broker() -> None:
    done = subprocess.run([sys.executable, "-m", "kafka_ext", "features", "version-mapping",
                           "--release-version", "3.9"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "metadata.version=21 (3.9-IV0)"


def test_group_version_0_turns_the_consumer_group_protocol_off(broker: BrokerProcess) -> None:
    Heartbeat = registry().requests[ApiKey.CONSUMER_GROUP_HEARTBEAT].cls

    def heartbeat_error() -> int:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=15) as sock:
            identify(sock, "apache-kafka-java")
            answer = round_trip(sock, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, Heartbeat(
                group_id="features-g", member_id="", member_epoch=0,
                rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
                server_assignor=None, topic_partitions=[]), 3)
        return int(answer.error_code)

    assert finalized(broker)["group.version"] == 1  # never finalized: in force
    assert heartbeat_error() != ErrorCode.UNSUPPORTED_VERSION
    done = features(broker, "disable", "--feature", "group.version")
    assert done.returncode == 0, done.stdout + done.stderr
    assert heartbeat_error() == ErrorCode.UNSUPPORTED_VERSION
    assert features(broker, "upgrade", "--feature", "group.version=1").returncode == 0
    assert heartbeat_error() != ErrorCode.UNSUPPORTED_VERSION
