"""The table of API keys: Kafka's standard keys, the proposals' keys, and what we advertise.

Version ranges come from the compiled schemas (`protocol_schemas/`); the broker advertises an
API in ApiVersions only once a handler serves it. Key clashes and floors: docs/protocol.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from kafka_ext.protocol.messages import registry


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    # The proposals' keys (DESIGN.md §4). 76/77 clash with Kafka 4.x's share-group APIs.
    CREATE_CHUNKS = 76
    ALTER_CHUNK_ASSIGNMENTS = 77
    DISKLESS_CREATE_PARTITIONS = 93
    DISKLESS_DELETE_TOPICS = 94
    DISKLESS_COMMIT_FILE = 95
    DISKLESS_DELETE_RECORDS = 96
    DISKLESS_LIST_OFFSETS = 97
    DISKLESS_FIND_BATCHES = 98
    DISKLESS_DESCRIBE_FILES = 100
    DELETE_PARTITIONS = 1000
    LEADER_EPOCHS_FOR_PARTITION = 1001


# Kafka 4.0 removed Produce v0-2 but still lists them in ApiVersions, because librdkafka
# before 2.10 turns off compressed produce when Produce v0 is missing (KAFKA-18659).
# The versions are rejected with UNSUPPORTED_VERSION when actually sent.
_ADVERTISED_MIN_VERSION = {ApiKey.PRODUCE: 0}

# Versions our schemas decode but whose behaviour we do not implement, so never advertised:
# EndTxn v5 is KIP-890 transaction version 2 (an epoch bump per transaction), which clients use
# only once `transaction.version` is finalised, and we do not finalise it.
_ADVERTISED_MAX_VERSION = {ApiKey.END_TXN: 4}


@dataclass(slots=True, frozen=True)
class ApiVersionRange:
    api_key: int
    min_version: int
    max_version: int


def supported_versions(api_key: int) -> tuple[int, int] | None:
    """The (lowest, highest) request version we can decode, or None for an unknown key."""
    mtype = registry().requests.get(api_key)
    if mtype is None or mtype.versions.highest is None:
        return None
    return mtype.versions.lowest, mtype.versions.highest


def advertised_ranges(implemented: Iterable[int]) -> list[ApiVersionRange]:
    """The ApiVersions answer for the APIs a broker has handlers for, by key."""
    ranges = []
    for key in sorted(implemented):
        versions = supported_versions(key)
        if versions is None:
            continue
        low = _ADVERTISED_MIN_VERSION.get(key, versions[0])  # type: ignore[call-overload]
        high = min(versions[1], _ADVERTISED_MAX_VERSION.get(key, versions[1]))  # type: ignore[call-overload]
        ranges.append(ApiVersionRange(key, low, high))
    return ranges
