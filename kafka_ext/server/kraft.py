"""How a node starts in KRaft mode: its storage layout, the formatted-storage gate, and the
quorum shapes this build can serve (Kafka's KafkaRaftServer.initializeLogDirs).

A node that is its own quorum (`BrokerConfig.is_self_quorum`: the embedded default, or a
combined node whose controller.quorum.voters names only itself) formats its metadata log dir on
first start. Every other node must have been formatted with `kafka-ext storage format`. A
static quorum (controller.quorum.voters) of any size is served, and a KIP-853 quorum of one
node (--standalone); a dynamic quorum of several controllers is refused until voter changes
(AddVoter/RemoveVoter) are served.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.server.config import BrokerConfig, ConfigError
from kafka_ext.storage.checkpoints import CorruptCheckpointError, MetaProperties
from kafka_ext.storage.formatter import (
    DynamicVoter,
    FormatRequest,
    LogDirIdentityError,
    StorageLayout,
    existing_cluster_id,
    format_storage,
    formatted_cluster_id,
    read_bootstrap_voters,
)

DYNAMIC_QUORUM_REFUSAL = ("a dynamic quorum of several controllers (KIP-853 "
                          "controller.quorum.bootstrap.servers) is not served yet")


def storage_layout(config: BrokerConfig) -> StorageLayout:
    """The dirs `storage format` writes and start-up checks, from a node's configuration."""
    return StorageLayout(tuple(config.log_dirs), config.metadata_log_dir, config.node_id,
                         config.is_controller)


def prepare_storage(config: BrokerConfig) -> tuple[str, list[DynamicVoter] | None]:
    """(cluster id, KIP-853 voters or None) of a node about to start; blocks on disk.

    Raises LogDirIdentityError naming the dir and the fix when the node is not formatted (or
    was formatted for another cluster), ConfigError when its quorum cannot be served yet.
    """
    if config.metadata_log_dir not in config.log_dirs:
        raise ConfigError(
            f"metadata.log.dir {config.metadata_log_dir} must be one of log.dirs: kafka-ext keeps "
            "the metadata log beside the partitions (docs/cluster.md)", "metadata.log.dir",
            str(config.metadata_log_dir))
    layout = storage_layout(config)
    if config.is_self_quorum:
        cluster_id = config.cluster_id
        if config.cluster_id_generated:
            cluster_id = existing_cluster_id(layout) or cluster_id
        _format_metadata_dir_if_new(layout, cluster_id)
        return cluster_id, None
    cluster_id = formatted_cluster_id(layout, None)
    if not config.cluster_id_generated and config.cluster_id != cluster_id:
        raise LogDirIdentityError(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"log dir {config.metadata_log_dir} belongs to cluster {cluster_id!r}, but cluster.id "
            f"is {config.cluster_id!r}; refusing to start")
    try:
        voters = read_bootstrap_voters(config.metadata_log_dir)
    except CorruptCheckpointError as exc:
        raise LogDirIdentityError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
    check_servable_quorum(config, voters)
    return cluster_id, voters


def check_servable_quorum(config: BrokerConfig, voters: Sequence[DynamicVoter] | None) -> None:
    """Refuse, clearly, a quorum this build cannot form: a static quorum
    (controller.quorum.voters) of any size is served, and a KIP-853 quorum of this node alone
    (formatted --standalone); a dynamic quorum of several nodes needs AddVoter/RemoveVoter."""
    if config.is_self_quorum or config.controller_quorum_voters:
        return
    if (config.is_broker and config.is_controller and voters is not None
            and [v.node_id for v in voters] == [config.node_id]):
        return  # formatted --standalone: a KIP-853 quorum of this node alone
    roles = ",".join(config.process_roles)
    quorum = (",".join(f"{v.node_id}@{v.host}:{v.port}" for v in voters or ())
              or ",".join(f"{h}:{p}" for h, p in config.controller_quorum_bootstrap_servers))
    raise ConfigError(
        f"{DYNAMIC_QUORUM_REFUSAL}: node {config.node_id} with process.roles={roles} and quorum "
        f"{quorum}; list the controllers in controller.quorum.voters (id@host:port,...) instead",
        "controller.quorum.bootstrap.servers", quorum)


def _format_metadata_dir_if_new(layout: StorageLayout, cluster_id: str) -> None:
    """The embedded default formats itself: the metadata log dir gets meta.properties and
    bootstrap.checkpoint as `storage format` would write them; other empty dirs get their
    meta.properties from the LogManager. An unreadable dir is left to the LogManager (KIP-112)."""
    meta_dir = layout.metadata_log_dir
    try:
        meta_dir.mkdir(parents=True, exist_ok=True)
        if MetaProperties.read(meta_dir) is not None:
            return
    except (OSError, CorruptCheckpointError):
        return
    format_storage(StorageLayout((meta_dir,), meta_dir, layout.node_id, layout.is_controller),
                   FormatRequest(cluster_id))
