"""Follower fetchers: this broker's replicas copy their leaders' logs (Kafka's
ReplicaFetcherManager and ReplicaFetcherThread, as asyncio tasks).

Each followed partition is handled by one fetcher per (leader, `num.replica.fetchers` slot).
A fetcher sends Fetch v16 with this broker's id and epoch (ReplicaState) for all its partitions
at their log end offsets, with the epoch of their last batch (LastFetchedEpoch, KIP-320), and
long-polls `replica.fetch.wait.max.ms` for `replica.fetch.min.bytes`. The answer's batches are
appended as they are: they arrive as memoryviews of the response frame (read straight into a
pooled buffer, network/frames.py) and go to the log without being decoded (the CRC is checked); the log rebuilds producer state, leader epochs and the
transaction index from them. A DivergingEpoch in the answer truncates the diverged tail first.
The follower's high watermark is the leader's, capped at its own end. A partition whose leader
answers with an error waits `replica.fetch.backoff.ms` (the next metadata image usually tells
it more); connections run separately from other inter-broker traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka_ext.network.node_client import NodeChannels
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.replication.partition import Partition, truncation_offset

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker

log = logging.getLogger(__name__)

REPLICA_FETCH_VERSION = 16
THROTTLE_RECHECK_S = 1.0  # a throttled partition looks again this soon: the rate may change
_Request = registry()["FetchRequest"].cls
TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Followed:
    hosted: Partition
    leader_epoch: int
    delayed_until: float = 0.0  # loop time before which it is not fetched (after an error)


@dataclass(slots=True)
class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    manager: ReplicaFetcherManager
    leader_id: int
    partitions: dict[TopicPartition, _Followed] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.changed.clear()
            now = loop.time()
            ready = {tp: f for tp, f in self.partitions.items() if f.delayed_until <= now}
            held = self.manager.held_back(ready)
            if held:  # a reassignment's throttle: these wait until the budget recovers
                self._delay(held, min(self.manager.quota.seconds_until_allowed(),
                                      THROTTLE_RECHECK_S))
                ready = {tp: f for tp, f in ready.items() if tp not in held}
            if not ready:
                wake = min((f.delayed_until for f in self.partitions.values()), default=None)
                try:
                    await asyncio.wait_for(self.changed.wait(),
                                           None if wake is None else max(wake - now, 0.001))
                except TimeoutError:
                    pass
                continue
            # The answer's records are views of the received frame until this block ends.
            async with contextlib.AsyncExitStack() as answer_scope:
                try:
                    response = await answer_scope.enter_async_context(
                        self.manager.fetch(self.leader_id, ready))
                except (ConnectionError, TimeoutError, OSError, KafkaError) as exc:
                    log.debug("fetch from broker %d failed: %s", self.leader_id, exc)
                    self._delay(ready, self.manager.backoff_s)
                    continue
                if response.error_code:
                    log.info("broker %d refused our fetch: %s", self.leader_id,
                             ErrorCode(response.error_code).name)
                    self._delay(ready, self.manager.backoff_s)
                    continue
                self.manager.process(self, ready, response)

    def _delay(self, followed: dict[TopicPartition, _Followed], seconds: float) -> None:
        until = asyncio.get_running_loop().time() + seconds
        for tp, f in followed.items():
            if self.partitions.get(tp) is f:
                f.delayed_until = until


class ReplicaFetcherManager:
    """Owned by the broker's event loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        values = config.values
        self.num_fetchers = int(str(values["num.replica.fetchers"]))
        self.max_wait_ms = int(str(values["replica.fetch.wait.max.ms"]))
        self.min_bytes = int(str(values["replica.fetch.min.bytes"]))
        self.partition_max_bytes = int(str(values["replica.fetch.max.bytes"]))
        self.response_max_bytes = int(str(values["replica.fetch.response.max.bytes"]))
        self.backoff_s = int(str(values["replica.fetch.backoff.ms"])) / 1000
        self.socket_timeout_s = int(str(values["replica.socket.timeout.ms"])) / 1000
        # Separate connections: a long-polling fetch never delays markers or forwarding.
        self.channels = NodeChannels(broker.broker_endpoint,
                                     f"kafka-ext-replica-fetcher-{broker.node_id}",
                                     broker.inter_broker_security)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._stopped = False

    # -- assignment --------------------------------------------------------------------------

    def update(self, followed: dict[TopicPartition, Partition]) -> None:
        """Fetch exactly `followed` (partitions with a leader elsewhere), each from its leader
        in its epoch; called with every metadata image."""
        if self._stopped:
            return
        wanted: dict[tuple[int, int], dict[TopicPartition, Partition]] = {}
        for tp, hosted in followed.items():
            if hosted.leader_id < 0:
                continue  # no leader: nothing to fetch until one is elected
            slot = zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.num_fetchers
            wanted.setdefault((hosted.leader_id, slot), {})[tp] = hosted
        for key, fetcher in list(self.fetchers.items()):
            keep = wanted.get(key, {})
            for tp in [tp for tp in fetcher.partitions if tp not in keep]:
                del fetcher.partitions[tp]
                fetcher.changed.set()
        for key, partitions in wanted.items():
            existing = self.fetchers.get(key)
            if existing is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(self, key[0])
                fetcher.task = asyncio.get_running_loop().create_task(fetcher.run())
            else:
                fetcher = existing
            for tp, hosted in partitions.items():
                current = fetcher.partitions.get(tp)
                if (current is None or current.hosted is not hosted
                        or current.leader_epoch != hosted.leader_epoch):
                    fetcher.partitions[tp] = _Followed(hosted, hosted.leader_epoch)
                    fetcher.changed.set()
        for key in [k for k, f in self.fetchers.items() if not f.partitions]:
            fetcher = self.fetchers.pop(key)
            if fetcher.task is not None:
                fetcher.task.cancel()

    async def stop(self) -> None:
        self._stopped = True
        for fetcher in self.fetchers.values():
            if fetcher.task is not None:
                fetcher.task.cancel()
        self.fetchers.clear()
        await self.channels.close()

    # -- throttling (replication/replication_quota.py) ----------------------------------------

    @property
    def quota(self) -> Any:
        return self.broker.replica_manager.follower_quota

    def held_back(self, ready: dict[TopicPartition, _Followed]) -> dict[TopicPartition, _Followed]:
        """The partitions a reassignment throttles that must skip this fetch: out of sync,
        listed in follower.replication.throttled.replicas, and the budget in debt."""
        throttled = self.broker.replica_manager.follower_throttled
        if not throttled or not self.quota.exceeded():
            return {}
        node_id = self.broker.node_id
        return {tp: f for tp, f in ready.items()
                if tp in throttled and node_id not in f.hosted.isr}

    def _record_throttled(self, followed: dict[TopicPartition, _Followed], response: Any) -> None:
        throttled = self.broker.replica_manager.follower_throttled
        if not throttled:
            return
        names = {(f.hosted.topic_id, f.hosted.partition): tp for tp, f in followed.items()}
        self.quota.record(sum(
            memoryview(data.records).nbytes if data.records is not None else 0
            for topic in response.responses for data in topic.partitions
            if names.get((topic.topic_id, data.partition_index)) in throttled))

    # -- one fetch ---------------------------------------------------------------------------

    def fetch(self, leader_id: int,
              followed: dict[TopicPartition, _Followed]) -> AbstractAsyncContextManager[Any]:
        """The fetch of `followed` from their leader, as a block in which its answer is valid
        (NodeChannels.leased: the records are never copied out of the received frame)."""
        by_topic: dict[Any, Any] = {}
        for f in followed.values():
            hosted, plog = f.hosted, f.hosted.log
            topic = by_topic.get(hosted.topic_id)
            if topic is None:
                topic = by_topic[hosted.topic_id] = _Request.FetchTopic(
                    topic=hosted.topic, topic_id=hosted.topic_id, partitions=[])
            topic.partitions.append(_Request.FetchPartition(
                partition=hosted.partition, current_leader_epoch=f.leader_epoch,
                fetch_offset=plog.log_end_offset, last_fetched_epoch=plog.latest_epoch,
                log_start_offset=plog.log_start_offset,
                partition_max_bytes=self.partition_max_bytes))
        broker = self.broker
        request = _Request(
            replica_state=_Request.ReplicaState(replica_id=broker.node_id,
                                                replica_epoch=broker.lifecycle.broker_epoch),
            max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
            max_bytes=self.response_max_bytes, isolation_level=0, session_id=0,
            session_epoch=-1, topics=list(by_topic.values()), forgotten_topics_data=[],
            rack_id="")
        return self.channels.leased(leader_id, ApiKey.FETCH, REPLICA_FETCH_VERSION, request,
                                    self.socket_timeout_s + self.max_wait_ms / 1000)

    def chunk_fetch(self, source: int, request: Any) -> AbstractAsyncContextManager[Any]:
        """A fetch of chunk data from a broker that holds it (replication/chunk_filler.py), on
        the fetchers' connections."""
        return self.channels.leased(source, ApiKey.FETCH, REPLICA_FETCH_VERSION, request,
                                    self.socket_timeout_s)

    def process(self, fetcher: ReplicaFetcher, followed: dict[TopicPartition, _Followed],
                response: Any) -> None:
        by_id = {(f.hosted.topic_id, f.hosted.partition): (tp, f) for tp, f in followed.items()}
        self._record_throttled(followed, response)
        failed: dict[TopicPartition, _Followed] = {}
        for topic in response.responses:
            for data in topic.partitions:
                found = by_id.get((topic.topic_id, data.partition_index))
                if found is None:
                    continue
                tp, f = found
                if fetcher.partitions.get(tp) is not f:
                    continue  # the metadata moved it while the fetch was out
                try:
                    self._process_partition(f, data)
                except KafkaError as exc:
                    log.info("%s-%d: fetch from broker %d: %s", tp[0], tp[1],
                             fetcher.leader_id, exc)
                    failed[tp] = f
                except OSError as exc:  # KIP-112: our log's dir goes offline
                    self.broker.replica_manager.on_storage_error(f.hosted.log, exc)
                    failed[tp] = f
        if failed:
            fetcher._delay(failed, self.backoff_s)

    def _process_partition(self, f: _Followed, data: Any) -> None:
        hosted, plog = f.hosted, f.hosted.log
        error = ErrorCode(data.error_code)
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._reset_out_of_range(hosted, data)
            return
        if error != ErrorCode.NONE:
            raise KafkaError(error, "refused by the leader")
        diverging = data.diverging_epoch
        if diverging.epoch >= 0 or diverging.end_offset >= 0:
            self._truncate_diverged(hosted, diverging.epoch, diverging.end_offset)
            return
        records = data.records
        if records is not None and len(records):
            plog.append_as_follower(records)
        high_watermark = plog.high_watermark
        plog.high_watermark = min(data.high_watermark, plog.log_end_offset)
        if data.log_start_offset > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(data.log_start_offset)
        if plog.high_watermark > high_watermark:  # consumers reading here (KIP-392)
            self.broker.replica_manager.notify_data(hosted.topic, hosted.partition)

    def _truncate_diverged(self, hosted: Partition, epoch: int, end_offset: int) -> None:
        plog = hosted.log
        target = truncation_offset(plog, epoch, end_offset)
        if target < plog.high_watermark:
            log.warning("%s-%d: truncating below our high watermark %d to %d (leader epoch %d)",
                        hosted.topic, hosted.partition, plog.high_watermark, target, epoch)
        if plog.truncate_to(target):
            log.info("%s-%d: truncated the diverged tail to offset %d (leader's epoch %d ends "
                     "at %d)", hosted.topic, hosted.partition, target, epoch, end_offset)

    def _reset_out_of_range(self, hosted: Partition, data: Any) -> None:
        """Our end is outside the leader's log: below its start (it deleted what we lack: start
        empty there) or above its end (truncate to its high watermark, which we all have)."""
        plog = hosted.log
        if data.log_start_offset >= 0 and plog.log_end_offset < data.log_start_offset:
            log.info("%s-%d: our end %d is below the leader's log start %d: starting there",
                     hosted.topic, hosted.partition, plog.log_end_offset, data.log_start_offset)
            plog.truncate_fully_and_start_at(data.log_start_offset)
        elif data.high_watermark >= 0 and plog.log_end_offset > data.high_watermark:
            plog.truncate_to(data.high_watermark)
        else:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, "no offset to restart from")
