"""Metrics for Prometheus under the names the Kafka JMX exporter's usual rules give Kafka's
MBeans: `kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T` is
`kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`. docs/metrics.md lists them all.

The hot path pays integer additions: per request (RequestMetrics, fed by the dispatcher) and
per partition of a produce or fetch (BrokerTopicStats); a batch's record count is read from its
header, records are never decoded. Everything else (partition, leader and group counts,
under-replicated partitions, group lags, log sizes, the quorum) is computed at scrape time by
BrokerCollector from the broker's own state. MetricsServer serves `/metrics` on the event loop
itself, so a scrape reads that state between two callbacks, never while it changes, and the
counters need no lock.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import RECORDS_COUNT_POS
from kafka_ext.server.config import ConfigError

if TYPE_CHECKING:
    from kafka_ext.server.broker import Broker

log = logging.getLogger(__name__)

_RECORDS_COUNT = struct.Struct(">i")  # recordsCount, the last field of a v2 batch header
_HEADER_END = RECORDS_COUNT_POS + _RECORDS_COUNT.size
# Upper bounds (ms) of the latency histograms' buckets: loopback produces take well under a
# millisecond, long-polling fetches wait up to fetch.max.wait.ms (500 ms by default).
BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
              5000.0, 10000.0, 30000.0)
_BUCKET_LABELS = [*(f"{b:g}" for b in BUCKETS_MS), "+Inf"]
# Fetch v15 moved the follower's id into ReplicaState (KIP-903), as server/fetch.py reads it.
_REPLICA_STATE_VERSION = 15
# Partition errors Kafka's ReplicaManager does not count as failed requests: the client's
# metadata is stale or a disk failed, not the request (FailedProduce/FetchRequestsPerSec).
_EXPECTED_PRODUCE_ERRORS = frozenset(int(c) for c in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.KAFKA_STORAGE_ERROR))
_EXPECTED_FETCH_ERRORS = frozenset(int(c) for c in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.OFFSET_OUT_OF_RANGE))
_REQUEST_READ_TIMEOUT_S = 10.0
_REQUEST_HEAD_MAX_BYTES = 16 * 1024


def _request_names() -> dict[int, str]:
    """Kafka's ApiKeys names ("Produce", "Metadata"), the `request` label of RequestMetrics."""
    return {key: cls.name.removesuffix("Request") for key, cls in registry().requests.items()}


# -- per request -------------------------------------------------------------------------------

class LatencyHistogram:
    """Observations in milliseconds counted into BUCKETS_MS; loop-owned, so lock-free."""

    __slots__ = ("counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)  # the last one is +Inf
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(BUCKETS_MS, ms)] += 1  # bisect_left: a bound is inclusive (le)
        self.sum_ms += ms

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs, as Prometheus histograms expose them."""
        out = []
        total = 0
        for label, count in zip(_BUCKET_LABELS, self.counts, strict=True):
            total += count
            out.append((label, float(total)))
        return out


class _RequestStages:
    __slots__ = ("total", "queue", "send")

    def __init__(self) -> None:
        self.total = LatencyHistogram()
        self.queue = LatencyHistogram()
        self.send = LatencyHistogram()


class RequestMetrics:
    """Kafka's RequestChannel metrics: requests per API and version, and per API how long a
    request took in all (frame complete to response encoded), waited before its handler started
    (RequestQueueTimeMs: the loop was busy) and took to encode its response (our
    ResponseSendTimeMs: the write itself is a non-blocking hand-over to the transport).

    Fetches count under "Fetch" and under "FetchConsumer" or "FetchFollower", as in Kafka.
    Owned by the dispatcher; all on the event loop."""

    __slots__ = ("requests", "stages", "_names")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}
        self.stages: dict[str, _RequestStages] = {}
        self._names = _request_names()

    def record(self, api_key: int, api_version: int, request: Any, arrived: float,
               started: float, handled: float, name: str | None = None) -> None:
        """One answered request, in time.perf_counter() seconds: `arrived` when its frame was
        complete (0.0: handed to the dispatcher directly, as tests do), `started` when its
        handler started and `handled` when it returned. `name` overrides the key's name (a
        stock client's share-group API on 76/77)."""
        done = time.perf_counter()
        arrived = arrived or started
        name = name or self._names.get(api_key, str(api_key))
        self._record(name, api_version, arrived, started, handled, done)
        if api_key == ApiKey.FETCH:
            replica_id = (request.replica_state.replica_id
                          if api_version >= _REPLICA_STATE_VERSION else request.replica_id)
            self._record("FetchFollower" if replica_id >= 0 else "FetchConsumer", api_version,
                         arrived, started, handled, done)

    def _record(self, name: str, api_version: int, arrived: float, started: float,
                handled: float, done: float) -> None:
        key = (name, api_version)
        self.requests[key] = self.requests.get(key, 0) + 1
        stages = self.stages.get(name)
        if stages is None:
            stages = self.stages[name] = _RequestStages()
        stages.total.observe((done - arrived) * 1000)
        stages.queue.observe((started - arrived) * 1000)
        stages.send.observe((done - handled) * 1000)


