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


def test_produce_is_advertised_from_version_zero_but_decodes_from_three() -> None:
    (produce,) = advertised_ranges([ApiKey.PRODUCE])
    assert (produce.min_version, produce.max_version) == (0, 11)
    assert supported_versions(ApiKey.PRODUCE) == (3, 11)


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
