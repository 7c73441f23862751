"""A leader's ISR expansions (Kafka's Partition.maybeExpandIsr, isReplicaIsrEligible and
handleAlterPartitionError): a caught-up follower is proposed only when the metadata shows its
broker eligible, and after a refusal not again until that metadata changes or a backoff passes.

The real ReplicaManager and AlterPartitionManager over an in-memory log; metadata images are
built by hand and the clock is the test's, so every case is deterministic."""

from __future__ import annotations

import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_ext.controller.image import BrokerRegistration, MetadataImage, PartitionImage, TopicImage
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.replication.alter_partition_manager import AlterPartitionManager, Proposal
from kafka_ext.replication.partition import (
    ISR_JOIN_BACKOFF_MAX_MS,
    ISR_JOIN_BACKOFF_MS,
    NO_BROKER_EPOCH,
    isr_ineligibility,
)
from kafka_ext.replication.replica_manager import ReplicaManager
from kafka_ext.storage.log import LogConfig
from tests.unit.replication.simulation import MemoryLog, SimLogManager

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
LEADER, IN_SYNC, RETURNING = 1, 2, 3
EPOCHS = {LEADER: 100, IN_SYNC: 200, RETURNING: 300}  # registered broker epochs
_Response = registry()["AlterPartitionResponse"].cls


def registration(broker_id: int, *, fenced: bool = False, shutting_down: bool = False,
                 epoch: int | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, EPOCHS[broker_id] if epoch is None else epoch,
                              uuid.UUID(int=broker_id), (), None, fenced=fenced,
                              in_controlled_shutdown=shutting_down)


def image(offset: int, returning: BrokerRegistration | None, *, isr: tuple[int, ...] = (1, 2),
          leader_epoch: int = 5, partition_epoch: int = 7) -> MetadataImage:
    """Broker 1 leads t-0 (replicas 1, 2, 3); broker 3 is registered as `returning` says."""
    part = PartitionImage(0, (LEADER, IN_SYNC, RETURNING), isr, LEADER, leader_epoch,
                          partition_epoch)
    topic = TopicImage(TOPIC, TOPIC_ID, {0: part})
    brokers = {LEADER: registration(LEADER), IN_SYNC: registration(IN_SYNC)}
    if returning is not None:
        brokers[RETURNING] = returning
    return MetadataImage(offset=offset, topics_by_name={TOPIC: topic},
                         topics_by_id={TOPIC_ID: topic}, brokers=brokers)


class Leader:
    """Broker 1's ReplicaManager as its leader, with the proposals it makes."""

    def __init__(self, first: MetadataImage) -> None:
        self.now_ms = 1000.0
        self.proposals: list[tuple[int, ...]] = []
        self.replicas = ReplicaManager(LEADER, SimLogManager(MemoryLog(TOPIC_ID, LogConfig())),
                                       lambda name, image: LogConfig(), lambda path: None)
        self.replicas.clock_ms = lambda: self.now_ms
        self.replicas.propose_isr = lambda hosted, isr: self.proposals.append(isr)
        self.current = first
        self.replicas.apply_image(None, first)
        self.hosted = self.replicas.partitions[(TOPIC, 0)]
        assert self.hosted.is_leader

    def apply(self, new: MetadataImage) -> None:
        old, self.current = self.current, new
        self.replicas.apply_image(old, new)

    def fetch(self, broker_epoch: int = EPOCHS[RETURNING]) -> None:
        """Broker 3 fetches at the leader's end (it has caught up)."""
        self.replicas.record_follower_fetch(self.hosted, RETURNING,
                                            self.hosted.log.log_end_offset, 0, broker_epoch)

    def refused(self, error: ErrorCode = ErrorCode.INELIGIBLE_REPLICA) -> None:
        """The controller refuses the proposal in flight, through AlterPartitionManager."""
        assert self.hosted.pending_isr is not None
        settle(self, self.hosted.pending_isr, error)


