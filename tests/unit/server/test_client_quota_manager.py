"""Quota resolution in Kafka's order of precedence, the sampled rate's throttle time and the
controller mutation token bucket (ClientQuotaManager, ControllerMutationQuotaManager)."""

from __future__ import annotations

import asyncio

import pytest

from kafka_ext.controller.client_quota_control import CLIENT_ID, USER, quota_entity
from kafka_ext.security.principal import ANONYMOUS as ANONYMOUS_PRINCIPAL
from kafka_ext.server.client_quota_manager import (
    DEFAULT,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    HandlerTimer,
    QuotaManagers,
)

# The eight levels, most specific first (Kafka's docs, "Quotas" > "Configuration").
LEVELS = [
    ("alice", "c1"),     # /config/users/alice/clients/c1
    ("alice", DEFAULT),  # /config/users/alice/clients/<default>
    ("alice", None),     # /config/users/alice
    (DEFAULT, "c1"),     # /config/users/<default>/clients/c1
    (DEFAULT, DEFAULT),  # /config/users/<default>/clients/<default>
    (DEFAULT, None),     # /config/users/<default>
    (None, "c1"),        # /config/clients/c1
    (None, DEFAULT),     # /config/clients/<default>
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_configured_level_wins(level: int) -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.update_quotas({key: float(i + 1) for i, key in enumerate(LEVELS) if i >= level})
    assert manager.quota("alice", "c1") == float(level + 1)


def test_other_clients_fall_through_to_the_defaults_or_to_no_quota() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.update_quotas({("alice", None): 10.0, (None, DEFAULT): 20.0})
    assert manager.quota("alice", "anything") == 10.0
    assert manager.quota("ANONYMOUS", "c9") == 20.0
    manager.update_quotas({("alice", None): 10.0})
    assert manager.quota("ANONYMOUS", "c9") is None
    assert manager.sensor("ANONYMOUS", "c9") is None


def test_a_user_quota_is_shared_by_all_clients_of_the_user() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.update_quotas({(DEFAULT, None): 100.0})
    assert manager.sensor("ANONYMOUS", "a") is manager.sensor("ANONYMOUS", "b")
    assert manager.sensor("ANONYMOUS", "a") is not manager.sensor("bob", "a")


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    # 11 windows of 1 s: the window counts as at least 10 s, so 20,000 bytes at once is an
    # observed rate of 2,000 B/s against 1,000: X = (2000 - 1000) / 1000 * 10 s.
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.update_quotas({(None, "c1"): 1000.0})
    now = 1_000_000
    assert manager.record_and_get_throttle_time_ms("u", "c1", 5_000, now) == 0
    assert manager.record_and_get_throttle_time_ms("u", "c1", 15_000, now) == 10_000
    # A taken-back value no longer counts.
    manager.unrecord("u", "c1", 15_000, now)
    assert manager.record_and_get_throttle_time_ms("u", "c1", 1, now) == 0


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    manager = ClientQuotaManager("request_percentage", 11, 1, max_throttle_time_ms=1000)
    manager.update_quotas({(None, DEFAULT): 1.0})
    assert manager.record_and_get_throttle_time_ms("u", "c", 500.0, 0) == 1000


def test_quota_change_keeps_the_measured_rate() -> None:
    manager = ClientQuotaManager("producer_byte_rate", 11, 1)
    manager.update_quotas({(None, "c1"): 1_000_000.0})
    assert manager.record_and_get_throttle_time_ms("u", "c1", 20_000, 0) == 0
    manager.update_quotas({(None, "c1"): 1000.0})
    assert manager.record_and_get_throttle_time_ms("u", "c1", 0, 0) == 10_000


def test_strict_mutation_quota_refuses_once_the_bucket_is_empty() -> None:
    manager = ControllerMutationQuotaManager("controller_mutation_rate", 11, 1)
    manager.update_quotas({(None, "c1"): 1.0})  # burst: 11 partitions
    now = 10_000_000
    assert manager.record_strict("u", "c1", 20, now) == 0  # not yet exhausted: accepted
    assert manager.record_strict("u", "c1", 1, now) == 9000  # 9 tokens short at 1/s
    assert manager.record_strict("u", "c1", 1, now + 9000) == 0


def test_permissive_mutation_quota_accepts_and_throttles() -> None:
    manager = ControllerMutationQuotaManager("controller_mutation_rate", 11, 1)
    manager.update_quotas({(None, DEFAULT): 2.0})  # burst: 22
    assert manager.record_and_get_throttle_time_ms("u", "x", 30, 5_000_000) == 4000


def test_managers_follow_the_image_quotas_per_key() -> None:
    quotas = QuotaManagers({})
    assert not any(m.enabled for m in quotas.managers())
    quotas.update({quota_entity([(USER, None), (CLIENT_ID, "c1")]): {
        "producer_byte_rate": 10.0, "controller_mutation_rate": 3.0}})
    assert quotas.produce.enabled and quotas.controller_mutation.enabled
    assert not quotas.fetch.enabled and not quotas.request.enabled
    assert quotas.produce.quota("ANONYMOUS", "c1") == 10.0
    quotas.update({})
    assert not quotas.produce.enabled


def test_handler_timer_counts_the_steps_and_returns_the_result() -> None:
    async def handler() -> int:
        await asyncio.sleep(0)
        return 42

    async def main() -> tuple[int, int]:
        timer = HandlerTimer(handler())
        return await timer, timer.elapsed_ns

    result, elapsed = asyncio.run(main())
    assert result == 42 and elapsed > 0


def test_an_unauthenticated_connection_is_the_anonymous_user() -> None:
    assert ANONYMOUS_PRINCIPAL.name == "ANONYMOUS"
    quotas = QuotaManagers({})
    quotas.update({quota_entity([(USER, "ANONYMOUS")]): {"consumer_byte_rate": 5.0}})
    assert quotas.fetch.quota(ANONYMOUS_PRINCIPAL.name, "any-client") == 5.0
