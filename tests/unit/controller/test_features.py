"""UpdateFeatures' rules on the real QuorumController (controller/features.py): all or
nothing, the supported ranges, downgrades only when asked, metadata.version never down, and a
level that needs another's."""

from __future__ import annotations

import pytest

from kafka_ext.controller.features import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
)
from kafka_ext.controller.image import ELR_VERSION_FEATURE
from kafka_ext.controller.quorum_controller import METADATA_VERSION_FEATURE, QuorumController
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.storage.formatter import METADATA_VERSIONS


async def _refused(controller: QuorumController, *updates: FeatureUpdate) -> str:
    before = dict(controller.image.features)
    with pytest.raises(KafkaError) as refused:
        await controller.update_features(list(updates), validate_only=False)
    assert refused.value.code == ErrorCode.INVALID_UPDATE_VERSION
    assert controller.image.features == before  # nothing of the request applied
    return refused.value.message or ""


async def test_levels_change_together_or_not_at_all(controller: QuorumController) -> None:
    message = await _refused(controller, FeatureUpdate("group.version", 1),
                             FeatureUpdate("share.version", 2))
    assert message == ("Invalid update version 2 for feature share.version. Local controller 1 "
                       "only supports versions 0-1")
    await controller.update_features([FeatureUpdate("group.version", 1),
                                      FeatureUpdate("share.version", 1)], validate_only=False)
    assert controller.image.features["group.version"] == 1
    await controller.update_features([FeatureUpdate("share.version", 0, SAFE_DOWNGRADE)],
                                     validate_only=True)
    assert controller.image.features["share.version"] == 1  # validate only


async def test_downgrades_only_when_asked_and_metadata_version_never(
        controller: QuorumController) -> None:
    await controller.update_features([FeatureUpdate("group.version", 1)], validate_only=False)
    assert "without setting the upgrade type" in await _refused(
        controller, FeatureUpdate("group.version", 0, UPGRADE))
    assert "Can't downgrade to a newer version." in await _refused(
        controller, FeatureUpdate("share.version", 1, SAFE_DOWNGRADE))
    level = controller.image.features[METADATA_VERSION_FEATURE]
    assert "might delete metadata information" in await _refused(
        controller, FeatureUpdate(METADATA_VERSION_FEATURE, level - 1, SAFE_DOWNGRADE))
    assert "Unsafe metadata downgrade is not supported" in await _refused(
        controller, FeatureUpdate(METADATA_VERSION_FEATURE, level - 1, UNSAFE_DOWNGRADE))
    assert "cannot be less than 0" in await _refused(controller, FeatureUpdate("group.version",
                                                                               -1))


async def test_eligible_leader_replicas_need_metadata_version_4_0_iv1(
        controller: QuorumController) -> None:
    assert controller.image.features[METADATA_VERSION_FEATURE] >= METADATA_VERSIONS["4.0-IV1"]
    # Asked together with a metadata.version too old for it: refused (and the downgrade too).
    message = await _refused(controller, FeatureUpdate(ELR_VERSION_FEATURE, 1),
                             FeatureUpdate(METADATA_VERSION_FEATURE, METADATA_VERSIONS["3.9-IV0"],
                                           SAFE_DOWNGRADE))
    assert "requires metadata.version level 23" in message
    await controller.update_features([FeatureUpdate(ELR_VERSION_FEATURE, 1)],
                                     validate_only=False)
    assert controller.image.elr_enabled
