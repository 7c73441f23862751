"""Per-partition producer state: idempotent sequences, producer epochs, ongoing transactions."""

from __future__ import annotations

import enum


class AppendOrigin(enum.Enum):
    """Who appends a batch; it decides which producer-state checks apply (as in Kafka)."""

    CLIENT = "client"  # a producer's Produce request: sequence and epoch checks
    COORDINATOR = "coordinator"  # a coordinator's own records and transaction markers
    REPLICATION = "replication"  # a follower copying the leader: no checks
