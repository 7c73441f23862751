"""The broker process: start-up, the request handlers it serves, background tasks, shutdown.

Mirrors Kafka's BrokerServer/ControllerServer pair for `process.roles=broker,controller`:
recover logs, replay `__cluster_metadata` into the image, bring hosted partitions in line with
it, then listen. SIGTERM closes listeners, flushes and checkpoints every log, and writes the
clean-shutdown marker, so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import resource
import shutil
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kafka_ext.controller.image import BROKER_RESOURCE, MetadataImage
from kafka_ext.controller.metadata_log import METADATA_TOPIC, METADATA_TOPIC_ID
from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.controller.quorum_status import ZERO_UUID, RaftQuorumStatus, VoterEndpoint
from kafka_ext.coordinator.diskless import DisklessCoordinator
from kafka_ext.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kafka_ext.coordinator.internal_topics import check_internal_topics
from kafka_ext.coordinator.share.coordinator import ShareCoordinator
from kafka_ext.coordinator.txn.coordinator import TransactionCoordinator
from kafka_ext.diskless.service import DisklessService
from kafka_ext.network.connection_quotas import ConnectionQuotas, parse_overrides
from kafka_ext.network.node_client import NodeChannels
from kafka_ext.network.server import SocketServer
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from kafka_ext.raft.core import RaftConfig
from kafka_ext.raft.kafka_metadata_log import KafkaMetadataLog
from kafka_ext.raft.messages import ReplicaKey
from kafka_ext.raft.raft_manager import RaftManager
from kafka_ext.replication.alter_partition_manager import AlterPartitionManager
from kafka_ext.replication.directory_assignments import DirectoryAssignments
from kafka_ext.replication.replica_fetcher import ReplicaFetcherManager
from kafka_ext.replication.replica_manager import ReplicaManager
from kafka_ext.security.acl import Authorizer
from kafka_ext.security.sasl import ScramCredential
from kafka_ext.security.session import (
    ListenerSecurity,
    NodeClientSecurity,
    SecurityConfigError,
    listener_security,
    node_client_security,
)
from kafka_ext.server import (
    admin,
    api_versions,
    authentication,
    chunks,
    delegation_tokens,
    diskless,
    features,
    forwarding,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    partition_count,
    produce,
    producers,
    quorum,
    quotas,
    reassignment,
    security_admin,
    share_fetch,
    share_groups,
    share_state,
    txn,
)
from kafka_ext.server.alter_partition import handle_alter_partition
from kafka_ext.server.auto_topic_creation import AutoTopicCreationManager
from kafka_ext.server.broker_lifecycle import (
    BrokerLifecycleManager,
    handle_broker_heartbeat,
    handle_broker_registration,
)
from kafka_ext.server.client_quota_manager import QuotaManagers
from kafka_ext.server.config import (
    BrokerConfig,
    ConfigError,
    DynamicBrokerConfig,
    format_config_value,
    validate_topic_config,
)
from kafka_ext.server.dispatcher import RequestDispatcher
from kafka_ext.server.fetch_session import FetchSessionCache
from kafka_ext.server.kraft import prepare_storage
from kafka_ext.server.log4j_controller import configure_logging, start_up_message
from kafka_ext.server.metrics import BrokerTopicStats, MetricsServer
from kafka_ext.share.persister_client import SharePersisterClient
from kafka_ext.share.share_partition_manager import SharePartitionManager
from kafka_ext.storage.checkpoints import fsync_dir
from kafka_ext.storage.formatter import read_bootstrap_records
from kafka_ext.storage.log import UnifiedLog
from kafka_ext.storage.log_cleaner import CleanerConfig, LogCleaner
from kafka_ext.storage.log_config import LogConfig
from kafka_ext.storage.log_dir_failure import LogDirFailureChannel
from kafka_ext.storage.log_manager import LogManager
from kafka_ext.storage.replica_mover import ReplicaMover

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None


class Broker:
    """One kafka-ext process; everything it owns runs on its event loop."""

    def __init__(self, config: BrokerConfig) -> None:
        self.listener_security = _listener_securities(config)
        # This node's side of its links: to brokers (replication, markers) and to controllers.
        self.inter_broker_security = _node_client_security(
            config, config.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol")
        self.controller_client_security = _node_client_security(
            config, next(iter(config.controller_listener_names), None),
            "sasl.mechanism.controller.protocol")
        # ACLs (docs/security.md): None when authorizer.class.name is empty.
        self.authorizer = (Authorizer(_super_users(config), bool(
            config.values["allow.everyone.if.no.acl.found"]))
            if config.values["authorizer.class.name"] else None)
        self.config = config
        self.node_id = config.node_id
        # KRaft start-up (server/kraft.py): formatted storage, a quorum this build serves.
        self.cluster_id, self.bootstrap_voters = prepare_storage(config)
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kafka-ext-io")
        self.log_manager = LogManager(config.log_dirs, node_id=config.node_id,
                                      cluster_id=self.cluster_id)
        self.replica_manager = ReplicaManager(config.node_id, self.log_manager, self.log_config_for,
                                              self._remove_dir_later)
        # JBOD (docs/jbod.md): dir failures (KIP-112) and moves between log dirs (KIP-113).
        self.log_manager.placement_policy = str(config.values["log.dir.placement.policy"])
        self.log_dir_failures = LogDirFailureChannel(self)
        self.replica_manager.on_storage_error = (
            lambda plog, exc: self.log_dir_failures.report(plog.dir.parent, exc))
        # Compaction of cleanup.policy=compact logs (storage/log_cleaner.py, docs/compaction.md).
        self.log_cleaner = LogCleaner(
            self.log_manager, CleanerConfig.from_values(config.values),
            run_blocking=self.run_blocking)
        # A move pauses the cleaning of its partition itself while it copies.
        self.replica_mover = ReplicaMover(
            self.log_manager, self.replica_manager, self.run_blocking, self._remove_dir_later,
            log_dirs.throttled_rate(self), config.num_replica_move_threads,
            self.log_dir_failures.report, log_cleaner=self.log_cleaner)
        # Partition replication (docs/replication.md): followers fetch from their leaders,
        # leaders propose ISR changes to the controller.
        self.replica_fetchers = ReplicaFetcherManager(self)
        self.alter_partitions = AlterPartitionManager(self)
        self.replica_manager.propose_isr = self.alter_partitions.submit
        self.replica_manager.on_followed = self.replica_fetchers.update
        self.replica_manager.chunk_filler.fetch = self.replica_fetchers.chunk_fetch
        self.replica_manager.flush_later = lambda plog: self.spawn(self._flush_sealed(plog))
        self.replica_manager.chunk_filler.report = lambda change: chunks.report_chunk_change(
            self, change)
        self.directory_assignments = DirectoryAssignments(self)
        self.replica_manager.assign_directory = self.directory_assignments.assign
        self.replica_manager.replica_lag_time_max_ms = config.replica_lag_time_max_ms
        self.replica_manager.static_leader_rate = int(str(
            config.values["leader.replication.throttled.rate"]))
        self.replica_manager.static_follower_rate = int(str(
            config.values["follower.replication.throttled.rate"]))
        self.fetch_sessions = FetchSessionCache()
        self.topic_stats = BrokerTopicStats()  # MessagesIn, BytesIn, BytesOut (metrics.py)
        # Client quotas (docs/quotas.md): kept in line with the metadata image.
        self.quotas = QuotaManagers(config.values)
        self.dispatcher = RequestDispatcher(self)
        self.forwarding = forwarding.ForwardingManager(self)
        self.lifecycle = BrokerLifecycleManager(self)
        self.socket_server = SocketServer(self.dispatcher.handle_frame,
                                          config.socket_request_max_bytes,
                                          config.connections_max_idle_ms,
                                          config.queued_max_request_bytes,
                                          _connection_quotas(config))
        self.controller: QuorumController = None  # type: ignore[assignment]  # set in start()
        self.node_channels = NodeChannels(lambda _: None, f"kafka-ext-node-{config.node_id}")
        self.heartbeat_channels = NodeChannels(lambda _: None,
                                               f"kafka-ext-heartbeat-{config.node_id}")
        # Broker to broker (transaction markers), at their inter-broker listener.
        self.broker_channels = NodeChannels(self.broker_endpoint,
                                            f"kafka-ext-broker-{config.node_id}",
                                            self.inter_broker_security)
        self.txn_coordinator = TransactionCoordinator(self)
        self.group_coordinator = GroupCoordinator(self, GroupConfig.from_broker_config(config))
        # Share groups (KIP-932): the share coordinator of __share_group_state, and this
        # broker's way to the coordinator of any share-partition's state.
        self.share_coordinator = ShareCoordinator(self)
        self.share_persister = SharePersisterClient(self)
        # ... and the share-partitions this broker leads, with their share sessions.
        self.share_partitions = SharePartitionManager(self)
        self.auto_topic_creation = AutoTopicCreationManager(self)
        # Diskless topics (docs/diskless.md): the coordinators of __diskless_metadata, and the
        # broker side (WAL writer, object cache, orphan scanner) that uses them.
        self.diskless_coordinator = DisklessCoordinator(self)
        self.diskless = DisklessService(self)
        self.metrics_server = MetricsServer(self)  # prometheus.metrics.port (metrics.py)
        self.bound_ports: list[int] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        # server.properties with the dynamic broker configs on top (dynamic_config), the topic
        # defaults it gives as text, and the one the hosted logs were last given.
        self._dynamic_config = self._applied_dynamic_config = DynamicBrokerConfig.of(config)
        self._dynamic_records: tuple[dict[str, str], dict[str, str]] = ({}, {})  # as read
        self._topic_default_texts = _texts(self._dynamic_config.topic_defaults())
        self._log_configs_image: MetadataImage | None = None
        self._log_configs: dict[str, LogConfig] = {}
        self._log_config_defaults = self._topic_default_texts  # those of _log_configs_image
        self._stopped = asyncio.Event()
        self._register_handlers()

    def _register_handlers(self) -> None:
        handlers = {
            ApiKey.API_VERSIONS: api_versions.handle_api_versions,
            ApiKey.METADATA: metadata.handle_metadata,
            ApiKey.PRODUCE: produce.handle_produce,
            ApiKey.LIST_OFFSETS: list_offsets.handle_list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: list_offsets.handle_offset_for_leader_epoch,
            ApiKey.CREATE_TOPICS: admin.handle_create_topics,
            ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
            ApiKey.DELETE_RECORDS: admin.handle_delete_records,
            ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: admin.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: admin.handle_describe_cluster,
            ApiKey.DESCRIBE_QUORUM: quorum.handle_describe_quorum,
            # KRaft (KIP-595): the metadata quorum's own requests, and replica fetches of
            # __cluster_metadata, go to this node's RaftManager.
            ApiKey.FETCH: quorum.handle_fetch,
            ApiKey.VOTE: quorum.handle_raft_request,
            ApiKey.BEGIN_QUORUM_EPOCH: quorum.handle_raft_request,
            ApiKey.END_QUORUM_EPOCH: quorum.handle_raft_request,
            ApiKey.FETCH_SNAPSHOT: quorum.handle_raft_request,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: quotas.handle_alter_client_quotas,
            ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.handle_alter_replica_log_dirs,
            ApiKey.DESCRIBE_PRODUCERS: producers.handle_describe_producers,
            ApiKey.INIT_PRODUCER_ID: txn.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: txn.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: txn.handle_add_offsets_to_txn,
            ApiKey.END_TXN: txn.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: txn.handle_write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: txn.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: txn.handle_list_transactions,
            ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
            ApiKey.JOIN_GROUP: groups.handle_join_group,
            ApiKey.SYNC_GROUP: groups.handle_sync_group,
            ApiKey.HEARTBEAT: groups.handle_heartbeat,
            ApiKey.LEAVE_GROUP: groups.handle_leave_group,
            ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
            ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
            ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
            ApiKey.LIST_GROUPS: groups.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
            ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
            ApiKey.TXN_OFFSET_COMMIT: groups.handle_txn_offset_commit,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: groups.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: groups.handle_consumer_group_describe,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: metadata.handle_describe_topic_partitions,
            ApiKey.UPDATE_FEATURES: features.handle_update_features,
            ApiKey.UNREGISTER_BROKER: admin.handle_unregister_broker,
            **diskless.HANDLERS,  # KIP-1164 coordinator APIs 93-98, 100
            **reassignment.HANDLERS,  # ElectLeaders, Alter/ListPartitionReassignments
            **partition_count.HANDLERS,  # KIP-253, partition reduction
            **chunks.HANDLERS,  # CreateChunks, AlterChunkAssignments (seed 000)
            **security_admin.HANDLERS,  # SCRAM credentials and ACLs
            **delegation_tokens.HANDLERS,  # KIP-48: Create/Renew/Expire/DescribeDelegationToken
            **share_groups.HANDLERS,  # Describe/Alter/DeleteShareGroupOffsets (KIP-932)
            **share_state.HANDLERS,  # the share coordinator's 83-87 (KIP-932)
            **share_fetch.HANDLERS,  # ShareFetch, ShareAcknowledge (KIP-932)
        }
        handlers[ApiKey.ENVELOPE] = forwarding.handle_envelope
        handlers[ApiKey.SASL_HANDSHAKE] = authentication.handle_sasl_handshake
        handlers[ApiKey.SASL_AUTHENTICATE] = authentication.handle_sasl_authenticate
        handlers[ApiKey.BROKER_REGISTRATION] = handle_broker_registration
        handlers[ApiKey.BROKER_HEARTBEAT] = handle_broker_heartbeat
        handlers[ApiKey.ALLOCATE_PRODUCER_IDS] = forwarding.handle_allocate_producer_ids
        handlers[ApiKey.ALTER_PARTITION] = handle_alter_partition
        handlers[ApiKey.ASSIGN_REPLICAS_TO_DIRS] = log_dirs.handle_assign_replicas_to_dirs
        for key, handler in handlers.items():
            if not self.config.is_broker and key not in _CONTROLLER_APIS:
                continue  # a controller-only node hosts no partitions and no coordinators
            if key in forwarding.FORWARDED_APIS:
                handler = forwarding.forwardable(handler)
            self.dispatcher.register(key, handler)
        if self.config.is_broker:  # ShareGroupHeartbeat/Describe on 76/77 for stock clients
            for key, handler in share_groups.SHADOWED_HANDLERS.items():
                self.dispatcher.register_shadowed(key, handler)

    # -- helpers for handlers ----------------------------------------------------------------

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's SCRAM credential for `mechanism`, as the metadata image holds it now."""
        return self.controller.image.scram_credentials.get(user, {}).get(mechanism)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run request work nobody awaits (acks=0 diskless appends); stop() waits for it."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """Run a blocking call (fsync, directory removal) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _remove_dir_later(self, path: Path) -> None:
        """Remove a deleted log's directory in the executor; the next start finishes a failure."""
        def remove() -> None:
            try:
                shutil.rmtree(path)
            except OSError as exc:
                log.warning("could not remove %s (retried at next start): %s", path, exc)
        self._executor.submit(remove)

    def live_nodes(self, listener_name: str | None = None) -> list[Node]:
        """The unfenced brokers, as clients reach them on `listener_name` (Kafka answers with
        the endpoints of the listener the request came in on); by default the first."""
        listeners = self.lifecycle.listeners()
        listener = next((lst for lst in listeners if lst.name == listener_name), listeners[0])
        image = self.controller.image if self.controller is not None else MetadataImage()
        nodes = []
        for registration in image.live_brokers():
            endpoint = registration.endpoint(listener.name)
            if endpoint is not None:
                nodes.append(Node(registration.broker_id, endpoint.host, endpoint.port,
                                  registration.rack))
        if not nodes:  # not registered yet: this node alone
            nodes = [Node(self.node_id, listener.host, listener.port, self.config.broker_rack)]
        return nodes

    def broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker takes inter-broker requests: its registered endpoint of our
        inter-broker listener name (else its first one)."""
        registration = self.controller.image.brokers.get(broker_id) if self.controller else None
        if registration is None or not registration.endpoints:
            return None
        endpoint = (registration.endpoint(self.config.inter_broker_listener_name or "")
                    or registration.endpoints[0])
        return endpoint.host, endpoint.port

    def dynamic_config(self, image: MetadataImage | None = None) -> DynamicBrokerConfig:
        """This broker's configs as they stand in `image` (the current one by default):
        server.properties under the dynamic broker configs, this node's over the cluster
        default's (Kafka's DynamicBrokerConfig); rebuilt only when either layer changes."""
        image = image or (self.controller.image if self.controller else MetadataImage())
        node = image.configs.get((BROKER_RESOURCE, str(self.node_id)), {})
        cluster = image.configs.get((BROKER_RESOURCE, ""), {})
        if (node, cluster) != self._dynamic_records:
            self._dynamic_records = (node, cluster)
            self._dynamic_config = DynamicBrokerConfig.of(self.config, node, cluster)
            self._topic_default_texts = _texts(self._dynamic_config.topic_defaults())
        return self._dynamic_config

    def log_config_for(self, topic: str, image: MetadataImage | None = None) -> LogConfig:
        """The effective LogConfig of a topic: its overrides over the broker's topic defaults
        (dynamic broker configs included: see dynamic_config).

        Cached per metadata image (configs, dynamic broker ones included, change only with
        the image): diskless produce and fetch ask for it on every request, and building one
        costs about 20 us.
        """
        image = image or (self.controller.image if self.controller else MetadataImage())
        if image is not self._log_configs_image:
            self._log_configs_image = image
            self._log_configs = {}
            self.dynamic_config(image)
            self._log_config_defaults = self._topic_default_texts
        cached = self._log_configs.get(topic)
        if cached is None:
            defaults = dict(self._log_config_defaults)
            defaults.update(image.topic_configs(topic))
            cached = self._log_configs[topic] = LogConfig.from_topic_configs(
                {k: v for k, v in defaults.items() if v is not None})
        return cached

    def _apply_dynamic_configs(self, old: MetadataImage | None, new: MetadataImage) -> None:
        """A dynamic broker config changed (a ConfigRecord on this broker or the cluster
        default): every hosted log takes its topic's new effective config, the cleaner its
        new settings, without a restart (Kafka's DynamicLogConfig.reconfigure)."""
        now = self.dynamic_config(new)
        if now is self._applied_dynamic_config:
            return
        before, self._applied_dynamic_config = self._applied_dynamic_config, now
        changed = sorted(name for name in {**before.node_overrides, **before.cluster_overrides,
                                           **now.node_overrides, **now.cluster_overrides}
                         if before.values[name] != now.values[name])
        log.info("dynamic broker configs now: this broker %s, cluster default %s (changed: %s)",
                 dict(now.node_overrides), dict(now.cluster_overrides), ", ".join(changed))
        for hosted in list(self.replica_manager.partitions.values()):
            hosted.log.update_config(self.log_config_for(hosted.topic, new))
        for (topic, _, _), chunk in self.log_manager.chunk_logs().items():
            chunk.update_config(self.log_config_for(topic, new))
        self.log_cleaner.config = CleanerConfig.from_values(now.values)

    @staticmethod
    def normalise_topic_config(name: str, value: str) -> str:
        return format_config_value(validate_topic_config(name, value)) or ""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        log.info("%s", start_up_message(self.config))
        await self.metrics_server.start()  # its collector copes with a broker still starting
        registry()  # compile every schema before the first request
        tune_garbage_collector()
        await self.run_blocking(self.log_manager.load)
        await self.run_blocking(self.replica_mover.recover)  # `.move` dirs left by a crash
        # The controller listeners open first: the quorum forms over them before this node
        # has caught up with it (Kafka's ControllerServer starts before its BrokerServer);
        # so do listeners on port 0, whose bound port the broker registers.
        bound: dict[str, int] = {}
        for listener in self.config.listeners:
            if listener.name in self.config.controller_listener_names or listener.port == 0:
                bound[listener.name] = await self.socket_server.listen(
                    listener.host, listener.port, self.listener_security[listener.name])
        self.bound_ports = [bound.get(listener.name, 0) for listener in self.config.listeners]
        await self._start_controller()
        if self.authorizer is not None:
            authorizer = self.authorizer
            authorizer.update(self.controller.image.acls)
            self.controller.listeners.append(lambda old, new: authorizer.update(new.acls))
        if not self.config.is_broker:
            await self._start_controller_only()
            return
        # Registered, then unfenced once caught up: only then does this broker lead anything.
        await self.lifecycle.start()
        self.log_dir_failures.mark_unlocatable_partitions(self.controller.image)
        self.replica_manager.apply_image(None, self.controller.image)
        self._delete_stray_logs()
        self.controller.listeners.append(self.replica_manager.apply_image)
        self._apply_dynamic_configs(None, self.controller.image)  # those kept in the metadata
        self.controller.listeners.append(self._apply_dynamic_configs)
        await check_internal_topics(self)  # before the coordinators place keys over them
        self.quotas.update(self.controller.image.client_quotas)
        self.controller.listeners.append(
            lambda old, new: self.quotas.update(new.client_quotas))
        await self.txn_coordinator.start()  # after the replica manager's listener: shards need logs
        await self.group_coordinator.start()
        await self.share_coordinator.start()
        await self.share_persister.start()
        await self.share_partitions.start()
        await self.diskless_coordinator.start()
        await self.diskless.start()
        await log_dirs.start_jbod(self)
        for listener in self.config.listeners:
            if listener.name not in bound:
                bound[listener.name] = await self.socket_server.listen(
                    listener.host, listener.port, self.listener_security[listener.name])
        self.bound_ports = [bound[listener.name] for listener in self.config.listeners]
        loop = asyncio.get_running_loop()
        config = self.config
        self._tasks += [
            loop.create_task(self._every(
                min(max(config.log_flush_scheduler_interval_ms, 10), 1000) / 1000,
                self._flush_due_logs)),
            loop.create_task(self._every(config.log_retention_check_interval_ms / 1000,
                                         self._apply_retention)),
            loop.create_task(self._every(config.log_flush_offset_checkpoint_interval_ms / 1000,
                                         self._write_checkpoints)),
            loop.create_task(self._every(
                int(str(config.values["producer.id.expiration.check.interval.ms"])) / 1000,
                self._expire_producer_ids)),
        ]
        self._start_controller_timers()
        self._tasks.append(loop.create_task(self._every(
            config.replica_lag_time_max_ms / 2000, self._shrink_isrs)))
        self._tasks.append(loop.create_task(self._every(
            int(str(config.values["replica.high.watermark.checkpoint.interval.ms"])) / 1000,
            self._checkpoint_high_watermarks)))
        if self.log_cleaner.config.enable:  # log.cleaner.backoff.ms may change at run time
            self._tasks.append(loop.create_task(self._every(
                lambda: max(self.log_cleaner.config.backoff_ms, 10) / 1000,
                self.log_cleaner.run_once)))
        log.info("kafka-ext broker %d started (cluster %s) on ports %s",
                 self.node_id, self.cluster_id, self.bound_ports)

    def _start_controller_timers(self) -> None:
        """What the active controller does on its own: fence brokers whose session expired,
        move partition deletions on (seed 002) and, with auto.leader.rebalance.enable, give
        leaderships back to preferred replicas."""
        loop = asyncio.get_running_loop()
        values = self.config.values
        self._tasks.append(loop.create_task(self._fence_expired_brokers_on_time()))
        self._tasks.append(loop.create_task(self._every(
            self.config.delete_topic_partition_interval_delay_ms / 1000,
            lambda: self.controller.advance_partition_deletions(int(time.time() * 1000)))))
        if values["auto.leader.rebalance.enable"]:
            self._tasks.append(loop.create_task(self._every(
                int(str(values["leader.imbalance.check.interval.seconds"])),
                self.controller.balance_leaders)))
        self._tasks.append(loop.create_task(self._every(  # KIP-48: expired delegation tokens
            int(str(values["delegation.token.expiry.check.interval.ms"])) / 1000,
            lambda: delegation_tokens.remove_expired_tokens(self.controller))))

    async def _start_controller_only(self) -> None:
        """`process.roles=controller`: a quorum voter and, when it leads, the active
        controller; it hosts no partitions and serves no clients (Kafka's ControllerServer)."""
        self._start_controller_timers()
        log.info("kafka-ext controller %d started (cluster %s) on ports %s",
                 self.node_id, self.cluster_id, [p for p in self.bound_ports if p])

    async def _start_controller(self) -> None:
        """Open `__cluster_metadata` in metadata.log.dir, load its snapshot, join the metadata
        quorum and catch up with it; on a fresh cluster the first active controller commits
        what `storage format` put in bootstrap.checkpoint. DescribeQuorum reads `quorum`."""
        metadata_dir = self.config.metadata_log_dir.resolve()
        metadata_log = self.log_manager.get_log(METADATA_TOPIC, 0)
        if metadata_log is None:
            self.log_manager.preferred_dirs[(METADATA_TOPIC, 0)] = metadata_dir
            metadata_log = self.log_manager.create_log(METADATA_TOPIC, 0, METADATA_TOPIC_ID,
                                                       LogConfig())
        directory_id = ZERO_UUID  # a static quorum's voters carry no directory id (KIP-853)
        if metadata_dir in self.log_manager.online_dirs():
            directory_id = self.log_manager.directory_id(metadata_dir)
        config = self.config
        self.controller = QuorumController(
            self.node_id, metadata_log, default_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            validate_topic_config=self.normalise_topic_config, run_blocking=self.run_blocking,
            diskless_coordinators=config.diskless_metadata_topic_num_partitions,
            raft=self._raft_manager(metadata_log, directory_id),
            snapshot_bytes=int(str(config.values[
                "metadata.log.max.record.bytes.between.snapshots"])),
            snapshot_interval_ms=int(str(config.values["metadata.log.max.snapshot.interval.ms"])),
            broker_session_timeout_ms=int(str(config.values["broker.session.timeout.ms"])),
            broker_connection_loss_timeout_ms=int(str(
                config.values["broker.heartbeat.connection.loss.timeout.ms"])),
            is_broker=config.is_broker,
            unclean_leader_election=config.unclean_leader_election_enable,
            min_insync_replicas=config.min_insync_replicas)
        if self.controller.raft.voters != [ReplicaKey(self.node_id)]:
            self.controller.forwarder = self.forwarding  # several nodes: changes may forward
        self.controller.quorum = RaftQuorumStatus(
            self.controller.raft, directory_id if self.bootstrap_voters is not None else ZERO_UUID,
            self._voter_endpoints)
        await self.run_blocking(self.controller.load)
        bootstrap = await self.run_blocking(lambda: read_bootstrap_records(metadata_dir))
        await self.controller.bootstrap(bootstrap)  # joins the quorum and catches up first

    def _raft_manager(self, metadata_log: UnifiedLog, directory_id: uuid.UUID) -> RaftManager:
        """This node's member of the metadata quorum: a voter when controller.quorum.voters
        (or the KIP-853 voters it was formatted with) name it, an observer otherwise."""
        config = self.config
        local = ReplicaKey(self.node_id, directory_id)
        if config.controller_quorum_voters:
            voters = [ReplicaKey(v.node_id) for v in config.controller_quorum_voters]
            endpoints = {v.node_id: (v.host, v.port) for v in config.controller_quorum_voters}
        elif self.bootstrap_voters is not None:
            voters = [ReplicaKey(v.node_id, v.directory_id) for v in self.bootstrap_voters]
            endpoints = {v.node_id: (v.host, v.port) for v in self.bootstrap_voters}
        else:  # the embedded default: a quorum of itself
            voters, endpoints = [ReplicaKey(self.node_id)], {}
        values = config.values
        raft_config = RaftConfig(
            election_timeout_ms=int(str(values["controller.quorum.election.timeout.ms"])),
            fetch_timeout_ms=int(str(values["controller.quorum.fetch.timeout.ms"])),
            election_backoff_max_ms=int(str(values["controller.quorum.election.backoff.max.ms"])),
            request_timeout_ms=int(str(values["controller.quorum.request.timeout.ms"])))
        # Raft traffic has connections of its own: a long-polling fetch must never wait
        # behind a forwarded request that waits for that very fetch (Kafka's RaftManager
        # has its own NetworkClient too).
        self.node_channels = NodeChannels(endpoints.get, f"kafka-ext-node-{self.node_id}",
                                          self.controller_client_security)
        raft_channels = NodeChannels(endpoints.get, f"kafka-ext-raft-{self.node_id}",
                                     self.controller_client_security)
        # Registration and heartbeats have a connection of their own, as Kafka's
        # BrokerLifecycleManager has a channel of its own: the active controller takes its
        # closing for this process's end (broker.heartbeat.connection.loss.timeout.ms).
        self.heartbeat_channels = NodeChannels(
            endpoints.get, f"kafka-ext-heartbeat-{self.node_id}",
            self.controller_client_security,
            on_connection_lost=self.lifecycle.controller_connection_lost)
        return RaftManager(local, voters, KafkaMetadataLog(metadata_log), metadata_log.dir,
                           self.cluster_id, raft_channels, self.run_blocking, raft_config)

    def _voter_endpoints(self) -> tuple[VoterEndpoint, ...]:
        """Where this voter is reached: its controller listeners, or (the embedded default,
        which has none) its broker listeners; a port 0 listener shows the port it bound."""
        bound = {lst.name: port for lst, port in zip(self.config.listeners, self.bound_ports,
                                                     strict=False)}
        chosen = self.config.controller_listeners or self.config.advertised_listeners
        return tuple(VoterEndpoint(self.node_id, lst.name, lst.host or "localhost",
                                   lst.port or bound.get(lst.name, 0)) for lst in chosen)

    def _delete_stray_logs(self) -> None:
        """Logs of topics the metadata no longer has (deleted while we were down), and of
        partitions now diskless (a classic topic of the same name was deleted meanwhile)."""
        image = self.controller.image
        for plog in list(self.log_manager.all_logs()):
            topic, partition = plog.topic, plog.partition
            if topic == METADATA_TOPIC:
                continue
            known = image.topics_by_name.get(topic)
            if (known is None or partition not in known.partitions
                    or known.partitions[partition].is_diskless):
                log.info("deleting stray log %s-%d", topic, partition)
                self._remove_dir_later(self.log_manager.detach_log(topic, partition))

    async def stop(self) -> None:
        await self.metrics_server.close()
        if not self.config.is_broker:
            await self._stop_controller_only()
            return
        if self.controller is not None:
            await self.lifecycle.controlled_shutdown()  # our leaderships move first
        for task in self._tasks:
            task.cancel()
        self.replica_manager.chunk_filler.cancel()
        await self.replica_fetchers.stop()
        await self.alter_partitions.stop()
        await self.directory_assignments.stop()
        await self.socket_server.close()
        await self.diskless.stop()  # flushes the WAL buffer: its producers get their answers
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.diskless_coordinator.stop()
        await self.txn_coordinator.stop()
        await self.group_coordinator.stop()
        await self.share_partitions.stop()
        await self.share_persister.stop()
        await self.share_coordinator.stop()
        await self.controller.stop()
        await self.node_channels.close()
        await self.heartbeat_channels.close()
        await self.broker_channels.close()
        await self.replica_mover.close()
        # The marker keeps the epoch: the next registration shows the shutdown was clean.
        epoch = self.lifecycle.broker_epoch
        await self.run_blocking(lambda: self.log_manager.close(epoch))
        self._executor.shutdown(wait=True)
        self._stopped.set()
        log.info("kafka-ext broker %d stopped", self.node_id)

    async def _stop_controller_only(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.socket_server.close()
        if self.controller is not None:
            await self.controller.stop()  # resigns if it leads: the others elect at once
        await self.node_channels.close()
        await self.run_blocking(self.log_manager.close)
        self._executor.shutdown(wait=True)
        self._stopped.set()
        log.info("kafka-ext controller %d stopped", self.node_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # -- background work ---------------------------------------------------------------------

    async def _every(self, interval_s: float | Callable[[], float],
                     job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` every interval (read again before each wait when a callable) until
        cancelled; a failure is logged and the next round runs anyway (a background task that
        dies quietly would stop flushing for good)."""
        while True:
            wait_s = interval_s() if callable(interval_s) else interval_s
            await asyncio.sleep(wait_s)
            try:
                await job()
            except Exception:
                log.exception("background job %s failed; retrying in %.1f s",
                              getattr(job, "__name__", job), wait_s)

    async def _flush_sealed(self, plog: UnifiedLog) -> None:
        """fsync a log sealed as a chunk (seed 000) and its dir's new entry, off the loop."""
        try:
            await self.run_blocking(plog.flush)
            await self.run_blocking(lambda: fsync_dir(plog.dir.parent))
        except OSError as exc:
            self._on_log_io_error(plog, exc, "flush")

    async def _fence_expired_brokers_on_time(self) -> None:
        """The active controller fences a broker as soon as its session runs out: a dead
        leader's partitions move within broker.session.timeout.ms, not up to half a session
        later, or within broker.heartbeat.connection.loss.timeout.ms of its heartbeat
        connection closing."""
        controller = self.controller
        while True:
            await controller.wait_for_a_session_deadline()
            try:
                await controller.fence_expired_brokers()
            except Exception:
                log.exception("fencing expired brokers failed; trying again in 1 s")
                await asyncio.sleep(1)

    async def _flush_due_logs(self) -> None:
        """fsync logs whose flush.messages / flush.ms policy asks for it, off the loop."""
        now_ms = int(time.time() * 1000)
        for hosted in list(self.replica_manager.partitions.values()):
            plog = hosted.log
            if not self._served(plog) or not plog.needs_flush(now_ms):
                continue  # its dir went offline (or it was deleted) during this round
            try:
                await self.run_blocking(plog.flush)
            except OSError as exc:
                self._on_log_io_error(plog, exc, "flush")

    async def _expire_producer_ids(self) -> None:
        """Forget idle producers' state after producer.id.expiration.ms (Kafka's periodic job)."""
        now_ms = int(time.time() * 1000)
        expiration_ms = int(str(self.dynamic_config().values["producer.id.expiration.ms"]))
        for hosted in list(self.replica_manager.partitions.values()):
            hosted.log.producer_state.remove_expired_producers(now_ms, expiration_ms)
        await self.diskless_coordinator.expire_producers(now_ms, expiration_ms)

    async def _apply_retention(self) -> None:
        now_ms = int(time.time() * 1000)
        for hosted in list(self.replica_manager.partitions.values()):
            if not self._served(hosted.log):
                continue  # its dir went offline during this round
            try:
                deleted = hosted.log.delete_retention_segments(now_ms)
            except OSError as exc:
                self._on_log_io_error(hosted.log, exc, "retention")
                continue
            if deleted:
                log.info("retention deleted %d segment(s) of %s-%d", deleted,
                         hosted.topic, hosted.partition)
        await self.remove_deleted_segment_files()
        expired = self.replica_manager.expired_chunks(now_ms)
        if expired:
            await chunks.remove_chunks(self, expired, "retention")

    async def remove_deleted_segment_files(self) -> None:
        """Unlink the files of segments that retention or DeleteRecords removed, off the loop."""
        pending = [(hosted.log, files) for hosted in list(self.replica_manager.partitions.values())
                   if (files := hosted.log.take_deleted_files())]
        if pending:
            failed = await self.run_blocking(functools.partial(_unlink_deleted_files, pending))
            for plog, exc in failed:
                self._on_log_io_error(plog, exc, "removing deleted segment files")

    def _served(self, plog: UnifiedLog) -> bool:
        return self.log_manager.get_log(plog.topic, plog.partition) is plog

    def _on_log_io_error(self, plog: UnifiedLog, exc: OSError, job: str) -> None:
        """KIP-112 for background jobs: an I/O error on a log still served takes its dir offline
        (LogManager.report_io_error holds the rule); on one deleted or moved away it is logged."""
        log_dir = self.log_manager.report_io_error(plog, exc)
        if log_dir is None:
            log.warning("%s of %s-%d failed after it was deleted or moved: %s", job, plog.topic,
                        plog.partition, exc)
        else:
            log.error("%s of %s-%d failed on %s: %s", job, plog.topic, plog.partition, log_dir,
                      exc)

    async def _shrink_isrs(self) -> None:
        self.replica_manager.shrink_isrs()

    async def _checkpoint_high_watermarks(self) -> None:
        await self.run_blocking(self.log_manager.checkpoint_high_watermarks)

    async def _write_checkpoints(self) -> None:
        await self.run_blocking(self.log_manager.checkpoint_recovery_points)
        await self.run_blocking(self.log_manager.checkpoint_log_start_offsets)


# What a controller-only node serves (Kafka's ControllerApis): the quorum, broker lifecycle,
# forwarded metadata changes and the admin reads tools send to --bootstrap-controller.
_CONTROLLER_APIS = frozenset({
    ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM, ApiKey.DESCRIBE_CLUSTER, ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT,
    ApiKey.ENVELOPE, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
    ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.DESCRIBE_CLIENT_QUOTAS,
    ApiKey.ALTER_PARTITION, ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.ASSIGN_REPLICAS_TO_DIRS,
    ApiKey.DELETE_PARTITIONS, ApiKey.CREATE_CHUNKS, ApiKey.ALTER_CHUNK_ASSIGNMENTS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_ACLS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_BROKER,
    ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN,
})


def _unlink_deleted_files(pending: list[tuple[UnifiedLog, list[Path]]]
                          ) -> list[tuple[UnifiedLog, OSError]]:
    """Unlink each log's deleted segment files (blocks); returns the first error of each log
    that had one, so a failed dir never stops the removal on the others."""
    failed: list[tuple[UnifiedLog, OSError]] = []
    for plog, files in pending:
        try:
            for path in files:
                path.unlink(missing_ok=True)
        except OSError as exc:
            failed.append((plog, exc))
    return failed


def _texts(values: dict[str, object]) -> dict[str, str | None]:
    return {name: format_config_value(value) for name, value in values.items()}


def _super_users(config: BrokerConfig) -> list[str]:
    """super.users: principals separated by ';' (User:admin;User:ops)."""
    return [p.strip() for p in str(config.values["super.users"] or "").split(";") if p.strip()]


def _node_client_security(config: BrokerConfig, listener_name: str | None,
                          mechanism_key: str) -> NodeClientSecurity:
    try:
        return node_client_security(config, listener_name, mechanism_key)
    except (SecurityConfigError, ValueError) as exc:
        raise ConfigError(str(exc), mechanism_key, None) from None


def _connection_quotas(config: BrokerConfig) -> ConnectionQuotas:
    """max.connections and max.connections.per.ip; the listeners of other nodes (inter-broker
    and controller) do not count against max.connections, as in Kafka."""
    inter_broker = (config.inter_broker_listener_name
                    or str(config.values["security.inter.broker.protocol"]))
    return ConnectionQuotas(
        int(str(config.values["max.connections"])),
        int(str(config.values["max.connections.per.ip"])),
        parse_overrides(str(config.values["max.connections.per.ip.overrides"] or "")),
        frozenset({inter_broker, *config.controller_listener_names}))


def _listener_securities(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    """Each listener's TLS and SASL settings; a ConfigError naming the key stops start-up."""
    try:
        return {listener.name: listener_security(config, listener.name)
                for listener in config.listeners}
    except (SecurityConfigError, ValueError) as exc:
        raise ConfigError(str(exc), "listeners", None) from None


def tune_garbage_collector() -> None:
    """Decoded requests are many small objects: collect young objects less often, and move
    everything built at start-up (schemas, generated code) out of the collector's sight."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


def _raise_open_file_limit() -> None:
    """Every segment holds a few descriptors (log, index maps): use all the OS allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT (the `kafka-ext server` command)."""
    configure_logging()  # Kafka's log4j layout; levels change at run time (BROKER_LOGGER)
    _raise_open_file_limit()
    try:
        import uvloop
        runner: Any = uvloop.run
    except ImportError:  # uvloop is a pinned dependency; plain asyncio still works
        runner = asyncio.run
    runner(_serve(config))


async def _serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    await broker.start()
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    log.info("shutting down")
    await broker.stop()
