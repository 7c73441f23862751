"""Share groups (KIP-932) given bad input and pushed to their limits, against the real broker.

Raw ShareGroupHeartbeat/ShareGroupDescribe (Kafka's schemas on 76/77), ShareFetch and
ShareAcknowledge frames from a stock-client connection, beside confluent-kafka's ShareConsumer
and classic/KIP-848 consumers. Each case checks Kafka 4.2's error code and that nothing else is
disturbed: the session or member that erred goes on, the others keep getting their records,
and every record is acknowledged once.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kafka_ext.client.probe import identify, round_trip, shadowed_round_trip
from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.share.share_session import FINAL_EPOCH
from tests.integration.clients import create_topic, new_topic_name, wait_until
from tests.integration.conftest import BrokerProcess, serve_for_module
from tests.integration.test_share_consumer import (
    poll_records,
    share_consumer,
    share_group,
)

TIMEOUT_S = 20.0
MAX_SIZE = 3            # group.share.max.size of this module's broker
SESSION_TIMEOUT_MS = 6000  # group.share.session.timeout.ms
SHORT_LOCK_MS = 2000    # share.record.lock.duration.ms of the groups whose locks must expire
ACCEPT = 1
COORDINATOR_NOT_READY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE}
_reg = registry()
_Heartbeat = _reg.shadowed_requests[SHARE_GROUP_HEARTBEAT].cls
_Describe = _reg.shadowed_requests[SHARE_GROUP_DESCRIBE].cls
_Fetch = _reg.requests[ApiKey.SHARE_FETCH].cls
_Ack = _reg.requests[ApiKey.SHARE_ACKNOWLEDGE].cls

SHARE_BROKER = {
    "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.share.min.session.timeout.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.max.size": str(MAX_SIZE),
}

# (topic id, partition) -> what a ShareFetch or ShareAcknowledge names for it
Partitions = dict[tuple[uuid.UUID, int], Any]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-bad") / "data", SHARE_BROKER)
    yield from serve_for_module(b)


class RawShareMember:
    """A share group member speaking the wire itself: heartbeats, a share session, acks."""

    def __init__(self, broker: BrokerProcess, group: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
        identify(self.sock, "apache-kafka-java")  # a stock client: 76/77 are Kafka's
        self.group = group
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.session_epoch = 0  # the next ShareFetch's: 0 opens the session
        self.correlation = 1

    def _next(self) -> int:
        self.correlation += 1
        return self.correlation

    def find_coordinator(self) -> None:
        """What a client does first: FindCoordinator creates __consumer_offsets."""
        find = _reg.requests[ApiKey.FIND_COORDINATOR].cls
        answer = round_trip(self.sock, ApiKey.FIND_COORDINATOR, 4, find(
            key_type=0, coordinator_keys=[self.group]), self._next())
        assert answer.coordinators[0].error_code in (0, *COORDINATOR_NOT_READY)

    def heartbeat(self, epoch: int, topics: list[str] | None = None) -> Any:
        return shadowed_round_trip(self.sock, SHARE_GROUP_HEARTBEAT, 1, _Heartbeat(
            group_id=self.group, member_id=self.member_id, member_epoch=epoch,
            subscribed_topic_names=topics), self._next())

    def join(self, topic: str, partitions: int) -> None:
        """Join, then heartbeat until every partition of `topic` is assigned (its share state
        is initialized first)."""
        deadline = time.monotonic() + TIMEOUT_S
        self.find_coordinator()
        answer = wait_until(lambda: _unless_loading(self.heartbeat(0, [topic])), TIMEOUT_S,
                            "the group coordinator")  # once FindCoordinator has made it
        assigned = self._assigned(answer)
        while assigned != partitions:  # an answer without an assignment: unchanged
            time.sleep(0.1)
            assert time.monotonic() < deadline, f"{self.member_id} got no assignment"
            assigned = self._assigned(self.heartbeat(self.member_epoch), assigned)

    def _assigned(self, answer: Any, before: int = 0) -> int:
        """How many partitions the heartbeat answer assigns (`before` when it sends none)."""
        assert answer.error_code == 0, answer.error_message
        self.member_epoch = answer.member_epoch
        if answer.assignment is None:
            return before
        return sum(len(t.partitions) for t in answer.assignment.topic_partitions)

    def share_fetch(self, epoch: int, partitions: Partitions, max_wait_ms: int = 500,
                    member_id: str | None = None) -> Any:
        """One ShareFetch at `epoch`: `partitions` maps each to its acknowledgements
        ([(first, last, type)], or [] to fetch only)."""
        topics = _by_topic(partitions, _Fetch.FetchPartition, _Fetch.AcknowledgementBatch)
        return round_trip(self.sock, ApiKey.SHARE_FETCH, 1, _Fetch(
            group_id=self.group, member_id=member_id or self.member_id,
            share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=1 << 20, max_records=500, batch_size=500,
            topics=[_Fetch.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[]), self._next())

    def fetch(self, partitions: Partitions, max_wait_ms: int = 500) -> Any:
        """A ShareFetch at the session's next epoch, which must be answered without error."""
        answer = self.share_fetch(self.session_epoch, partitions, max_wait_ms)
        assert answer.error_code == 0, (ErrorCode(answer.error_code), answer.error_message)
        self.session_epoch += 1
        return answer

    def acknowledge(self, epoch: int | None, partitions: Partitions) -> Any:
        """One ShareAcknowledge; None: at the session's next epoch, advanced when answered."""
        answer = self._acknowledge(self.session_epoch if epoch is None else epoch, partitions)
        if epoch is None and answer.error_code == 0:
            self.session_epoch += 1
        return answer

    def _acknowledge(self, epoch: int, partitions: Partitions) -> Any:
        topics = _by_topic(partitions, _Ack.AcknowledgePartition, _Ack.AcknowledgementBatch)
        return round_trip(self.sock, ApiKey.SHARE_ACKNOWLEDGE, 1, _Ack(
            group_id=self.group, member_id=self.member_id, share_session_epoch=epoch,
            topics=[_Ack.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()]),
            self._next())

    def acquire(self, partitions: list[tuple[uuid.UUID, int]], count: int
                ) -> dict[tuple[uuid.UUID, int], list[tuple[int, int]]]:
        """Fetch until `count` offsets are acquired: (offset, delivery count) per partition."""
        got: dict[tuple[uuid.UUID, int], list[tuple[int, int]]] = {}

        def enough() -> bool:
            for key, ranges in acquired(self.fetch({p: [] for p in partitions})).items():
                got.setdefault(key, []).extend(ranges)
            return sum(len(r) for r in got.values()) >= count

        wait_until(enough, TIMEOUT_S, f"{count} acquired records")
        return got

    def close(self) -> None:
        self.sock.close()


