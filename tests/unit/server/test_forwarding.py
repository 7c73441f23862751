"""Forwarding's answers when no active controller can be had: every entry carries the error,
in a response that encodes at every version of its API."""

from __future__ import annotations

import pytest

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry
from kafka_ext.server.forwarding import FORWARDED_APIS, error_response

_reg = registry()


def _request(api_key: int) -> object:
    cls = _reg.requests[api_key].cls
    if api_key == ApiKey.CREATE_TOPICS:
        return cls(topics=[cls.CreatableTopic(name="a", num_partitions=1, replication_factor=1,
                                               assignments=[], configs=[])])
    if api_key == ApiKey.DELETE_TOPICS:
        return cls(topics=[cls.DeleteTopicState(name="a")], topic_names=["a"])
    if api_key == ApiKey.CREATE_PARTITIONS:
        return cls(topics=[cls.CreatePartitionsTopic(name="a", count=3, assignments=None)])
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return cls(resources=[cls.AlterConfigsResource(resource_type=2, resource_name="a",
                                                       configs=[])])
    if api_key in (ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        return cls(topics=[])
    if api_key == ApiKey.DELETE_PARTITIONS:
        return cls(topics=[cls.DeletePartitionsTopic(name="a", partitions=[2])])
    if api_key == ApiKey.ALTER_CHUNK_ASSIGNMENTS:
        return cls(chunks=[cls.AlterChunkAssignment(topic_name="a", partition_id=0,
                                                    start_offset=0, chunk_epoch=0,
                                                    broker_ids=[1])])
    if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
        return cls(topics=None)
    if api_key == ApiKey.ELECT_LEADERS:
        return cls(election_type=0, topic_partitions=[cls.TopicPartitions(topic="a",
                                                                          partitions=[0])])
    if api_key == ApiKey.CREATE_ACLS:
        return cls(creations=[cls.AclCreation(resource_type=2, resource_name="a",
                                              resource_pattern_type=3, principal="User:u",
                                              host="*", operation=3, permission_type=3)])
    if api_key == ApiKey.DELETE_ACLS:
        return cls(filters=[cls.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None,
                                                 pattern_type_filter=1, principal_filter=None,
                                                 host_filter=None, operation=1,
                                                 permission_type=1)])
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return cls(deletions=[cls.ScramCredentialDeletion(name="u", mechanism=1)],
                   upsertions=[])
    if api_key == ApiKey.UPDATE_FEATURES:
        return cls(feature_updates=[cls.FeatureUpdateKey(feature="share.version",
                                                         max_version_level=1)])
    if api_key == ApiKey.UNREGISTER_BROKER:
        return cls(broker_id=7)
    return cls(entries=[cls.EntryData(entity=[cls.EntityData(entity_type="user",
                                                             entity_name="u")], ops=[])])


@pytest.mark.parametrize("api_key", sorted(FORWARDED_APIS))
def test_every_entry_gets_the_error_and_every_version_encodes(api_key: int) -> None:
    response = error_response(api_key, _request(api_key),
                              KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no controller"))
    if api_key in (ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                   ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.UNREGISTER_BROKER,
                   ApiKey.DELETE_PARTITIONS):  # one top-level error code
        assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
    elif api_key == ApiKey.ELECT_LEADERS:  # both: v0 has no top-level code
        assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
        [[result]] = [t.partition_result for t in response.replica_election_results]
        assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
    else:
        entries = next(getattr(response, f) for f in ("topics", "responses", "results",
                                                      "entries", "filter_results")
                       if hasattr(response, f))
        assert [e.error_code for e in entries] == [ErrorCode.REQUEST_TIMED_OUT]
    mtype = _reg.responses[api_key]
    for version in range(mtype.versions.lowest, mtype.versions.highest + 1):
        mtype.encode_into(response, version, bytearray(), None)
