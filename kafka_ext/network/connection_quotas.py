"""How many connections the broker takes: `max.connections` and `max.connections.per.ip`.

Mirrors Kafka's ConnectionQuotas: a connection from an address that already has its
`max.connections.per.ip` (or its entry in `max.connections.per.ip.overrides`) is closed as
soon as it is accepted, and so is one beyond `max.connections` on the client listeners. The
listeners other nodes use (inter-broker and controller) are not counted against
`max.connections`, as in Kafka, so a flood of clients cannot cut the cluster apart.
Unlike Kafka, which stops accepting while at `max.connections`, the extra connection is
accepted and closed at once: the kernel's backlog then holds no silent clients.
"""

from __future__ import annotations

from collections import Counter


class TooManyConnections(Exception):
    """Why an accepted connection is closed at once."""


def parse_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" (IPv6 hosts in brackets
    or bare: the count is after the last colon)."""
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{entry!r} is not host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


class ConnectionQuotas:
    """Owned by the socket server on the event loop: `admit` and `release` pair up."""

    def __init__(self, max_connections: int, max_connections_per_ip: int,
                 per_ip_overrides: dict[str, int] | None = None,
                 exempt_listeners: frozenset[str] = frozenset()) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = per_ip_overrides or {}
        self.exempt_listeners = exempt_listeners
        self._per_ip: Counter[str] = Counter()
        self._counted = 0  # connections on listeners max.connections applies to

    def admit(self, host: str, listener: str) -> None:
        """Count a new connection from `host`; TooManyConnections if it must be closed."""
        limit = self.per_ip_overrides.get(host, self.max_connections_per_ip)
        if self._per_ip[host] >= limit:
            raise TooManyConnections(f"{host} already has {self._per_ip[host]} connections "
                                     f"(max.connections.per.ip {limit})")
        counted = listener not in self.exempt_listeners
        if counted and self._counted >= self.max_connections:
            raise TooManyConnections(f"the broker has {self._counted} client connections "
                                     f"(max.connections {self.max_connections})")
        self._per_ip[host] += 1
        self._counted += counted

    def release(self, host: str, listener: str) -> None:
        self._per_ip[host] -= 1
        if self._per_ip[host] <= 0:
            del self._per_ip[host]
        self._counted -= listener not in self.exempt_listeners
