"""The client's rack for produce gateways: Inkless's `diskless_az=` marker in a client.id, and
the gateways of a coordinator listed with the client's rack first (KIP-1164's rule)."""

from __future__ import annotations

import pytest

from kafka_ext.diskless.gateways import client_id_rack, produce_gateways, rack_first


@pytest.mark.parametrize(("client_id", "rack"), [
    ("app-1,diskless_az=rack-b", "rack-b"),
    ("diskless_az=rack-b", "rack-b"),
    ("diskless_az=us-east-1a,app-1", "us-east-1a"),
    ("app-1 diskless_az=eu-west-1b producer", "eu-west-1b"),
    ("app;diskless_az=az1;env=prod", "az1"),
    ("app-1/diskless_az=zone.2:x", "zone.2:x"),
    ("app(diskless_az=r1)", "r1"),
    ("app-diskless_az=r1", "r1"),  # "-" separates too
    ("app,diskless_az=,diskless_az=r2", "r2"),  # an empty marker names nothing
    ("app,diskless_az=r1,diskless_az=r2", "r1"),  # the first one wins
])
def test_the_diskless_az_marker_names_the_rack_wherever_it_stands(
        client_id: str, rack: str) -> None:
    assert client_id_rack(client_id) == rack


@pytest.mark.parametrize("client_id", [
    None, "", "app-1", "diskless_az", "diskless_az=", "app,diskless_az=,x",
    "mydiskless_az=r1",  # part of another word
    "app_diskless_az=r1",  # "_" is a word character, not a separator
    "inkless_az=r1", "DISKLESS_AZ=r1", "rack=r1",
])
def test_a_client_id_without_a_marker_names_no_rack(client_id: str | None) -> None:
    assert client_id_rack(client_id) is None


RACK_OF = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c", 7: None}


def test_rack_first_puts_the_clients_rack_first_and_keeps_each_parts_order() -> None:
    # As produce_gateways orders them: the coordinator's own broker (4), then by node id.
    gateways = [4, 1, 2, 3, 5, 6]
    assert rack_first(gateways, RACK_OF, "a") == [4, 1, 2, 3, 5, 6]
    assert rack_first(gateways, RACK_OF, "b") == [2, 5, 4, 1, 3, 6]
    assert rack_first(gateways, RACK_OF, "c") == [3, 6, 4, 1, 2, 5]


def test_rack_first_keeps_the_order_when_no_gateway_is_in_the_rack() -> None:
    assert rack_first([4, 2, 7], RACK_OF, "c") == [4, 2, 7]
    assert rack_first([4, 2, 7], RACK_OF, "elsewhere") == [4, 2, 7]
    assert rack_first([], RACK_OF, "a") == []
    # A node the map does not know has no rack: never "in" a named rack.
    assert rack_first([9, 2], RACK_OF, "b") == [2, 9]


def test_each_rack_gets_a_leader_in_it_and_the_coordinators_broker_leads_its_own() -> None:
    brokers = [(n, rack) for n, rack in RACK_OF.items() if rack is not None]  # 6, 3 racks
    leaders = {0: 1, 1: 5, 2: 3, 3: 4}
    gateways = produce_gateways(brokers, list(leaders), leaders)
    for coordinator, nodes in gateways.items():
        own = leaders[coordinator]
        for rack in ("a", "b", "c"):
            ordered = rack_first(nodes, RACK_OF, rack)
            assert sorted(ordered) == sorted(nodes)
            assert RACK_OF[ordered[0]] == rack
            if RACK_OF[own] == rack:
                assert ordered[0] == own  # that commit needs no network call