def settle(leader: Leader, new_isr: tuple[int, ...], error: ErrorCode) -> None:
    hosted = leader.hosted
    manager = AlterPartitionManager(SimpleNamespace(replica_manager=leader.replicas))  # type: ignore[arg-type]
    proposal = Proposal(hosted, new_isr, hosted.leader_epoch, hosted.partition_epoch)
    answer = _Response.PartitionData(partition_index=0, error_code=int(error))
    response = _Response(error_code=0, topics=[_Response.TopicData(
        topic_id=TOPIC_ID, topic_name=TOPIC, partitions=[answer])])
    manager._settle({(TOPIC, 0): proposal}, response)


# -- eligibility, as the metadata has it -------------------------------------------------------

def test_isr_ineligibility_names_what_keeps_a_follower_out() -> None:
    assert isr_ineligibility(None, 300) == "not registered"
    assert isr_ineligibility(registration(RETURNING, fenced=True), 300) == "fenced"
    assert isr_ineligibility(registration(RETURNING, shutting_down=True), 300) == "shutting down"
    assert "broker epoch 299" in str(isr_ineligibility(registration(RETURNING), 299))
    assert isr_ineligibility(registration(RETURNING), 300) is None
    assert isr_ineligibility(registration(RETURNING), NO_BROKER_EPOCH) is None  # not checked


@pytest.mark.parametrize("returning", [
    None,
    registration(RETURNING, fenced=True),
    registration(RETURNING, shutting_down=True),
    registration(RETURNING, epoch=EPOCHS[RETURNING] + 50),  # it fetches as an older incarnation
], ids=["unregistered", "fenced", "shutting-down", "stale-broker-epoch"])
def test_a_caught_up_follower_the_metadata_shows_ineligible_is_not_proposed(
        returning: BrokerRegistration | None) -> None:
    leader = Leader(image(10, returning))
    for _ in range(50):  # a follower fetches every few ms while it waits
        leader.fetch()
        leader.now_ms += 20
    assert leader.proposals == [] and leader.hosted.pending_isr is None


def test_once_the_metadata_shows_it_unfenced_with_its_epoch_it_is_proposed_once() -> None:
    leader = Leader(image(10, registration(RETURNING, fenced=True)))
    leader.fetch()
    leader.apply(image(11, registration(RETURNING)))
    for _ in range(20):
        leader.fetch()
        leader.now_ms += 20
    assert leader.proposals == [(1, 2, 3)]  # the one in flight holds back the others


def test_a_fetch_without_a_broker_epoch_is_not_held_to_one() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch(broker_epoch=NO_BROKER_EPOCH)  # Fetch before v15 carries none
    assert leader.proposals == [(1, 2, 3)]


def test_a_follower_on_an_offline_log_dir_is_not_proposed() -> None:
    directory = uuid.UUID(int=33)
    first = image(10, registration(RETURNING))
    part = dataclasses.replace(first.topics_by_id[TOPIC_ID].partitions[0],
                               directories=(uuid.UUID(int=11), uuid.UUID(int=22), directory))
    topic = TopicImage(TOPIC, TOPIC_ID, {0: part})
    leader = Leader(dataclasses.replace(first, topics_by_name={TOPIC: topic},
                                        topics_by_id={TOPIC_ID: topic},
                                        offline_log_dirs={RETURNING: (directory,)}))
    leader.fetch()
    assert leader.proposals == []


# -- refusals ------------------------------------------------------------------------------------

def test_a_refused_follower_is_not_proposed_again_in_the_same_metadata_before_the_backoff() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)]
    leader.refused()  # the controller has fenced it; this leader has not heard yet
    assert leader.hosted.pending_isr is None and leader.hosted.isr == (1, 2)
    for _ in range(4):  # fetches for 80 ms of a 100 ms backoff
        leader.fetch()
        leader.now_ms += 20
    assert leader.proposals == [(1, 2, 3)]
    leader.now_ms += ISR_JOIN_BACKOFF_MS
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)] * 2
    assert leader.replicas.failed_isr_updates == 1


def test_refusals_in_unchanged_metadata_back_off_longer_each_time_up_to_the_max() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    started_ms = leader.now_ms
    for _ in range(200):  # 4 s of a follower fetching every 20 ms, every proposal refused
        leader.fetch()
        if leader.hosted.pending_isr is not None:
            leader.refused()
        leader.now_ms += 20
    elapsed_s = (leader.now_ms - started_ms) / 1000
    # 100, 200, 400, 800 ms, then one a second: a handful, where a proposal per fetch was 200.
    assert len(leader.proposals) <= 5 + elapsed_s * 1000 / ISR_JOIN_BACKOFF_MAX_MS
    assert len(leader.proposals) >= 5


