"""One type per group id, with heartbeats of two types racing for a new id.

A ConsumerGroupHeartbeat and a ShareGroupHeartbeat that both join a new group id are queued on
the same `__consumer_offsets` shard; whichever write runs second must see the group the first
created and refuse (GROUP_ID_NOT_FOUND, as Kafka), so the id never names two groups.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafka_ext.coordinator.group.consumer_group_manager import HeartbeatRequest
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from tests.unit.coordinator.group.test_share_group_manager import FakePersister, Harness
from tests.unit.coordinator.mini_broker import MiniBroker

GROUP = "contested"


def _consumer_join(sg: Harness) -> Any:
    return sg.coordinator.consumer_group_heartbeat(HeartbeatRequest(
        group_id=GROUP, member_id="consumer-1", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["jobs"], client_id="cli", client_host="/127.0.0.1"))


def _share_join(sg: Harness) -> Any:
    return sg.hb("share-1", 0, ["jobs"], group=GROUP)


async def _race(sg: Harness, first: Any, second: Any) -> list[Any]:
    """Both heartbeats queued behind a write in progress on the group's shard (the lock held
    here stands for it), in this order: each was accepted before either write ran."""
    runtime = sg.coordinator.runtime
    write_lock = runtime._loaded_context(sg.coordinator.partition_for(GROUP)).write_lock
    await write_lock.acquire()
    try:
        tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
        await asyncio.sleep(0.01)  # both are past their handlers' checks, waiting for the lock
        assert not any(t.done() for t in tasks)
    finally:
        write_lock.release()
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("share_first", [True, False], ids=["share-first", "consumer-first"])
async def test_heartbeats_of_two_types_racing_for_a_new_id_make_one_group(
        mini_broker: MiniBroker, share_first: bool) -> None:
    sg = Harness(mini_broker, FakePersister())
    await sg.start()
    try:
        await _check_race(sg, share_first)
    finally:
        await sg.coordinator.stop()


async def _check_race(sg: Harness, share_first: bool) -> None:
    await sg.topic("jobs", 1)
    share, consumer = _share_join(sg), _consumer_join(sg)
    if share_first:
        share_result, consumer_result = await _race(sg, share, consumer)
    else:
        consumer_result, share_result = await _race(sg, consumer, share)
    winner, loser = (share_result, consumer_result) if share_first else (
        consumer_result, share_result)
    assert not isinstance(winner, BaseException), winner
    assert isinstance(loser, KafkaError) and loser.code == ErrorCode.GROUP_ID_NOT_FOUND, loser
    shard = sg.coordinator.runtime.shard(sg.coordinator.partition_for(GROUP))
    kinds = [kind for kind, group in (("share", shard.share_group(GROUP)),
                                      ("consumer", shard.consumer_group(GROUP)),
                                      ("classic", shard.group(GROUP))) if group is not None]
    assert kinds == ["share" if share_first else "consumer"]
