"""ConnectionQuotas: max.connections and max.connections.per.ip, as Kafka counts them."""

from __future__ import annotations

import pytest

from kafka_ext.network.connection_quotas import (
    ConnectionQuotas,
    TooManyConnections,
    parse_overrides,
)


def test_an_address_at_its_limit_is_refused_until_one_of_its_connections_closes() -> None:
    quotas = ConnectionQuotas(100, 2)
    quotas.admit("10.0.0.1", "CLIENT")
    quotas.admit("10.0.0.1", "CLIENT")
    with pytest.raises(TooManyConnections, match="max.connections.per.ip 2"):
        quotas.admit("10.0.0.1", "CLIENT")
    quotas.admit("10.0.0.2", "CLIENT")  # another address has its own count
    quotas.release("10.0.0.1", "CLIENT")
    quotas.admit("10.0.0.1", "CLIENT")


def test_an_override_replaces_the_per_ip_limit_for_its_address() -> None:
    quotas = ConnectionQuotas(100, 1, {"10.0.0.9": 3, "10.0.0.8": 0})
    for _ in range(3):
        quotas.admit("10.0.0.9", "CLIENT")
    with pytest.raises(TooManyConnections):
        quotas.admit("10.0.0.9", "CLIENT")
    with pytest.raises(TooManyConnections):
        quotas.admit("10.0.0.8", "CLIENT")


def test_the_listeners_of_other_nodes_do_not_count_against_max_connections() -> None:
    quotas = ConnectionQuotas(2, 100, exempt_listeners=frozenset({"REPLICATION"}))
    quotas.admit("10.0.0.1", "CLIENT")
    quotas.admit("10.0.0.2", "CLIENT")
    with pytest.raises(TooManyConnections, match="max.connections 2"):
        quotas.admit("10.0.0.3", "CLIENT")
    quotas.admit("10.0.0.3", "REPLICATION")  # a broker still gets in
    quotas.release("10.0.0.3", "REPLICATION")
    quotas.release("10.0.0.1", "CLIENT")
    quotas.admit("10.0.0.3", "CLIENT")


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    ("127.0.0.1:5", {"127.0.0.1": 5}),
    (" 10.0.0.1:0 , host.example:7", {"10.0.0.1": 0, "host.example": 7}),
    ("[::1]:3,fe80::1:4", {"::1": 3, "fe80::1": 4}),
])
def test_overrides_parse_as_host_count_pairs(text: str, expected: dict[str, int]) -> None:
    assert parse_overrides(text) == expected


@pytest.mark.parametrize("text", ["10.0.0.1", "10.0.0.1:x", ":5", "10.0.0.1:-1"])
def test_malformed_overrides_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_overrides(text)
