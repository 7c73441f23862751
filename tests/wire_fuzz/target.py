"""The broker under attack: the topics the corpus names, and the API ranges it serves."""

from __future__ import annotations

import socket

from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from tests.wire_fuzz.corpus import corpus_topics
from tests.wire_fuzz.judge import advertised

ADMIN_TIMEOUT_S = 60.0
# Settings of a broker the fuzzer starts itself: a JoinGroup for a new group is answered at
# once instead of after Kafka's 3 s initial rebalance delay.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def create_corpus_topics(bootstrap: str) -> None:
    """Create the topics the recorded requests name (existing ones are left as they are)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(name, t["partitions"], 1, config=t["config"])
              for name, t in corpus_topics().items()]
    for name, future in admin.create_topics(topics, operation_timeout=ADMIN_TIMEOUT_S).items():
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS on a second run is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"creating {name}: {exc}") from exc


def served_ranges(host: str, port: int) -> dict[int, tuple[int, int]]:
    """What the broker advertises to a stock client: {api key: (min version, max version)}."""
    body = registry()["ApiVersionsRequest"].cls(client_software_name="wire-fuzz",
                                                client_software_version="1")
    with socket.create_connection((host, port), timeout=ADMIN_TIMEOUT_S) as sock:
        return advertised(round_trip(sock, ApiKey.API_VERSIONS, 3, body))
