"""The coordinators' own topics, `__consumer_offsets`, `__transaction_state` and
`__share_group_state`: created only as their coordinator creates them, whoever asks first, and
checked when the broker starts.

FindCoordinator and a Metadata request naming either topic (Burrow, a librdkafka producer) both
create it from `CoordinatorRuntime.topic_creation()`: the coordinator's partition count
(`offsets.topic.num.partitions`, `transaction.state.log.num.partitions`,
`share.coordinator.state.topic.num.partitions`), replication factor and configs
(`cleanup.policy=compact`, ...; `__share_group_state` is `delete` with `retention.ms=-1`, its
coordinator prunes it), never a client's defaults. Brokers before this rule
auto-created them as ordinary topics (`num.partitions`, `cleanup.policy=delete`); the start-up
check finds such a topic, says so, and repairs what can be repaired without losing offsets.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka_ext.controller.image import TOPIC_RESOURCE
from kafka_ext.controller.quorum_controller import ConfigChange
from kafka_ext.coordinator.group.coordinator import GROUP_METADATA_TOPIC
from kafka_ext.coordinator.runtime import CoordinatorRuntime
from kafka_ext.coordinator.share.coordinator import SHARE_GROUP_STATE_TOPIC
from kafka_ext.coordinator.txn.coordinator import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

# The broker setting that sizes each topic when its coordinator creates it.
PARTITION_COUNT_CONFIGS = {GROUP_METADATA_TOPIC: "offsets.topic.num.partitions",
                           TRANSACTION_STATE_TOPIC: "transaction.state.log.num.partitions",
                           SHARE_GROUP_STATE_TOPIC: "share.coordinator.state.topic.num.partitions"}
# What each topic holds, for the messages below.
_CONTENTS = {GROUP_METADATA_TOPIC: "offsets", TRANSACTION_STATE_TOPIC: "transaction state",
             SHARE_GROUP_STATE_TOPIC: "share-group state"}


def coordinator_runtime(broker: Any, topic: str) -> CoordinatorRuntime[Any] | None:
    """The runtime that owns `topic` (and creates it), or None for any other topic."""
    if topic == GROUP_METADATA_TOPIC:
        return broker.group_coordinator.runtime
    if topic == TRANSACTION_STATE_TOPIC:
        txn = getattr(broker, "txn_coordinator", None)
        return None if txn is None else txn.runtime
    if topic == SHARE_GROUP_STATE_TOPIC:
        share = getattr(broker, "share_coordinator", None)
        return None if share is None else share.runtime
    return None


async def check_internal_topics(broker: Any) -> None:
    """Before the coordinators load: make each existing topic usable by its coordinator.

    A partition count other than the setting's is kept and the coordinator places its keys over
    the topic's partitions (Kafka's coordinators read the count from the metadata at start),
    so offsets already written stay where their groups look for them; a warning names the
    setting to change. A topic that is not compacted was created as an ordinary topic: its
    records would be deleted by retention, losing committed offsets or transaction state.
    That is logged as an error and the coordinator's configs are set on the topic (an
    operator would have to do exactly this, and could not while the broker refused to start).
    """
    image = broker.controller.image
    for name, setting in PARTITION_COUNT_CONFIGS.items():
        runtime = coordinator_runtime(broker, name)
        topic = image.topics_by_name.get(name)
        if runtime is None or topic is None:
            continue
        count = len(topic.partitions)
        if count != runtime.num_partitions:
            log.warning(
                "%s has %d partition(s) but %s=%d (the setting applies when the topic is "
                "created): using the topic's %d partition(s), so existing groups and "
                "transactions keep their partition. Fix: set %s=%d to match the topic.",
                name, count, setting, runtime.num_partitions, count, setting, count)
            runtime.num_partitions = count
        if _retained_as_needed(broker, runtime, name):
            continue
        overrides = image.topic_configs(name)
        log.error(
            "%s was created as an ordinary topic (cleanup.policy=%s): retention would delete "
            "committed %s. A client's Metadata request auto-created it before the coordinator "
            "did (kafka-ext before internal topics were created only by their coordinator). "
            "Setting the coordinator's configs on it now: %s. Nothing else to do.",
            name, overrides.get("cleanup.policy", ",".join(broker.config.log_cleanup_policy)),
            _CONTENTS[name],
            ", ".join(f"{k}={v}" for k, v in sorted(runtime.topic_configs.items())))
        changes = [ConfigChange(key, 0, value) for key, value in runtime.topic_configs.items()
                   if key in _RETENTION_KEYS or key not in overrides]
        await broker.controller.alter_configs(TOPIC_RESOURCE, name, changes, validate_only=False)


# The configs that decide whether a coordinator's records outlive retention.
_RETENTION_KEYS = frozenset({"cleanup.policy", "retention.ms", "retention.bytes"})


def _retained_as_needed(broker: Any, runtime: CoordinatorRuntime[Any], name: str) -> bool:
    """Compacted, as its coordinator needs; `__share_group_state` instead must never be
    compacted or expire (its coordinator prunes it: coordinator/share/shard.py)."""
    config = broker.log_config_for(name)
    if "compact" in runtime.topic_configs.get("cleanup.policy", ""):
        return bool(config.compacts)
    return not config.compacts and config.retention_ms < 0 and config.retention_bytes < 0
