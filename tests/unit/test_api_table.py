"""docs/protocol.md's API table is the one tools/api_table.py derives from the API table."""

from __future__ import annotations

from kafka_ext.protocol.api_keys import ApiKey, Audience, advertised_ranges
from kafka_ext.protocol.kafka_releases import (
    KAFKA_API_NAMES,
    KAFKA_BROKER_VERSIONS,
    KAFKA_RELEASES,
)
from kafka_ext.protocol.messages import registry
from tools.api_table import DOC, render_doc, render_table, served_keys, table_rows


def test_protocol_md_api_table_is_current() -> None:
    current = DOC.read_text()
    assert render_doc(current, served_keys()) == current, (
        "docs/protocol.md's API table is stale: run python tools/api_table.py")


def test_served_keys_are_the_brokers_handlers() -> None:
    served = served_keys()
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.API_VERSIONS, ApiKey.DISKLESS_COMMIT_FILE} <= served
    assert ApiKey.UNREGISTER_BROKER in served  # kafka-cluster.sh unregister (issue 32)


def test_every_key_of_ours_and_of_kafka_has_one_row() -> None:
    rows = table_rows(served_keys())
    keys = [int(row[0]) for row in rows]
    assert keys == sorted(set(keys))
    assert set(keys) == set(ApiKey) | {k for r in KAFKA_RELEASES for k in KAFKA_BROKER_VERSIONS[r]}
    assert all(row[1] != "?" for row in rows)


def test_the_served_column_is_what_a_node_is_advertised() -> None:
    served = served_keys()
    by_key = {int(row[0]): row for row in table_rows(served)}
    for r in advertised_ranges(served, Audience.NODE):
        low, high = r.min_version, r.max_version
        assert low == registry().requests[r.api_key].versions.lowest, r  # nothing undecoded
        cell = by_key[r.api_key][3]
        expected = str(high) if low == high else f"{low}-{high}"
        assert cell.startswith(expected), (r, cell)


def test_a_new_handler_changes_the_table() -> None:
    """The table follows the handlers: an API that gains one is no longer `schema only`."""
    served = served_keys()
    without_unregister = render_table(served - {ApiKey.UNREGISTER_BROKER})
    row = next(line for line in without_unregister.splitlines() if line.startswith("| 64 |"))
    assert "schema only" in row
    row = next(line for line in render_table(served).splitlines() if line.startswith("| 64 |"))
    assert "schema only" not in row and "not planned" not in row
    assert render_table(served) != without_unregister


def test_kafka_release_data_is_well_formed() -> None:
    assert KAFKA_RELEASES == tuple(sorted(KAFKA_RELEASES, key=lambda v: tuple(map(int, v.split(".")))))
    for release in KAFKA_RELEASES:
        for key, (low, high) in KAFKA_BROKER_VERSIONS[release].items():
            assert 0 <= low <= high, (release, key)
            assert key in registry().requests or key in KAFKA_API_NAMES, key
    # Facts the issues rely on: 4.x still serves FindCoordinator v0 (KAFKA-18270) and
    # advertises Produce from v0 (KAFKA-18659); 4.0 dropped Fetch v0-3 (KIP-896).
    assert KAFKA_BROKER_VERSIONS["4.0"][ApiKey.FIND_COORDINATOR][0] == 0
    assert KAFKA_BROKER_VERSIONS["4.0"][ApiKey.PRODUCE][0] == 0
    assert KAFKA_BROKER_VERSIONS["4.0"][ApiKey.FETCH][0] == 4
