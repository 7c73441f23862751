"""The controller's side of dynamic broker configs: ConfigRecords on BROKER "<id>" or "" (the
cluster default) for the keys that change at run time, all or nothing, and unclean leader
election following the topic, then the controller's own, then the cluster default's setting."""

from __future__ import annotations

import pytest

from kafka_ext.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kafka_ext.controller.quorum_controller import ConfigChange, QuorumController, TopicCreation
from kafka_ext.protocol.errors import ErrorCode, KafkaError

SET, APPEND = 0, 2


async def test_controller_commits_log_defaults_and_refuses_fixed_keys(
        controller: QuorumController) -> None:
    await controller.alter_configs(BROKER_RESOURCE, "", [
        ConfigChange("log.segment.bytes", SET, "4096"),
        ConfigChange("log.cleanup.policy", APPEND, "compact")], validate_only=False)
    assert controller.image.configs[(BROKER_RESOURCE, "")] == {
        "log.segment.bytes": "4096", "log.cleanup.policy": "compact"}
    with pytest.raises(KafkaError) as caught:
        await controller.alter_configs(BROKER_RESOURCE, "1", [
            ConfigChange("log.retention.ms", SET, "1000"),
            ConfigChange("log.preallocate", SET, "true")], validate_only=False)
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert "Cannot update these configs dynamically: Set(log.preallocate)" in str(caught.value)
    assert (BROKER_RESOURCE, "1") not in controller.image.configs  # all or nothing


async def test_unclean_election_follows_topic_then_controller_then_cluster_default(
        controller: QuorumController) -> None:
    [created] = await controller.create_topics([TopicCreation("t", 1, 1, None, {})],
                                               validate_only=False)
    assert created.error == ErrorCode.NONE and not controller.unclean_allowed("t")
    await controller.alter_configs(BROKER_RESOURCE, "", [
        ConfigChange("unclean.leader.election.enable", SET, "true")], validate_only=False)
    assert controller.unclean_allowed("t")
    await controller.alter_configs(BROKER_RESOURCE, "1", [
        ConfigChange("unclean.leader.election.enable", SET, "false")], validate_only=False)
    assert not controller.unclean_allowed("t")
    await controller.alter_configs(TOPIC_RESOURCE, "t", [
        ConfigChange("unclean.leader.election.enable", SET, "true")], validate_only=False)
    assert controller.unclean_allowed("t")
