"""The table of API keys: Kafka's standard keys, the proposals' keys, and what we advertise.

Version ranges come from the compiled schemas (`protocol_schemas/`); the broker advertises an
API in ApiVersions only once a handler serves it, and only to the peers of its audience (a
stock client never sees a key it may not know). Key clashes and floors: docs/protocol.md.
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
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
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
    ASSIGN_REPLICAS_TO_DIRS = 73
    DESCRIBE_TOPIC_PARTITIONS = 75
    # The proposals' keys (DESIGN.md §4). 76/77 clash with Kafka 4.x's share-group APIs
    # (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE below): decided by the connection's audience.
    CREATE_CHUNKS = 76
    ALTER_CHUNK_ASSIGNMENTS = 77
    # Share groups (KIP-932)
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    DISKLESS_CREATE_PARTITIONS = 93
    DISKLESS_DELETE_TOPICS = 94
    DISKLESS_COMMIT_FILE = 95
    DISKLESS_DELETE_RECORDS = 96
    DISKLESS_LIST_OFFSETS = 97
    DISKLESS_FIND_BATCHES = 98
    DISKLESS_DESCRIBE_FILES = 100
    DELETE_PARTITIONS = 1000
    LEADER_EPOCHS_FOR_PARTITION = 1001


# Kafka's names for 76/77, which stock clients (Audience.CLIENT) mean by these keys.
SHARE_GROUP_HEARTBEAT = ApiKey.CREATE_CHUNKS
SHARE_GROUP_DESCRIBE = ApiKey.ALTER_CHUNK_ASSIGNMENTS


class Audience(IntEnum):
    """Who an API is advertised to and served for; a peer of audience A sees every API <= A.

    A connection's audience comes from its ApiVersions v3+ `ClientSoftwareName` (KIP-511):
    CLIENT for every stock client, EXTENSION for our own client and tools, NODE for the other
    nodes of the cluster.
    """

    CLIENT = 0     # Kafka's client-facing APIs: Kafka's broker listener advertises them
    EXTENSION = 1  # the proposals' APIs that our client and tools call
    NODE = 2       # node-to-node only: Kafka's controller/inter-broker keys, the diskless coordinator


# The ClientSoftwareName our client and tools send in ApiVersions v3+, and the one a node sends
# to another node; any other name (or none, before v3) is a stock client.
CLIENT_SOFTWARE_NAME = "kafka-ext-client"
NODE_SOFTWARE_NAME = "kafka-ext-node"

# Keys not shown to stock clients. Kafka's inter-node keys are the ones of our table whose
# Kafka definition lists no "broker" listener (Kafka 3.9 and 4.x agree); every key not named
# here is client-facing.
_AUDIENCE: dict[int, Audience] = {
    ApiKey.VOTE: Audience.NODE,
    ApiKey.BEGIN_QUORUM_EPOCH: Audience.NODE,
    ApiKey.END_QUORUM_EPOCH: Audience.NODE,
    ApiKey.ALTER_PARTITION: Audience.NODE,
    ApiKey.FETCH_SNAPSHOT: Audience.NODE,
    ApiKey.ENVELOPE: Audience.NODE,
    ApiKey.BROKER_REGISTRATION: Audience.NODE,
    ApiKey.BROKER_HEARTBEAT: Audience.NODE,
    ApiKey.ALLOCATE_PRODUCER_IDS: Audience.NODE,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: Audience.NODE,
    ApiKey.CREATE_CHUNKS: Audience.EXTENSION,
    ApiKey.ALTER_CHUNK_ASSIGNMENTS: Audience.EXTENSION,
    ApiKey.DISKLESS_CREATE_PARTITIONS: Audience.NODE,
    ApiKey.DISKLESS_DELETE_TOPICS: Audience.NODE,
    ApiKey.DISKLESS_COMMIT_FILE: Audience.NODE,
    ApiKey.DISKLESS_DELETE_RECORDS: Audience.NODE,
    ApiKey.DISKLESS_LIST_OFFSETS: Audience.NODE,
    ApiKey.DISKLESS_FIND_BATCHES: Audience.NODE,
    ApiKey.DISKLESS_DESCRIBE_FILES: Audience.NODE,
    ApiKey.DELETE_PARTITIONS: Audience.EXTENSION,
    ApiKey.LEADER_EPOCHS_FOR_PARTITION: Audience.EXTENSION,
}


def audience(api_key: int) -> Audience:
    """The audience of an API: who it is advertised to and served for."""
    return _AUDIENCE.get(api_key, Audience.CLIENT)


def peer_audience(client_software_name: str | None) -> Audience:
    """The audience of a peer from the ClientSoftwareName of its ApiVersions v3+ request."""
    if client_software_name == CLIENT_SOFTWARE_NAME:
        return Audience.EXTENSION
    if client_software_name == NODE_SOFTWARE_NAME:
        return Audience.NODE
    return Audience.CLIENT


# Versions our schemas decode but whose behaviour we do not implement, so never advertised:
# EndTxn v5 is KIP-890 transaction version 2 (an epoch bump per transaction), which clients use
# only once `transaction.version` is finalised, and we do not finalise it.
_ADVERTISED_MAX_VERSION = {ApiKey.END_TXN: 4}


@dataclass(slots=True, frozen=True)
class ApiVersionRange:
    api_key: int
    min_version: int
    max_version: int


def supported_versions(api_key: int, shadowed: bool = False) -> tuple[int, int] | None:
    """The (lowest, highest) request version we can decode, or None for an unknown key;
    `shadowed`: of Kafka's API on a key that means one of ours to our own peers (76/77)."""
    reg = registry()
    mtype = (reg.shadowed_requests if shadowed else reg.requests).get(api_key)
    if mtype is None or mtype.versions.highest is None:
        return None
    return mtype.versions.lowest, mtype.versions.highest


def advertised_ranges(implemented: Iterable[int], peer: Audience = Audience.CLIENT,
                      shadowed_implemented: Iterable[int] = ()) -> list[ApiVersionRange]:
    """The ApiVersions answer to a peer of audience `peer` for the APIs a broker has handlers
    for, by key: `shadowed_implemented` are the keys whose Kafka meaning it serves to the peers
    below the key's audience (stock clients' share-group APIs on 76/77)."""
    shadowed = set(shadowed_implemented)
    ranges = []
    for key in sorted(set(implemented) | shadowed):
        if audience(key) <= peer:
            versions = supported_versions(key) if key in implemented else None
        else:
            versions = supported_versions(key, shadowed=True) if key in shadowed else None
        if versions is None:
            continue
        high = min(versions[1], _ADVERTISED_MAX_VERSION.get(key, versions[1]))  # type: ignore[call-overload]
        ranges.append(ApiVersionRange(key, versions[0], high))
    return ranges
