"""Feature levels (KIP-584): the ones this release honours, and how UpdateFeatures changes the
finalized ones (Kafka's FeatureControlManager), as FeatureLevelRecords in the metadata log.

Every node of a kafka-ext cluster runs one release, so the levels a node supports are every
node's: Kafka checks each broker's registered ranges because its brokers may be of several
releases during a rolling upgrade. A finalized level of 0 turns a feature off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka_ext.controller.image import ELR_VERSION_FEATURE, MetadataImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.storage.formatter import (
    KRAFT_VERSION_FEATURE,
    METADATA_VERSION_FEATURE,
    METADATA_VERSIONS,
    SHARE_VERSION_FEATURE,
)

GROUP_VERSION_FEATURE = "group.version"

# The features whose levels this release honours, with the levels it supports. Not
# transaction.version: its level 2 is KIP-890's protocol, which is not served.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (min(METADATA_VERSIONS.values()), max(METADATA_VERSIONS.values())),
    KRAFT_VERSION_FEATURE: (0, 0),
    GROUP_VERSION_FEATURE: (0, 1),
    SHARE_VERSION_FEATURE: (0, 1),
    ELR_VERSION_FEATURE: (0, 1),
}

# A feature level that needs another's (Kafka's Features.validateVersion): ELR came with
# metadata.version 4.0-IV1.
DEPENDENCIES: dict[tuple[str, int], tuple[str, int]] = {
    (ELR_VERSION_FEATURE, 1): (METADATA_VERSION_FEATURE, METADATA_VERSIONS["4.0-IV1"]),
}

# UpdateFeatures' UpgradeType (v1+); v0's AllowDowngrade maps to SAFE_DOWNGRADE.
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: int = UPGRADE


def finalized_level(image: MetadataImage, name: str) -> int:
    return int(image.features.get(name, 0))


def feature_records(image: MetadataImage, node_id: int,
                    updates: list[FeatureUpdate]) -> list[Any]:
    """The FeatureLevelRecords of an UpdateFeatures: all of them, or KafkaError
    INVALID_UPDATE_VERSION with Kafka's message for the first update refused."""
    proposed = {**image.features, **{u.name: u.level for u in updates}}
    record = registry()["FeatureLevelRecord"].cls
    records = []
    for update in updates:
        _check(image, node_id, update, proposed)
        records.append(record(name=update.name, feature_level=update.level))
    return records


def _check(image: MetadataImage, node_id: int, update: FeatureUpdate,
           proposed: dict[str, int]) -> None:
    name, level = update.name, update.level
    if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        _refuse(name, level, "The controller does not support the given upgrade type.")
    if level < 0:
        _refuse(name, level, "A feature version cannot be less than 0.")
    low, high = SUPPORTED_FEATURES.get(name, (0, 0))
    if not low <= level <= high:
        _refuse(name, level, f"Local controller {node_id} " + (
            "does not support this feature." if high == 0 else
            f"only supports versions {low}-{high}"))
    current = finalized_level(image, name)
    if level < current and update.upgrade_type == UPGRADE:
        _refuse(name, level, "Can't downgrade the version of this feature without setting the "
                             "upgrade type to either safe or unsafe downgrade.")
    if level > current and update.upgrade_type != UPGRADE:
        _refuse(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION_FEATURE and level < current:
        # Every metadata.version here changed the records it writes: a downgrade would lose
        # what the newer records say, and Kafka cannot do unsafe ones yet either.
        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. "
                         + ("Unsafe metadata downgrade is not supported in this version."
                            if update.upgrade_type == UNSAFE_DOWNGRADE else
                            "Refusing to perform the requested downgrade because it might "
                            "delete metadata information."))
    needed = DEPENDENCIES.get((name, level))
    if needed is not None and proposed.get(needed[0], 0) < needed[1]:
        _refuse(name, level, f"{name} level {level} requires {needed[0]} level {needed[1]} or "
                             f"higher, not {proposed.get(needed[0], 0)}.")
    for (dependent, dependent_level), (base, base_level) in DEPENDENCIES.items():
        if (base == name and level < base_level
                and proposed.get(dependent, 0) >= dependent_level):
            _refuse(name, level, f"{dependent} level {proposed[dependent]} requires {name} "
                                 f"level {base_level} or higher.")


def _refuse(name: str, level: int, reason: str) -> None:
    raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION,
                     f"Invalid update version {level} for feature {name}. {reason}")
