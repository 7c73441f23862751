"""The API key table agrees with the schemas, and ApiVersions advertises what it should."""

from __future__ import annotations

import re

from kafka_ext.protocol.api_keys import ApiKey, advertised_ranges, supported_versions
from kafka_ext.protocol.messages import registry


def _constant_name(message_name: str) -> str:
    base = message_name.removesuffix("Request")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).upper()


def test_every_request_schema_has_an_api_key_constant_of_the_same_name() -> None:
    for key, mtype in registry().requests.items():
        assert ApiKey(key).name == _constant_name(mtype.name)


def test_every_request_has_a_response_with_the_same_versions() -> None:
    reg = registry()
    for key, request in reg.requests.items():
        response = reg.responses[key]
        assert response.versions == request.versions
        assert response.spec.flexible_versions == request.spec.flexible_versions


def test_produce_and_fetch_are_advertised_as_decoded_from_version_zero() -> None:
    """Message formats v0/v1 are served (issue 23): what ApiVersions lists is what decodes, and
    Produce v0-2 stay listed as Kafka 4.0 lists them (KAFKA-18659, old librdkafka needs them)."""
    produce, fetch = advertised_ranges([ApiKey.PRODUCE, ApiKey.FETCH])
    assert (produce.min_version, produce.max_version) == supported_versions(ApiKey.PRODUCE) == (0, 11)
    assert (fetch.min_version, fetch.max_version) == supported_versions(ApiKey.FETCH) == (0, 17)


def test_only_implemented_keys_are_advertised() -> None:
    ranges = advertised_ranges([ApiKey.API_VERSIONS, ApiKey.METADATA])
    assert [r.api_key for r in ranges] == [ApiKey.METADATA, ApiKey.API_VERSIONS]


def test_proposal_keys_follow_the_design() -> None:
    reg = registry()
    assert reg.requests[76].name == "CreateChunksRequest"
    assert reg.requests[77].name == "AlterChunkAssignmentsRequest"
    assert {reg.requests[k].name for k in (93, 94, 95, 96, 97, 98, 100)} == {
        "DisklessCreatePartitionsRequest", "DisklessDeleteTopicsRequest",
        "DisklessCommitFileRequest", "DisklessDeleteRecordsRequest",
        "DisklessListOffsetsRequest", "DisklessFindBatchesRequest",
        "DisklessDescribeFilesRequest"}
    assert reg.requests[1000].name == "DeletePartitionsRequest"
    assert reg.requests[1001].name == "LeaderEpochsForPartitionRequest"