# -- per topic ---------------------------------------------------------------------------------

class TopicStats:
    """One topic's counters (or all topics'), Kafka's BrokerTopicMetrics meters as totals."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "fetch_requests",
                 "failed_produce_requests", "failed_fetch_requests", "share_fetch_requests",
                 "failed_share_fetch_requests", "share_acknowledgement_requests",
                 "failed_share_acknowledgement_requests")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.fetch_requests = 0
        self.failed_produce_requests = 0
        self.failed_fetch_requests = 0
        # KIP-932 / KIP-1103: share-partitions in ShareFetch requests, and those acknowledged
        self.share_fetch_requests = 0
        self.failed_share_fetch_requests = 0
        self.share_acknowledgement_requests = 0
        self.failed_share_acknowledgement_requests = 0


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: client produce and fetch counters per topic and for all topics.
    Counted per partition of a request (Kafka marks its meters there too); replication and
    coordinator writes are not client traffic and are not counted. Loop-owned."""

    __slots__ = ("topics", "all_topics")

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.all_topics = TopicStats()

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def record_share(self, topic: str, fetched: bool, fetch_failed: bool, acknowledged: bool,
                     acknowledge_failed: bool) -> None:
        """One share-partition of a ShareFetch or ShareAcknowledge request."""
        for stats in (self.topic(topic), self.all_topics):
            stats.share_fetch_requests += fetched
            stats.failed_share_fetch_requests += fetch_failed
            stats.share_acknowledgement_requests += acknowledged
            stats.failed_share_acknowledgement_requests += acknowledge_failed

    def record_produce(self, request: Any, responses: Iterable[Any]) -> None:
        """A produce request and its per-topic answers, in request order: appended batches
        count their header's record count and their size. (zip is not strict: a miscount
        is better than a produce failed by its metrics.)"""
        every = self.all_topics
        for topic_data, answer in zip(request.topic_data, responses, strict=False):
            stats = self.topic(topic_data.name)
            for data, partition in zip(topic_data.partition_data, answer.partition_responses,
                                       strict=False):
                stats.produce_requests += 1
                every.produce_requests += 1
                code = partition.error_code
                if code:
                    if code not in _EXPECTED_PRODUCE_ERRORS:
                        stats.failed_produce_requests += 1
                        every.failed_produce_requests += 1
                    continue
                records = data.records
                if records is None or len(records) < _HEADER_END:
                    continue  # a v0/v1 message set that held no whole message: nothing appended
                (count,) = _RECORDS_COUNT.unpack_from(records, RECORDS_COUNT_POS)
                stats.messages_in += count
                every.messages_in += count
                stats.bytes_in += len(records)
                every.bytes_in += len(records)

    def record_fetch(self, targets: Iterable[Any], results: Iterable[Any]) -> None:
        """A consumer's fetch: each target (with its `topic`) and the partition data answered."""
        every = self.all_topics
        for target, data in zip(targets, results, strict=False):
            stats = self.topic(target.topic) if target.topic else None
            every.fetch_requests += 1
            if stats is not None:
                stats.fetch_requests += 1
            code = data.error_code
            if code:
                if code not in _EXPECTED_FETCH_ERRORS:
                    every.failed_fetch_requests += 1
                    if stats is not None:
                        stats.failed_fetch_requests += 1
                continue
            records = data.records
            if not records:
                continue
            size = sum(len(r) for r in records)
            every.bytes_out += size
            if stats is not None:
                stats.bytes_out += size

    def forget_deleted(self, known: Iterable[str]) -> None:
        """Drop the counters of topics no longer in the metadata (Kafka removes a deleted
        topic's metrics); the all-topics totals keep what they counted."""
        keep = set(known)
        for name in [n for n in self.topics if n not in keep]:
            del self.topics[name]


