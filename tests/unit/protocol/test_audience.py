"""Who each API is shown to: Kafka's broker listener decides for Kafka's keys (issue 21)."""

from __future__ import annotations

from kafka_ext.protocol.api_keys import (
    CLIENT_SOFTWARE_NAME,
    NODE_SOFTWARE_NAME,
    ApiKey,
    Audience,
    advertised_ranges,
    audience,
    peer_audience,
)
from kafka_ext.protocol.kafka_releases import KAFKA_BROKER_VERSIONS
from kafka_ext.protocol.messages import registry


def test_a_key_is_client_facing_exactly_when_a_kafka_broker_advertises_it() -> None:
    on_kafka_brokers = {k for versions in KAFKA_BROKER_VERSIONS.values() for k in versions}
    for key in ApiKey:
        if key in registry().shadowed_requests:  # 76/77: Kafka's keys, our meaning
            assert audience(key) == Audience.EXTENSION
        elif key in on_kafka_brokers:
            assert audience(key) == Audience.CLIENT, key.name
        else:
            assert audience(key) > Audience.CLIENT, key.name


def test_peer_audience_comes_from_the_client_software_name() -> None:
    assert peer_audience(CLIENT_SOFTWARE_NAME) == Audience.EXTENSION
    assert peer_audience(NODE_SOFTWARE_NAME) == Audience.NODE
    for name in (None, "", "apache-kafka-java", "librdkafka", "kafka-python", "kafka-ext"):
        assert peer_audience(name) == Audience.CLIENT


def test_each_audience_sees_its_own_keys_and_the_ones_below() -> None:
    every_key = list(ApiKey)
    shown = {peer: {r.api_key for r in advertised_ranges(every_key, peer)} for peer in Audience}
    assert shown[Audience.CLIENT] < shown[Audience.EXTENSION] < shown[Audience.NODE]
    for peer, keys in shown.items():
        assert all(audience(k) <= peer for k in keys)
    assert max(shown[Audience.CLIENT]) <= 92  # kafka-python 3.0.12's key table ends at 92