@pytest.mark.parametrize("change", ["unfenced", "new partition epoch", "new leader epoch"])
def test_new_metadata_ends_a_refusal_at_once(change: str) -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch()
    leader.refused()
    if change == "unfenced":  # fenced, then unfenced: registrations the refusal did not see
        leader.apply(image(11, registration(RETURNING, fenced=True)))
        leader.fetch()
        leader.apply(image(12, registration(RETURNING)))
    elif change == "new partition epoch":
        leader.apply(image(11, registration(RETURNING), partition_epoch=8))
    else:
        leader.apply(image(11, registration(RETURNING), leader_epoch=6, partition_epoch=8))
    leader.fetch()  # well within the backoff
    assert leader.proposals == [(1, 2, 3)] * 2


def test_metadata_about_other_brokers_does_not_end_a_refusal() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch()
    leader.refused()
    leader.apply(image(11, registration(RETURNING)))  # a newer image, broker 3 unchanged
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)]


@pytest.mark.parametrize("error", [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INVALID_REQUEST,
                                   ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_SERVER_ERROR])
def test_other_refusals_back_off_the_same_way(error: ErrorCode) -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch()
    leader.refused(error)
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)] and leader.hosted.pending_isr is None
    leader.now_ms += ISR_JOIN_BACKOFF_MS
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)] * 2


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH,
                                   ErrorCode.INVALID_UPDATE_VERSION])
def test_a_refusal_for_stale_epochs_stays_pending_until_the_metadata_brings_them(
        error: ErrorCode) -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch()
    leader.refused(error)
    leader.now_ms += 10 * ISR_JOIN_BACKOFF_MAX_MS
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)] and leader.hosted.pending_isr == (1, 2, 3)
    leader.apply(image(11, registration(RETURNING), partition_epoch=8))
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)] * 2


def test_a_refused_shrink_holds_back_no_follower() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.hosted.pending_isr = (1,)
    settle(leader, (1,), ErrorCode.INELIGIBLE_REPLICA)
    assert leader.hosted.isr_join_refusals == {} and leader.hosted.pending_isr is None
    leader.fetch()
    assert leader.proposals == [(1, 2, 3)]


# -- what the proposal carries ---------------------------------------------------------------------

async def test_each_member_is_proposed_with_the_broker_epoch_its_fetches_carried() -> None:
    leader = Leader(image(10, registration(RETURNING)))
    leader.fetch(broker_epoch=EPOCHS[RETURNING])
    sent: list[Any] = []

    async def to_controller(api_key: int, version: int, request: Any, local: Any) -> Any:
        sent.append(request)
        return _Response(error_code=0, topics=[])

    broker: Any = SimpleNamespace(node_id=LEADER, replica_manager=leader.replicas,
                                  lifecycle=SimpleNamespace(broker_epoch=EPOCHS[LEADER],
                                                            to_controller=to_controller))
    manager = AlterPartitionManager(broker)
    hosted = leader.hosted
    await manager._send({(TOPIC, 0): Proposal(hosted, (1, 2, 3), hosted.leader_epoch,
                                              hosted.partition_epoch)})
    [request] = sent
    [partition] = request.topics[0].partitions
    # Broker 2 has not fetched in this leader epoch: -1, which the controller does not check.
    assert [(b.broker_id, b.broker_epoch) for b in partition.new_isr_with_epochs] == [
        (LEADER, EPOCHS[LEADER]), (IN_SYNC, -1), (RETURNING, EPOCHS[RETURNING])]
    assert (manager.requests_sent, manager.partitions_sent) == (1, 1)


async def test_an_unanswered_request_is_retried_after_a_doubling_backoff() -> None:
    manager = AlterPartitionManager(SimpleNamespace(replica_manager=None))  # type: ignore[arg-type]
    waits = [manager._not_answered(TimeoutError()) for _ in range(6)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    manager._settle({}, _Response(error_code=0, topics=[]))  # an answer: start over
    assert manager._not_answered(TimeoutError()) == 0.1