def _by_topic(partitions: Partitions, partition_cls: Any, batch_cls: Any
              ) -> dict[uuid.UUID, list[Any]]:
    """A request's partitions by topic id, each with its acknowledgement batches (one type
    for each whole range)."""
    topics: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, partition), acks in partitions.items():
        topics.setdefault(topic_id, []).append(partition_cls(
            partition_index=partition, acknowledgement_batches=[
                batch_cls(first_offset=f, last_offset=last, acknowledge_types=[t])
                for f, last, t in acks]))
    return topics


def _unless_loading(answer: Any) -> Any:
    """The answer, or None while the group coordinator is still being loaded or found."""
    return None if answer.error_code in COORDINATOR_NOT_READY else answer


def acquired(answer: Any) -> dict[tuple[uuid.UUID, int], list[tuple[int, int]]]:
    """(offset, delivery count) of every acquired record in a ShareFetch answer."""
    out: dict[tuple[uuid.UUID, int], list[tuple[int, int]]] = {}
    for topic in answer.responses:
        for p in topic.partitions:
            assert p.error_code == 0, (ErrorCode(p.error_code), p.error_message)
            for r in p.acquired_records:
                out.setdefault((topic.topic_id, p.partition_index), []).extend(
                    (o, r.delivery_count) for o in range(r.first_offset, r.last_offset + 1))
    return out


