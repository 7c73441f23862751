"""`kafka-ext configs` for topics and brokers: kafka-configs.sh's describe and alter output
against the real broker (the quota side is in test_quotas.py)."""

from __future__ import annotations

import subprocess
import sys

from clients import create_topic, new_topic_name

from tests.integration.conftest import BrokerProcess


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafka_ext", "configs", "--bootstrap-server",
                           broker.bootstrap, *args], capture_output=True, text=True, timeout=60)


def test_topic_configs_alter_describe_and_delete(broker: BrokerProcess) -> None:
    topic = new_topic_name("cfg")
    create_topic(broker.bootstrap, topic)
    done = configs(broker, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Completed updating config for topic {topic}.\n"
    described = configs(broker, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert described.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    done = configs(broker, "--topic", topic, "--alter", "--delete-config", "retention.ms")
    assert done.returncode == 0, done.stderr
    described = configs(broker, "--topic", topic, "--describe")
    assert "retention.ms" not in described.stdout
    refused = configs(broker, "--topic", topic, "--alter", "--delete-config", "retention.ms")
    assert refused.returncode == 1
    assert "Invalid config(s): retention.ms" in refused.stderr


def test_broker_default_config_alter_and_describe(broker: BrokerProcess) -> None:
    done = configs(broker, "--entity-type", "brokers", "--entity-default", "--alter",
                   "--add-config", "intra.broker.throttled.rate=1000000")
    assert done.stdout == "Completed updating default config for brokers in the cluster.\n"
    described = configs(broker, "--entity-type", "brokers", "--describe")
    assert described.stdout.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "Default configs for brokers in the cluster are:",
        "  intra.broker.throttled.rate=1000000 sensitive=false synonyms={"
        "DYNAMIC_DEFAULT_BROKER_CONFIG:intra.broker.throttled.rate=1000000, "
        "DEFAULT_CONFIG:intra.broker.throttled.rate=9223372036854775807}",
    ]


def test_quota_tool_refuses_keys_that_are_not_quotas_before_sending(broker: BrokerProcess
                                                                    ) -> None:
    done = configs(broker, "--entity-type", "clients", "--entity-name", "x", "--alter",
                   "--add-config", "retention.ms=5")
    assert done.returncode == 1
    assert ("Only quota configs can be added for 'clients' using --bootstrap-server. "
            "Unexpected config names: retention.ms") in done.stderr