# -- scrape time -------------------------------------------------------------------------------

def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class BrokerCollector:
    """Builds every family from the broker's state at scrape time (prometheus_client's custom
    collector protocol); runs on the event loop, see MetricsServer."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        # Diskless WAL objects: timed by the writer itself, once per object.
        self.wal_upload_time = LatencyHistogram()
        self.wal_commit_time = LatencyHistogram()
        writer = broker.diskless.writer
        writer.observe_upload_ms = self.wal_upload_time.observe
        writer.observe_commit_ms = self.wal_commit_time.observe

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield from self._request_metrics()
        yield from self._socket_server_metrics()
        yield from self._replica_manager_metrics()
        yield from self._log_metrics()
        controller = self.broker.controller
        if controller is not None:  # None until start() opened the metadata log
            yield from self._controller_metrics(controller)
            yield from self._raft_metrics(controller)
        yield from self._group_metrics()
        yield from self._share_group_metrics()
        yield from self._diskless_metrics()

    def _topic_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        stats = broker.topic_stats
        if broker.controller is not None:
            stats.forget_deleted(broker.controller.image.topics_by_name)
        per_topic = sorted(stats.topics.items())
        for field, name, doc in (
                ("messages_in", "messagesin", "Records appended by client produce requests"),
                ("bytes_in", "bytesin", "Bytes of batches appended by client produce requests"),
                ("bytes_out", "bytesout", "Bytes of records sent to consumers"),
                ("produce_requests", "totalproducerequests",
                 "Partitions in produce requests"),
                ("fetch_requests", "totalfetchrequests", "Partitions in consumer fetch requests"),
                ("failed_produce_requests", "failedproducerequests",
                 "Partitions of produce requests that failed"),
                ("failed_fetch_requests", "failedfetchrequests",
                 "Partitions of consumer fetch requests that failed"),
                ("share_fetch_requests", "totalsharefetchrequests",
                 "Share-partitions in ShareFetch requests"),
                ("failed_share_fetch_requests", "failedsharefetchrequests",
                 "Share-partitions of ShareFetch requests that failed"),
                ("share_acknowledgement_requests", "totalshareacknowledgementrequests",
                 "Share-partitions acknowledged (ShareAcknowledge, or within ShareFetch)"),
                ("failed_share_acknowledgement_requests", "failedshareacknowledgementrequests",
                 "Share-partition acknowledgements that failed")):
            # The all-topics series carries no topic label, as the JMX exporter gives Kafka's
            # BrokerTopicMetrics MBean without a topic key.
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc,
                                         labels=["topic"])
            family.add_metric([], getattr(stats.all_topics, field))
            for topic, topic_stats in per_topic:
                family.add_metric([topic], getattr(topic_stats, field))
            yield family

    def _request_metrics(self) -> Iterator[Metric]:
        metrics = self.broker.dispatcher.request_metrics
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, by API and version",
                                       labels=["request", "version"])
        for (name, version), count in sorted(metrics.requests.items()):
            requests.add_metric([name, str(version)], count)
        yield requests
        for attr, name, doc in (
                ("total", "totaltimems", "Time from a request's arrival to its encoded answer"),
                ("queue", "requestqueuetimems",
                 "Time a request waited for the event loop before its handler started"),
                ("send", "responsesendtimems", "Time to encode a request's answer")):
            family = HistogramMetricFamily(f"kafka_network_requestmetrics_{name}", doc,
                                           labels=["request"])
            for request, stages in sorted(metrics.stages.items()):
                histogram: LatencyHistogram = getattr(stages, attr)
                family.add_metric([request], histogram.buckets(), histogram.sum_ms)
            yield family

    def _socket_server_metrics(self) -> Iterator[Metric]:
        server = self.broker.socket_server
        memory = server.memory
        # Kafka's SocketServer MemoryPoolAvailable is Long.MAX_VALUE without a limit.
        available = memory.available_bytes if memory.capacity_bytes >= 0 else 2 ** 63 - 1
        yield _gauge("kafka_network_socketserver_memorypoolavailable",
                     "Bytes left in queued.max.request.bytes", available)
        yield _gauge("kafka_network_socketserver_memorypoolused",
                     "Request bytes read and queued, charged to queued.max.request.bytes",
                     memory.used_bytes)
        # Not Kafka MBeans: how many connections wait for that memory, and are open.
        yield _gauge("kafka_network_socketserver_memorypoolmutedconnections",
                     "Connections whose reading is paused until request memory is freed",
                     memory.muted_connections)
        yield _gauge("kafka_network_socketserver_connections", "Open client connections",
                     len(server.connections))

    def _replica_manager_metrics(self) -> Iterator[Metric]:
        replicas = self.broker.replica_manager
        leaders = under_replicated = under_min_isr = at_min_isr = 0
        for hosted in replicas.partitions.values():
            if not hosted.is_leader:
                continue
            leaders += 1
            isr = len(hosted.isr)
            if isr < len(hosted.replicas):
                under_replicated += 1
            min_isr = hosted.log.config.min_insync_replicas
            if isr < min_isr:
                under_min_isr += 1
            elif isr == min_isr:
                at_min_isr += 1
        offline = len(replicas.storage_errors) + len(self.broker.log_manager.offline_partitions)
        # Not a Kafka MBean (Kafka's is the controller's OfflinePartitionsCount), asked for by
        # dashboards: partitions with a replica here and no leader, as this broker's metadata has it.
        leaderless = 0
        if self.broker.controller is not None:
            node_id = self.broker.node_id
            for topic in self.broker.controller.image.topics_by_name.values():
                for part in topic.partitions.values():
                    if part.leader < 0 and node_id in part.replicas and not part.is_diskless:
                        leaderless += 1
        prefix = "kafka_server_replicamanager_"
        yield _gauge(prefix + "partitioncount", "Partitions with a replica on this broker",
                     len(replicas.partitions))
        yield _gauge(prefix + "leadercount", "Partitions this broker leads", leaders)
        yield _gauge(prefix + "underreplicatedpartitions",
                     "Partitions led here whose ISR is smaller than their replica set",
                     under_replicated)
        yield _gauge(prefix + "underminisrpartitioncount",
                     "Partitions led here whose ISR is below min.insync.replicas", under_min_isr)
        yield _gauge(prefix + "atminisrpartitioncount",
                     "Partitions led here whose ISR is exactly min.insync.replicas", at_min_isr)
        yield _gauge(prefix + "offlinereplicacount",
                     "Replicas of this broker whose log is offline (failed log dir or open)",
                     offline)
        yield _gauge(prefix + "offlinepartitionscount",
                     "Partitions with a replica here and no leader", leaderless)
        yield _counter(prefix + "isrshrinks", "ISR shrinks this broker made as leader",
                       replicas.isr_shrinks)
        yield _counter(prefix + "isrexpands", "ISR expansions this broker made as leader",
                       replicas.isr_expands)
        yield _counter(prefix + "failedisrupdates", "ISR changes the controller refused",
                       replicas.failed_isr_updates)
        # Not Kafka MBeans: what this broker's AlterPartitionManager sent, answered by the
        # active controller wherever it runs (this node's own answers never cross the network,
        # so the controller's RequestMetrics miss them).
        alter = self.broker.alter_partitions
        yield _counter("kafka_server_alterpartitionmanager_requests",
                       "AlterPartition requests this broker sent as leader", alter.requests_sent)
        yield _counter("kafka_server_alterpartitionmanager_partitions",
                       "ISR proposals (partitions) in the AlterPartition requests this broker sent",
                       alter.partitions_sent)

    def _log_metrics(self) -> Iterator[Metric]:
        log_manager = self.broker.log_manager
        yield _gauge("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline",
                     len(log_manager.offline_dirs))
        status = GaugeMetricFamily("kafka_log_logmanager_logdirectoryoffline",
                                   "1 when the log dir is offline", labels=["logDirectory"])
        for log_dir in log_manager.log_dirs:
            status.add_metric([str(log_dir)], 1 if log_dir in log_manager.offline_dirs else 0)
        yield status
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log segments",
                                 labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "A partition's log start offset",
                                  labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "A partition's log end offset",
                                labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "A partition's segments",
                                     labels=["topic", "partition"])
        for plog in sorted(log_manager.all_logs(), key=lambda p: (p.topic, p.partition)):
            labels = [plog.topic, str(plog.partition)]
            size.add_metric(labels, plog.size_bytes)
            start.add_metric(labels, plog.log_start_offset)
            end.add_metric(labels, plog.log_end_offset)
            segments.add_metric(labels, len(plog.segments))
        yield from (size, start, end, segments)

    def _controller_metrics(self, controller: Any) -> Iterator[Metric]:
        """Kafka's KafkaController gauges: the active controller reports the cluster's, the
        other nodes 0, so a sum over the cluster is the cluster's value."""
        active = self.broker.config.is_controller and controller.raft.is_leader
        image = controller.image
        topics = partitions = offline = 0
        if active:
            for topic in image.topics_by_name.values():
                if topic.name == METADATA_TOPIC:
                    continue
                topics += 1
                for part in topic.partitions.values():
                    partitions += 1
                    if part.leader < 0 and not part.is_diskless:
                        offline += 1
        brokers = list(image.brokers.values()) if active else []
        prefix = "kafka_controller_kafkacontroller_"
        yield _gauge(prefix + "activecontrollercount", "1 on the active controller",
                     1 if active else 0)
        yield _gauge(prefix + "offlinepartitionscount", "Partitions without a leader",
                     offline)
        yield _gauge(prefix + "globaltopiccount", "Topics in the cluster", topics)
        yield _gauge(prefix + "globalpartitioncount", "Partitions in the cluster", partitions)
        yield _gauge(prefix + "activebrokercount", "Registered unfenced brokers",
                     sum(1 for b in brokers if not b.fenced))
        yield _gauge(prefix + "fencedbrokercount", "Registered fenced brokers",
                     sum(1 for b in brokers if b.fenced))
        raft = controller.raft
        yield _gauge(prefix + "lastappliedrecordoffset",
                     "Offset of the last __cluster_metadata record applied here",
                     raft.applied_offset - 1)
        yield _gauge(prefix + "lastcommittedrecordoffset",
                     "Offset of the last __cluster_metadata record the quorum committed",
                     raft.high_watermark - 1)

    def _raft_metrics(self, controller: Any) -> Iterator[Metric]:
        """Kafka's raft-metrics of the metadata quorum, and on its leader each replica's lag
        (the Lag column of kafka-metadata-quorum.sh describe --replication)."""
        raft = controller.raft
        log_end_offset = raft.log.log_end_offset
        prefix = "kafka_server_raftmetrics_"
        yield _gauge(prefix + "current_leader", "The quorum leader's id, -1 when unknown",
                     raft.leader_id)
        yield _gauge(prefix + "current_epoch", "The quorum epoch", raft.epoch)
        yield _gauge(prefix + "high_watermark", "The metadata log's high watermark",
                     raft.high_watermark)
        yield _gauge(prefix + "log_end_offset", "The metadata log's end offset here",
                     log_end_offset)
        lag = GaugeMetricFamily(prefix + "replica_lag",
                                "On the leader: records each replica is behind its log end",
                                labels=["replica_id", "role"])
        if raft.is_leader:
            status = controller.quorum.status(int(time.time() * 1000))
            for role, members in (("voter", status.voters), ("observer", status.observers)):
                for replica in members:
                    if replica.log_end_offset >= 0:
                        lag.add_metric([str(replica.replica_id), role],
                                       max(log_end_offset - replica.log_end_offset, 0))
        yield lag

    def _group_metrics(self) -> Iterator[Metric]:
        """GroupMetadataManager's group counts (classic groups by state, all groups in
        NumGroups), and each group's lag where this broker hosts the partition: its high
        watermark minus the committed offset (kafka_exporter's kafka_consumergroup_lag)."""
        replicas = self.broker.replica_manager
        states: dict[str, int] = dict.fromkeys(
            ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"), 0)
        consumer_states: dict[str, int] = {}
        groups = 0
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus the group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "The group's committed offset",
                                    labels=["consumergroup", "topic", "partition"])
        for _, shard in self.broker.group_coordinator.runtime.shards():
            for group in shard.groups.values():
                groups += 1
                states[group.state.value] = states.get(group.state.value, 0) + 1
            for consumer_group in shard.consumer_groups.values():
                groups += 1
                state = consumer_group.state.value
                consumer_states[state] = consumer_states.get(state, 0) + 1
            for group_id, committed in sorted(shard.offsets.items()):
                for (topic, partition), offset in sorted(committed.items()):
                    labels = [group_id, topic, str(partition)]
                    current.add_metric(labels, offset.value.offset)
                    hosted = replicas.partitions.get((topic, partition))
                    if hosted is not None:
                        lag.add_metric(labels, max(hosted.high_watermark - offset.value.offset,
                                                   0))
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(prefix + "numgroups", "Groups this broker coordinates", groups)
        for state, count in states.items():
            yield _gauge(prefix + "numgroups" + state.lower(),
                         f"Classic groups in state {state}", count)
        by_state = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_count",
            "KIP-848 consumer groups by state", labels=["state"])
        for state, count in sorted(consumer_states.items()):
            by_state.add_metric([state.lower()], count)
        yield by_state
        yield current
        yield lag

    def _share_group_metrics(self) -> Iterator[Metric]:
        """Kafka 4.2's ShareGroupMetrics (RecordAcknowledgementsPerSec by ackType,
        PartitionLoadTimeMs) and the group coordinator's share-group-count by state."""
        manager = self.broker.share_partitions
        acks = CounterMetricFamily("kafka_server_sharegroupmetrics_recordacknowledgements",
                                   "Records acknowledged, by acknowledgement type",
                                   labels=["ackType"])
        for kind, count in sorted(manager.record_acknowledgements.items()):
            acks.add_metric([kind], count)
        yield acks
        load = HistogramMetricFamily("kafka_server_sharegroupmetrics_partitionloadtimems",
                                     "Time to load a share-partition's state")
        load.add_metric([], manager.partition_load_time.buckets(),
                        manager.partition_load_time.sum_ms)
        yield load
        yield _gauge("kafka_server_sharegroupmetrics_sharesessions",
                     "Share sessions open on this broker", len(manager.sessions))
        by_state = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                     "Share groups by state", labels=["state"])
        states: dict[str, int] = {}
        for _, shard in self.broker.group_coordinator.runtime.shards():
            for group in shard.share_groups.values():
                states[group.state.value] = states.get(group.state.value, 0) + 1
        for state, count in sorted(states.items()):
            by_state.add_metric([state.lower()], count)
        yield by_state

    def _diskless_metrics(self) -> Iterator[Metric]:
        writer = self.broker.diskless.writer
        prefix = "kafka_server_diskless_wal_"
        yield _counter(prefix + "uploads", "WAL objects uploaded", writer.objects_uploaded)
        yield _counter(prefix + "upload_bytes", "Bytes of WAL objects uploaded",
                       writer.bytes_uploaded)
        yield _gauge(prefix + "pending_bytes", "Bytes buffered or uploading",
                     writer.pending_bytes)
        for histogram, name, doc in (
                (self.wal_upload_time, "upload_time_ms", "Time to upload a WAL object"),
                (self.wal_commit_time, "commit_time_ms",
                 "Time to commit an uploaded WAL object to its coordinators")):
            family = HistogramMetricFamily(prefix + name, doc)
            family.add_metric([], histogram.buckets(), histogram.sum_ms)
            yield family


