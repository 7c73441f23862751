"""Kafka's Java client properties to our client's arguments (the console tools' flags)."""

from __future__ import annotations

import pytest

from kafka_ext.client.config import CONSUMER_PROPERTIES, PRODUCER_PROPERTIES, client_kwargs


def test_known_properties_become_arguments_and_unknown_ones_are_reported() -> None:
    kwargs, unknown = client_kwargs({
        "acks": "1", "linger.ms": "7", "batch.num.messages": "3", "enable.idempotence": "false",
        "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
        "bootstrap.servers": "h:1", "frobnicate": "x"}, PRODUCER_PROPERTIES)
    assert kwargs == {"acks": "1", "linger_ms": 7, "batch_max_records": 3,
                      "enable_idempotence": False, "bootstrap_servers": "h:1"}
    assert unknown == ["frobnicate"]


def test_consumer_properties_map_to_consumer_arguments() -> None:
    kwargs, _ = client_kwargs({"max.poll.interval.ms": "1000", "isolation.level": "read_committed"},
                              CONSUMER_PROPERTIES)
    assert kwargs == {"rebalance_timeout_ms": 1000, "isolation_level": "read_committed"}


@pytest.mark.parametrize("props", [{"linger.ms": "soon"}, {"enable.idempotence": "yes"},
                                   {"security.protocol": "SASL_SSL"}])
def test_malformed_values_and_other_security_protocols_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        client_kwargs(props, PRODUCER_PROPERTIES)
