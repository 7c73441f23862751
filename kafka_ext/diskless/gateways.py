"""Produce gateways: which brokers producers should send a diskless partition's batches to.

KIP-1164 "Reducing multi-DC commit operations": a WAL object holding batches of partitions of
several coordinators costs one commit per coordinator. So each coordinator gets, in each rack,
`max(1, n_brokers // n_coordinators // n_racks)` gateway brokers, spread so every broker
gateways about as many coordinators as any other. Two tie-breaks lower the commits per object
further: a coordinator's own broker gateways it in its rack (that commit is not a network call),
and coordinators that share a broker share gateways in the other racks (KIP-1164's co-location
mirroring). Pure: Metadata (server/metadata.py) calls it with the live brokers and the leaders
of `__diskless_metadata`, then lists the gateways in the client's rack first (`rack_first`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence

# (node id, rack); brokers without a rack form one rack of their own.
BrokerRack = tuple[int, str | None]
# Inkless's convention for clients that send no rack (producers): `diskless_az=<rack>` anywhere
# in the client.id, after a non-word character or at the start ("app-1,diskless_az=rack-b").
# The rack runs to the next separator.
_CLIENT_ID_RACK = re.compile(r"(?<!\w)diskless_az=([^\s,;&|=()\[\]{}<>\"']+)")


def gateways_per_rack(n_brokers: int, n_coordinators: int, n_racks: int) -> int:
    """The proposal's rule: gateways per coordinator in each rack."""
    if n_coordinators <= 0 or n_racks <= 0:
        return 1
    return max(1, n_brokers // n_coordinators // n_racks)


def produce_gateways(brokers: Iterable[BrokerRack], coordinator_ids: Iterable[int],
                     leaders: dict[int, int]) -> dict[int, list[int]]:
    """Coordinator id -> its gateway node ids (its own broker first, then by node id).

    `leaders` maps a coordinator id to the node leading its `__diskless_metadata` partition
    (missing or -1: no leader now). Deterministic: every broker computes the same answer.
    """
    return {c: list(g) for c, g in _cached_gateways(
        tuple(sorted(set(brokers), key=lambda b: b[0])), tuple(sorted(set(coordinator_ids))),
        tuple(sorted(leaders.items()))).items()}


@functools.lru_cache(maxsize=16)
def _cached_gateways(brokers: tuple[BrokerRack, ...], coordinators: tuple[int, ...],
                     leaders: tuple[tuple[int, int], ...]) -> dict[int, tuple[int, ...]]:
    """The computation, memoised: Metadata asks with the same cluster state again and again."""
    if not brokers or not coordinators:
        return {c: () for c in coordinators}
    racks: dict[str | None, list[int]] = {}
    for node, rack in brokers:
        racks.setdefault(rack, []).append(node)
    per_rack = gateways_per_rack(len(brokers), len(coordinators), len(racks))
    leader_of = dict(leaders)
    chosen: dict[int, list[int]] = {c: [] for c in coordinators}
    for rack in sorted(racks, key=lambda r: (r is not None, r or "")):
        for coordinator, nodes in _rack_gateways(racks[rack], coordinators, leader_of,
                                                 per_rack).items():
            chosen[coordinator] += nodes
    result: dict[int, tuple[int, ...]] = {}
    for coordinator, nodes in chosen.items():
        own = leader_of.get(coordinator, -1)
        result[coordinator] = tuple(sorted(nodes, key=lambda n: (n != own, n)))
    return result


def _rack_gateways(nodes: Sequence[int], coordinators: Sequence[int], leader_of: dict[int, int],
                   per_rack: int) -> dict[int, list[int]]:
    """Each coordinator's gateways among one rack's `nodes`; no node above the even share.

    Greedy: first each coordinator's own broker (when in this rack), then, coordinators grouped
    by their broker, the least loaded node, preferring one that already gateways a coordinator
    of the same broker (co-location mirroring).
    """
    wanted = min(per_rack, len(nodes))
    # The even share: ceil(slots / nodes); nobody goes above it unless nothing else is left.
    share = -(-len(coordinators) * wanted // len(nodes))
    in_rack = set(nodes)
    load = dict.fromkeys(nodes, 0)
    picked: dict[int, list[int]] = {c: [] for c in coordinators}
    # Coordinators of one broker are adjacent, so they pick one after another.
    order = sorted(coordinators, key=lambda c: (leader_of.get(c, -1), c))
    for coordinator in order:
        own = leader_of.get(coordinator, -1)
        if own in in_rack and load[own] < share:
            picked[coordinator].append(own)
            load[own] += 1
    # The nodes gatewaying some coordinator of a broker (mirroring), per broker.
    shared: dict[int, set[int]] = {}
    for coordinator in order:
        own = leader_of.get(coordinator, -1)
        mine = picked[coordinator]
        siblings = shared.setdefault(own, set()) if own >= 0 else set()
        siblings.update(mine)
        while len(mine) < wanted:
            free = [n for n in nodes if n not in mine]
            under = [n for n in free if load[n] < share] or free
            node = min(under, key=lambda n: (n not in siblings, load[n], n))
            mine.append(node)
            load[node] += 1
            siblings.add(node)
    return picked


def client_id_rack(client_id: str | None) -> str | None:
    """The rack a client.id names with a `diskless_az=` marker (the first one), else None."""
    found = _CLIENT_ID_RACK.search(client_id) if client_id else None
    return found.group(1) if found else None


def rack_first(gateways: Sequence[int], rack_of: Mapping[int, str | None],
               rack: str) -> list[int]:
    """`gateways` with those in `rack` first, each part keeping its order (so the coordinator's
    own broker leads its rack's part); in their order when none is in `rack`."""
    near = [g for g in gateways if rack_of.get(g) == rack]
    if not near:
        return list(gateways)
    return near + [g for g in gateways if rack_of.get(g) != rack]