def ack_errors(answer: Any, fetch: bool) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """The acknowledgement error of each partition a ShareFetch (`fetch`) or ShareAcknowledge
    answer lists."""
    return {(t.topic_id, p.partition_index): ErrorCode(
        p.acknowledge_error_code if fetch else p.error_code)
        for t in answer.responses for p in t.partitions}


def topic_id(broker: BrokerProcess, topic: str) -> uuid.UUID:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        metadata = _reg.requests[ApiKey.METADATA].cls
        answer = round_trip(sock, ApiKey.METADATA, 12, metadata(
            topics=[metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    (found,) = answer.topics
    assert found.error_code == 0
    return found.topic_id


def new_queue(broker: BrokerProcess, prefix: str, partitions: int = 1, records: int = 10,
              configs: dict[str, str] | None = None) -> tuple[str, uuid.UUID, str]:
    """A topic with `records` records per partition and a share group reading it from the
    earliest offset: (topic, its id, group)."""
    topic = new_topic_name(prefix)
    create_topic(broker.bootstrap, topic, partitions=partitions)
    for partition in range(partitions):
        produce_to(broker, topic, partition, range(records))
    return topic, topic_id(broker, topic), share_group(broker.bootstrap, prefix, **(configs or {}))


def produce_to(broker: BrokerProcess, topic: str, partition: int, values: range) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in values:
        producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0


def assert_all_acknowledged(members: list[RawShareMember],
                            partitions: list[tuple[uuid.UUID, int]]) -> None:
    """Every record was acknowledged once: the group has nothing more to give any member."""
    for member in members:
        assert acquired(member.fetch({p: [] for p in partitions}, max_wait_ms=200)) == {}


def close_all(*members: RawShareMember) -> None:
    for member in members:
        member.close()


def offsets(ranges: list[tuple[int, int]]) -> list[int]:
    return sorted(o for o, _ in ranges)


# -- share sessions ----------------------------------------------------------------------

def test_a_wrong_share_session_epoch_is_refused_and_the_session_goes_on(
        broker: BrokerProcess) -> None:
    topic, tid, group = new_queue(broker, "epochs")
    member = RawShareMember(broker, group)
    try:
        member.join(topic, 1)
        p0 = (tid, 0)
        held = member.acquire([p0], 10)
        assert held == {p0: [(o, 1) for o in range(10)]}
        # Kafka's SharePartitionManager: a later epoch than the session's next is refused
        # with nothing applied, for ShareFetch and ShareAcknowledge alike.
        wrong = member.share_fetch(member.session_epoch + 5, {p0: [(0, 9, ACCEPT)]})
        assert (wrong.error_code, wrong.responses) == (ErrorCode.INVALID_SHARE_SESSION_EPOCH, [])
        wrong_ack = member.acknowledge(member.session_epoch + 5, {p0: [(0, 9, ACCEPT)]})
        assert wrong_ack.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # ShareAcknowledge never opens a session; a first ShareFetch carries no acks.
        assert member.acknowledge(0, {p0: [(0, 9, ACCEPT)]}).error_code == \
            ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert member.share_fetch(0, {p0: [(0, 9, ACCEPT)]}).error_code == \
            ErrorCode.INVALID_REQUEST
        # The session is where it was: the right epoch acknowledges the records it holds.
        accepted = member.fetch({p0: [(0, 9, ACCEPT)]}, max_wait_ms=0)
        assert ack_errors(accepted, fetch=True) == {p0: ErrorCode.NONE}
        # A member with no session here: SHARE_SESSION_NOT_FOUND, for any epoch but 0.
        stranger = str(uuid.uuid4())
        unknown: list[tuple[int, Partitions]] = [(1, {p0: []}), (FINAL_EPOCH, {})]
        for epoch, partitions in unknown:
            missing = member.share_fetch(epoch, partitions, member_id=stranger)
            assert missing.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND, epoch
        produce_to(broker, topic, 0, range(10, 15))
        more = member.acquire([p0], 5)
        assert more == {p0: [(o, 1) for o in range(10, 15)]}  # 0-9 stay accepted
        closing = member.acknowledge(FINAL_EPOCH, {p0: [(10, 14, ACCEPT)]})
        assert closing.error_code == 0
        assert ack_errors(closing, fetch=False) == {p0: ErrorCode.NONE}
        # Closed: its epoch is gone with it.
        assert member.share_fetch(member.session_epoch, {p0: []}).error_code == \
            ErrorCode.SHARE_SESSION_NOT_FOUND
    finally:
        member.close()


def test_one_share_session_past_the_limit_is_share_session_limit_reached(broker_factory: Any
                                                                          ) -> None:
    small = broker_factory({**SHARE_BROKER, "group.share.max.share.sessions": "2"})
    topic, tid, group = new_queue(small, "sessions", records=30)
    p0 = (tid, 0)
    first, second, third = (RawShareMember(small, group) for _ in range(3))
    try:
        for member in (first, second, third):
            member.join(topic, 1)
        assert member_offsets(first.acquire([p0], 30)) == list(range(30))
        assert acquired(second.fetch({p0: []}, max_wait_ms=0)) == {}  # nothing left
        refused = third.share_fetch(0, {p0: []})
        assert (refused.error_code, refused.responses) == (
            ErrorCode.SHARE_SESSION_LIMIT_REACHED, [])
        # Opening a session again for a member that has one is no new session: allowed at
        # the limit (the member's records go back to be acquired again).
        first.session_epoch = 0
        again = member_offsets(first.fetch({p0: []}, max_wait_ms=0))
        assert again in ([], list(range(30)))
        # Once a session closes, the third member gets its own; the sessions that stayed open
        # go on, and every record is acknowledged once.
        assert second.acknowledge(FINAL_EPOCH, {}).error_code == 0
        produce_to(small, topic, 0, range(30, 40))
        assert member_offsets(third.acquire([p0], 10)) == list(range(30, 40))
        done = third.acknowledge(None, {p0: [(30, 39, ACCEPT)]})
        assert ack_errors(done, fetch=False) == {p0: ErrorCode.NONE}
        if not again:
            assert member_offsets(first.acquire([p0], 30)) == list(range(30))
        accepted = first.fetch({p0: [(0, 29, ACCEPT)]}, max_wait_ms=0)
        assert ack_errors(accepted, fetch=True) == {p0: ErrorCode.NONE}
        assert_all_acknowledged([first, third], [p0])
    finally:
        close_all(first, second, third)


def member_offsets(answer_or_acquired: Any) -> list[int]:
    ranges = answer_or_acquired if isinstance(answer_or_acquired, dict) \
        else acquired(answer_or_acquired)
    return sorted(o for rs in ranges.values() for o, _ in rs)


# -- membership --------------------------------------------------------------------------

def test_group_share_max_size_refuses_one_more_member_and_the_others_go_on(
        broker: BrokerProcess) -> None:
    topic, tid, group = new_queue(broker, "full", records=20)
    members = [RawShareMember(broker, group) for _ in range(MAX_SIZE - 1)]
    consumer = share_consumer(broker.bootstrap, group, topic)
    late = RawShareMember(broker, group)
    try:
        for member in members:
            member.join(topic, 1)
        first = wait_until(lambda: poll_records(consumer), 30, "the share consumer's records")
        before = group_view(late)
        assert len(before[1]) == MAX_SIZE
        refused = late.heartbeat(0, [topic])
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The share group has reached its maximum capacity of {MAX_SIZE} members.")
        # The group is as it was (same epoch, same members); the members heartbeat on and
        # the consumer reads on.
        assert group_view(late) == before
        for member in members:
            assert member.heartbeat(member.member_epoch).error_code == 0
        got = [m.offset() for m in first]
        while len(got) < 20:
            got += [m.offset() for m in poll_records(consumer)]
        assert sorted(got) == list(range(20))
        # One leaves: there is room again.
        assert members[0].heartbeat(-1).error_code == 0
        assert late.heartbeat(0, [topic]).error_code == 0
    finally:
        consumer.commit_sync()
        consumer.close()
        close_all(*members, late)


def group_view(member: RawShareMember) -> tuple[int, list[str]]:
    """ShareGroupDescribe of the member's group: its epoch and member ids."""
    answer = shadowed_round_trip(member.sock, SHARE_GROUP_DESCRIBE, 1, _Describe(
        group_ids=[member.group], include_authorized_operations=False), member._next())
    (group,) = answer.groups
    assert group.error_code == 0, group.error_message
    return group.group_epoch, sorted(m.member_id for m in group.members)


def test_share_keys_on_a_classic_or_consumer_group_id_are_group_id_not_found(
        broker: BrokerProcess) -> None:
    topic = new_topic_name("typed")
    create_topic(broker.bootstrap, topic)
    produce_to(broker, topic, 0, range(10))
    readers = {}
    for protocol in ("classic", "consumer"):
        group = new_topic_name(protocol)
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                           "group.protocol": protocol, "auto.offset.reset": "earliest"})
        reader.subscribe([topic])
        readers[group] = (reader, read_values(reader, 10))
    member = RawShareMember(broker, "")
    try:
        for group, (_, values) in readers.items():
            assert values == [b"%d" % i for i in range(10)]
            member.group = group
            joined = member.heartbeat(0, [topic])
            assert (joined.error_code, joined.error_message) == (
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a share group.")
        missing = "nobody-" + uuid.uuid4().hex[:8]
        described = shadowed_round_trip(member.sock, SHARE_GROUP_DESCRIBE, 1, _Describe(
            group_ids=[*readers, missing], include_authorized_operations=False), 99)
        assert [(g.group_id, g.error_code, g.error_message) for g in described.groups] == [
            *[(g, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {g} is not a share group.")
              for g in readers],
            (missing, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {missing} not found.")]
        # Both groups are as they were: each reads what comes next, once.
        produce_to(broker, topic, 0, range(10, 15))
        for reader, _ in readers.values():
            assert read_values(reader, 5) == [b"%d" % i for i in range(10, 15)]
    finally:
        member.close()
        for reader, _ in readers.values():
            reader.close()


def read_values(reader: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value() or b"")
    return values


# -- acknowledgements --------------------------------------------------------------------

def test_acknowledging_records_another_member_holds_is_invalid_record_state_there_only(
        broker: BrokerProcess) -> None:
    topic, tid, group = new_queue(broker, "foreign", partitions=2)
    p0, p1 = (tid, 0), (tid, 1)
    holder, other = RawShareMember(broker, group), RawShareMember(broker, group)
    try:
        holder.join(topic, 2)
        other.join(topic, 2)
        held = holder.acquire([p0, p1], 20)
        assert {k: offsets(v) for k, v in held.items()} == {p0: list(range(10)),
                                                            p1: list(range(10))}
        produce_to(broker, topic, 1, range(10, 20))
        mine = other.acquire([p1], 10)
        assert mine == {p1: [(o, 1) for o in range(10, 20)]}
        # The other member acknowledges the holder's records on p0, a range nobody was
        # given, and its own records on p1: p0 is INVALID_RECORD_STATE, p1 applies.
        answer = other.acknowledge(None, {
            p0: [(0, 9, ACCEPT), (500, 510, ACCEPT)], p1: [(10, 19, ACCEPT)]})
        assert answer.error_code == 0
        assert ack_errors(answer, fetch=False) == {p0: ErrorCode.INVALID_RECORD_STATE,
                                                   p1: ErrorCode.NONE}
        # The holder's locks were not touched: it acknowledges its records once, and the
        # share group has nothing more to give.
        done = holder.fetch({p0: [(0, 9, ACCEPT)], p1: [(0, 9, ACCEPT)]}, max_wait_ms=0)
        assert ack_errors(done, fetch=True) == {p0: ErrorCode.NONE, p1: ErrorCode.NONE}
        assert_all_acknowledged([holder, other], [p0, p1])
    finally:
        close_all(holder, other)


def test_acknowledging_after_the_lock_expired_is_invalid_record_state_there_only(
        broker: BrokerProcess) -> None:
    topic, tid, group = new_queue(broker, "expired", partitions=2, configs={
        "share.record.lock.duration.ms": str(SHORT_LOCK_MS)})
    p0, p1 = (tid, 0), (tid, 1)
    slow, quick = RawShareMember(broker, group), RawShareMember(broker, group)
    try:
        slow.join(topic, 2)
        quick.join(topic, 2)
        assert slow.acquire([p0], 10) == {p0: [(o, 1) for o in range(10)]}
        # The slow member's lock on p0 ends; the quick one is given the records again.
        assert quick.acquire([p0], 10) == {p0: [(o, 2) for o in range(10)]}
        quick_done = quick.fetch({p0: [(0, 9, ACCEPT)]}, max_wait_ms=0)
        assert ack_errors(quick_done, fetch=True) == {p0: ErrorCode.NONE}
        # The slow member's late acceptance of p0 is refused; its fresh records on p1 in the
        # same request are accepted.
        fresh = slow.acquire([p1], 10)
        assert fresh == {p1: [(o, 1) for o in range(10)]}
        late = slow.fetch({p0: [(0, 9, ACCEPT)], p1: [(0, 9, ACCEPT)]}, max_wait_ms=0)
        assert ack_errors(late, fetch=True) == {p0: ErrorCode.INVALID_RECORD_STATE,
                                                p1: ErrorCode.NONE}
        assert_all_acknowledged([slow, quick], [p0, p1])
    finally:
        close_all(slow, quick)


# -- members that go away ----------------------------------------------------------------

def test_a_member_silent_with_its_connection_open_gives_its_records_back_at_session_timeout(
        broker: BrokerProcess) -> None:
    """No heartbeat, no fetch, the TCP connection kept: at the share session timeout (6 s
    here) the member is fenced and its records go to another member, long before their
    60 s locks would end."""
    topic, tid, group = new_queue(broker, "silent",
                                  configs={"share.record.lock.duration.ms": "60000"})
    p0 = (tid, 0)
    silent = RawShareMember(broker, group)
    consumer = None
    try:
        silent.join(topic, 1)
        assert silent.acquire([p0], 10) == {p0: [(o, 1) for o in range(10)]}
        consumer = share_consumer(broker.bootstrap, group, topic)
        started = time.monotonic()
        got = wait_until(lambda: poll_records(consumer), 40, "the silent member's records")
        assert time.monotonic() - started < 40  # well before the 60 s locks end
        assert [(m.offset(), m.value(), m.delivery_count()) for m in got] == [
            (o, b"%d" % o, 2) for o in range(10)]
        # The member is gone from the group and from the partition leader.
        assert silent.heartbeat(silent.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        late = silent.acknowledge(None, {p0: [(0, 9, ACCEPT)]})
        assert late.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    finally:
        if consumer is not None:
            consumer.commit_sync()
            consumer.close()
        silent.close()
