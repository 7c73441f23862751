"""`kafka-ext broker-api-versions`: kafka-broker-api-versions.sh's report of every broker's API
versions, in its layout, as a stock Java client sees them.

The brokers come from the bootstrap broker's Metadata; each is then asked ApiVersions with a
stock client's software name, so the report shows what Kafka's clients are offered (our
extension keys are shown only to our own client). Each key is printed with the name and the
usable version of the Java client of the newest Kafka release we compare with
(kafka_releases.KAFKA_RELEASES): `Produce(0): 0 to 13 [usable: 13]`, `UNKNOWN(k)` for a key that
client does not know, `UNSUPPORTED` for one it knows that the broker does not offer.
"""

from __future__ import annotations

import argparse
import socket
import sys
from dataclasses import dataclass
from typing import Any

from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.client.probe import identify, round_trip
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, ApiKey, supported_versions
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.kafka_releases import (
    KAFKA_API_NAMES,
    KAFKA_BROKER_VERSIONS,
    KAFKA_RELEASES,
)
from kafka_ext.protocol.messages import registry

TIMEOUT_S = 30.0
JAVA_CLIENT_RELEASE = KAFKA_RELEASES[-1]
# The software name Kafka's Java clients send in ApiVersions v3+ (KIP-511).
JAVA_SOFTWARE_NAME = "apache-kafka-java"
CONNECTION_ERRORS = (OSError, SaslAuthenticationError, DecodeError)


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A broker as Kafka's Node prints it: `host:port (id: N rack: R)`."""

    node_id: int
    host: str
    port: int
    rack: str | None

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.node_id} rack: {self.rack or 'null'})"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `broker-api-versions` with kafka-broker-api-versions.sh's flags."""
    parser = subparsers.add_parser(
        "broker-api-versions", help="every broker's API versions "
                                    "(kafka-broker-api-versions.sh)",
        description="Print the API versions each broker of the cluster offers a stock client.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (security settings and the like)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """One report per broker; 1 when the bootstrap brokers cannot be asked for the brokers."""
    try:
        brokers = find_brokers(args.bootstrap_server, args.command_config)
    except (*CONNECTION_ERRORS, BrokerError) as exc:
        print(f"Request METADATA failed on brokers {args.bootstrap_server}: {exc}",
              file=sys.stderr)
        return 1
    for broker in brokers:
        try:
            report = format_api_versions(broker_api_versions(broker, args.command_config))
        except (*CONNECTION_ERRORS, BrokerError) as exc:
            report = f"ERROR: {exc}"
        print(f"{broker} -> {report}")
    return 0


class BrokerError(Exception):
    """A broker's ApiVersions answer carried an error code."""


def negotiated_round_trip(sock: socket.socket, api_key: ApiKey, request: Any,
                          software_name: str = CLIENT_SOFTWARE_NAME) -> Any:
    """ApiVersions as `software_name` on a fresh connection, then `request` at the highest
    version both we and the broker know; BrokerError when the broker does not offer it."""
    offered = {k.api_key: k.max_version for k in identify(sock, software_name).api_keys}
    ours = supported_versions(api_key)
    if ours is None or api_key not in offered:
        raise BrokerError(f"The node does not support {api_key.name}")
    return round_trip(sock, api_key, min(ours[1], offered[api_key]), request)


def find_brokers(bootstrap: str, command_config: str | None) -> list[BrokerNode]:
    """The cluster's brokers, by id, from the bootstrap broker's Metadata (no topics)."""
    Request = registry().requests[ApiKey.METADATA].cls
    with open_connection(bootstrap, command_config, TIMEOUT_S) as sock:
        answer = negotiated_round_trip(sock, ApiKey.METADATA, Request(topics=[]),
                                       JAVA_SOFTWARE_NAME)
    return sorted((BrokerNode(b.node_id, b.host, b.port, b.rack) for b in answer.brokers),
                  key=lambda b: b.node_id)


def broker_api_versions(broker: BrokerNode, command_config: str | None
                        ) -> dict[int, tuple[int, int]]:
    """`key: (lowest, highest)` that `broker` offers a stock client."""
    with open_connection(f"{broker.host}:{broker.port}", command_config, TIMEOUT_S) as sock:
        answer = identify(sock, JAVA_SOFTWARE_NAME)
    if answer.error_code:
        raise BrokerError(ErrorCode(answer.error_code).name)
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def kafka_api_name(key: int) -> str | None:
    """Kafka's name of an API key (`Produce`); None for a key Kafka's clients do not know."""
    if key not in KAFKA_BROKER_VERSIONS[JAVA_CLIENT_RELEASE]:
        return None
    if key in KAFKA_API_NAMES:
        return KAFKA_API_NAMES[key]
    return str(registry().requests[key].name.removesuffix("Request"))


def format_api_versions(offered: dict[int, tuple[int, int]]) -> str:
    """Kafka's NodeApiVersions text with line breaks: one `Name(key): versions [usable: v]`
    line per key the broker offers or the Java client knows, by key."""
    known = KAFKA_BROKER_VERSIONS[JAVA_CLIENT_RELEASE]
    lines = []
    for key in sorted(set(offered) | set(known)):
        name = kafka_api_name(key)
        label = f"{name}({key})" if name is not None else f"UNKNOWN({key})"
        if key not in offered:
            lines.append(f"{label}: UNSUPPORTED")
            continue
        low, high = offered[key]
        text = f"{label}: {low}" if low == high else f"{label}: {low} to {high}"
        if name is not None:
            oldest, latest = known[key]
            if latest < low:
                text += " [unusable: node too new]"
            elif high < oldest:
                text += " [unusable: node too old]"
            else:
                text += f" [usable: {min(latest, high)}]"
        lines.append(text)
    return "(\n\t" + ",\n\t".join(lines) + "\n)"
