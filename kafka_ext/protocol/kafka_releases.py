"""Apache Kafka's own ApiVersions answers, per release: the facts our API table is compared with.

What a KRaft broker listener of each release advertises to clients: `key: (lowest, highest)`.
3.9: Kafka's message definitions on its 3.9 branch (APIs whose `listeners` include `broker`,
less a `latestVersionUnstable` version); 4.0 and 4.2: franz-go's `kversion` release tables,
which agree with the former for 3.9 key by key. Kafka 4.0 dropped old versions
(KIP-896) but kept advertising Produce 0-2 (KAFKA-18659) and serving FindCoordinator v0
(KAFKA-18270); 4.1 serves JoinGroup v0-1 again (KAFKA-19444). franz-go's tables track only
the highest version: the share-group keys 76-79 start at v1 in 4.2 (v0 was 4.0's early access,
removed in 4.1, as Kafka's message definitions say).

Data only: `tools/api_table.py` turns it into the table of docs/protocol.md.
"""

from __future__ import annotations

# The releases compared with, oldest first.
KAFKA_RELEASES = ("3.9", "4.0", "4.2")

KAFKA_BROKER_VERSIONS: dict[str, dict[int, tuple[int, int]]] = {
    "3.9": {
        0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6),
        11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
        18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5),
        25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3),
        32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3), 38: (0, 3),
        39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
        46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
        57: (0, 1), 60: (0, 1), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 0),
        69: (0, 0), 71: (0, 0), 72: (0, 0), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
    },
    "4.0": {
        0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
        11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
        18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
        25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
        32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
        39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
        46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
        57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 1),
        69: (0, 1), 71: (0, 0), 72: (0, 0), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
    },
    "4.2": {
        0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6),
        11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
        18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
        25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
        32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
        39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1),
        46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
        57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
        69: (0, 1), 71: (0, 0), 72: (0, 0), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1),
        78: (1, 2), 79: (1, 2), 80: (0, 1), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1),
        86: (0, 0), 87: (0, 1), 88: (0, 0), 89: (0, 0), 90: (0, 1), 91: (0, 0), 92: (0, 0),
    },
}

# Kafka's names of the keys that are not in our table (kafka_ext.protocol.api_keys.ApiKey), and of
# the keys our table gives another meaning (76/77: the proposals' chunk APIs).
KAFKA_API_NAMES: dict[int, str] = {
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    57: "UpdateFeatures",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    74: "ListConfigResources",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
    80: "AddRaftVoter",
    81: "RemoveRaftVoter",
    83: "InitializeShareGroupState",
    84: "ReadShareGroupState",
    85: "WriteShareGroupState",
    86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
}