# -- the endpoint ------------------------------------------------------------------------------

class MetricsServer:
    """`http://<prometheus.metrics.host>:<prometheus.metrics.port>/metrics` (port 0: none),
    served on the broker's event loop: a scrape costs the loop what building the answer costs
    (a few milliseconds for thousands of partitions), and reads the state it describes safely."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.bound_port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        values = self.broker.config.values
        port = int(str(values["prometheus.metrics.port"]))
        if port == 0:
            return
        host = str(values["prometheus.metrics.host"] or "") or None  # None: every interface
        try:
            self._server = await asyncio.start_server(self._serve, host, port,
                                                      limit=_REQUEST_HEAD_MAX_BYTES)
        except OSError as exc:  # stops start-up with the key to change, as a bad value does
            raise ConfigError(f"cannot serve Prometheus metrics on {host or '*'}:{port}: {exc}",
                              "prometheus.metrics.port", port) from exc
        self.bound_port = self._server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics at http://%s:%d/metrics", host or "0.0.0.0", self.bound_port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One HTTP/1.1 exchange, then close (Prometheus reconnects at each scrape anyway)."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_READ_TIMEOUT_S)
            status, content_type, body = self._answer(head.decode("latin-1"))
            method = head.split(b" ", 1)[0]
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError) as exc:
            log.debug("metrics request dropped: %r", exc)  # a scraper that went away
        finally:
            writer.close()

    def _answer(self, head: str) -> tuple[str, str, bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET /metrics\n"
        if target.split("?", 1)[0] not in ("/metrics", "/"):
            return "404 Not Found", "text/plain", b"see /metrics\n"
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        try:
            return "200 OK", content_type, encoder(self.registry)
        except Exception:  # a bug in a collector: the scrape fails visibly, the broker goes on
            log.exception("building the metrics answer failed")
            return "500 Internal Server Error", "text/plain", b"metrics failed, see the log\n"
