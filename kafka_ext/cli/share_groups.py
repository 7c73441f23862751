"""`kafka-ext share-groups`: kafka-share-groups.sh (Kafka 4.2's ShareGroupCommand, KIP-932).

Actions (exactly one): `--list` (`--state [S,..]` adds the STATE column and filters),
`--describe` of `--group G` (repeatable) or `--all-groups` with the offsets view (the default,
or `--offsets`: START-OFFSET and LAG), `--members` or `--state` (each with `--verbose`),
`--reset-offsets` of one `--group` with `--to-earliest`, `--to-latest` or `--to-datetime` over
`--topic T[:P,..]` or `--all-topics`, and `--dry-run` or `--execute` (one is required, as in
Kafka), `--delete` of groups, `--delete-offsets` of one group's `--topic`s.

No stock Python client speaks the share-group admin APIs, so the requests go through our codec:
ShareGroupDescribe with Kafka's schema (keys 76/77 are Kafka's only to a stock client, so this
tool names itself `kafka-ext-share-groups` in ApiVersions), ListGroups v5 with the "share" type
to every broker, DescribeShareGroupOffsets v1, AlterShareGroupOffsets, DeleteShareGroupOffsets
and DeleteGroups at the group's coordinator. Topic layouts and log offsets come from
confluent-kafka, through consumer-groups' Service and GroupOffsetsResetter pieces, whose flags,
checks, tables and messages this tool shares. As every kafka-ext tool, a printed error exits 1
and a usage error 2 (Kafka's tool exits 1 for both, and 0 after a failed --delete or
--delete-offsets).
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import OffsetSpec

from kafka_ext.cli import consumer_groups as cg
from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.consumer_groups import conflict, jopt, table_line
from kafka_ext.cli.java_errors import java_exception
from kafka_ext.client.probe import identify, round_trip, shadowed_round_trip
from kafka_ext.protocol.api_keys import SHARE_GROUP_DESCRIBE, ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry

DEFAULT_TIMEOUT_MS = 30000  # ShareGroupCommandOptions' --timeout default
# Not our client's name: the broker then serves Kafka's share-group APIs on 76/77 (a stock
# client's audience, api_keys.peer_audience).
SOFTWARE_NAME = "kafka-ext-share-groups"
CLIENT_ID = "kafka-share-groups"
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_datetime", "to_earliest", "to_latest")
# GroupState.groupStatesForType(SHARE), as the option's help names them.
VALID_STATES = ("Empty", "Stable", "Dead")
FIND_COORDINATOR_VERSION = 4  # batched coordinator keys
LIST_GROUPS_VERSION = 5  # TypesFilter
DELETE_GROUPS_VERSION = 2
SHARE_GROUP_DESCRIBE_VERSION = 1
DESCRIBE_OFFSETS_VERSION = 1  # Lag (KIP-1226)
GROUP_KEY_TYPE = 0


class CommandFailed(Exception):
    """A failure ShareGroupCommand reports as "Executing share group command failed due to
    <message>"; exit code 1."""


class GroupError(Exception):
    """A broker error code about a group or topic, printed as Kafka's exception."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message or default_message(code)

    def __str__(self) -> str:
        return f"{exception_name(self.code)}: {self.message}"


def exception_name(code: int) -> str:
    """The Java exception class of an error code (Errors.java)."""
    if code in cg.ERRORS:
        return "org.apache.kafka.common.errors." + cg.ERRORS[code][0]
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else "UNKNOWN_SERVER_ERROR"
    return java_exception(name)


def default_message(code: int) -> str:
    if code in cg.ERRORS:
        return cg.ERRORS[code][1]
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


# --- arguments ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `share-groups` with kafka-share-groups.sh's flags (Kafka 4.2)."""
    parser = subparsers.add_parser(
        "share-groups", help="list, describe, delete share groups and reset their offsets "
                             "(kafka-share-groups.sh)",
        description="This tool helps to list, describe, reset and delete share groups.")
    cg.add_group_tool_arguments(parser, "share", DEFAULT_TIMEOUT_MS, VALID_STATES)
    parser.set_defaults(run=run)


def check_args(args: argparse.Namespace) -> str:
    """ShareGroupCommandOptions.checkArgs, with its messages; returns the one action."""
    action_flags = [a for a in ACTIONS if getattr(args, a)]
    for flag in ("members", "offsets", "verbose"):
        if getattr(args, flag) and not args.describe:
            raise UsageError(f"Option(s) {jopt(flag)} are unavailable given other options on "
                             "the command line")
    if args.state is not None and not (args.describe or args.list):
        raise UsageError(f"Option(s) {jopt('state')} are unavailable given other options on "
                         "the command line")
    if args.describe:
        cg.check_describe(args)
    if args.delete:
        if not args.groups and not args.all_groups:
            raise UsageError(f"Option {jopt('delete')} takes the options {jopt('group')} or "
                             f"{jopt('all-groups')}.")
        if args.groups and args.all_groups:
            raise UsageError(f"Option {jopt('delete')} takes either {jopt('group')} or "
                             f"{jopt('all-groups')}, not both.")
        if args.topics or args.all_topics:
            raise UsageError(f"Option {jopt('delete')} does not take the options "
                             f"{jopt('topic')} or {jopt('all-topics')}.")
    if args.delete_offsets and (not args.groups or not args.topics):
        raise UsageError(f"Option {jopt('delete-offsets')} takes the following options: "
                         f"{jopt('group')}, {jopt('topic')}")
    scenarios = [s for s in SCENARIOS if getattr(args, s)]
    if args.reset_offsets:
        if args.dry_run and args.execute:
            raise UsageError(f"Option {jopt('reset-offsets')} only accepts one of "
                             f"{jopt('execute')} and {jopt('dry-run')}")
        if not args.dry_run and not args.execute:
            raise UsageError(f"Option {jopt('reset-offsets')} takes the option: "
                             f"{jopt('execute')} or {jopt('dry-run')}")
        if not args.groups:
            raise UsageError(f"Option {jopt('reset-offsets')} takes the option: "
                             f"{jopt('group')}")
        if not args.topics and not args.all_topics:
            raise UsageError(f"Option {jopt('reset-offsets')} takes one of these options: "
                             f"{jopt('all-topics')}, {jopt('topic')}")
        if args.topics and args.all_topics:
            raise conflict("topic", "all-topics")
        if not scenarios:
            raise UsageError(f"Option {jopt('reset-offsets')} takes one of these options: "
                             + ", ".join(jopt(s) for s in SCENARIOS))
        if len(scenarios) > 1:
            raise conflict(scenarios[0], scenarios[1])
        if args.to_datetime is not None:
            cg.parse_datetime(args.to_datetime)
    else:
        for flag in (*scenarios, *(f for f in ("dry_run", "execute", "all_topics")
                                   if getattr(args, f))):
            raise UsageError(f"Option {jopt(flag)} can only be used with {jopt('reset-offsets')}")
    cg.check_conflicts(args, action_flags)
    if len(action_flags) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, "
                         "--reset-offsets, --delete-offsets.")
    if (args.reset_offsets or args.delete_offsets) and len(set(args.groups)) > 1:
        raise UsageError("Found multiple arguments for option group, but you asked for only one")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return action_flags[0]


def parse_states(text: str) -> set[str]:
    """`--state stable,empty`; a state that is not a share group's is refused."""
    return cg.parse_names(text, VALID_STATES, "state", "states")


# --- what the broker answers -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Coordinator:
    """A group's coordinator as FindCoordinator names it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ShareMember:
    """One member of a ShareGroupDescribe answer."""

    member_id: str
    client_id: str
    host: str
    member_epoch: int
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A ShareGroupDescribe answer for one group (Kafka's admin ShareGroupDescription)."""

    group: str
    state: str
    group_epoch: int
    assignment_epoch: int
    coordinator: Coordinator
    members: tuple[ShareMember, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class StartOffset:
    """One share-partition of DescribeShareGroupOffsets; None prints as '-'."""

    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


class ShareGroupService:
    """The requests of the tool (ShareGroupCommand.ShareGroupService): our codec to the
    brokers, confluent-kafka (consumer-groups' Service) for topics and log offsets."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout_s = args.timeout / 1000.0
        self.admin = cg.Service(args)
        self._sockets: dict[tuple[str, int], socket.socket] = {}
        self._coordinators: dict[str, Coordinator] = {}
        self._correlation_id = 0

    def _connect(self, address: str) -> socket.socket:
        try:
            sock = open_connection(address, self.args.command_config, self.timeout_s)
        except (OSError, SaslAuthenticationError) as exc:
            raise CommandFailed(f"cannot connect to {address}: {exc}") from None
        identify(sock, SOFTWARE_NAME)
        return sock

    def _socket(self, host: str | None = None, port: int | None = None) -> socket.socket:
        key = ("", 0) if host is None or port is None else (host, port)
        sock = self._sockets.get(key)
        if sock is None:
            sock = self._connect(self.args.bootstrap_server if host is None
                                 else f"{host}:{port}")
            self._sockets[key] = sock
        return sock

    def _send(self, sock: socket.socket, api_key: int, version: int, body: Any,
              shadowed: bool = False) -> Any:
        self._correlation_id += 1
        send = shadowed_round_trip if shadowed else round_trip
        try:
            return send(sock, api_key, version, body, self._correlation_id, CLIENT_ID)
        except OSError as exc:
            raise CommandFailed(f"the broker closed the connection: {exc}") from None

    def coordinator(self, group: str) -> Coordinator:
        """FindCoordinator (key type 0) of the group, asked of the bootstrap broker."""
        found = self._coordinators.get(group)
        if found is None:
            request = registry()["FindCoordinatorRequest"].cls(
                key_type=GROUP_KEY_TYPE, coordinator_keys=[group])
            answer = self._send(self._socket(), ApiKey.FIND_COORDINATOR,
                                FIND_COORDINATOR_VERSION, request)
            (entry,) = answer.coordinators
            if entry.error_code:
                raise GroupError(entry.error_code, entry.error_message)
            found = Coordinator(entry.node_id, entry.host, entry.port)
            self._coordinators[group] = found
        return found

    def _to_coordinator(self, group: str, api_key: int, version: int, body: Any,
                        shadowed: bool = False) -> Any:
        node = self.coordinator(group)
        return self._send(self._socket(node.host, node.port), api_key, version, body, shadowed)

    # groups

    def list_groups(self, states: set[str] | None = None) -> list[tuple[str, str]]:
        """(group, state) of every share group of the cluster (ListGroups v5 with the "share"
        type at each broker), sorted by id."""
        try:
            brokers = self.admin.admin.list_topics(timeout=self.timeout_s).brokers
        except KafkaException as exc:
            raise CommandFailed(cg.kafka_message(exc)) from None
        request = registry()["ListGroupsRequest"].cls(
            states_filter=sorted(states or ()), types_filter=["share"])
        out: dict[str, str] = {}
        for broker in sorted(brokers.values(), key=lambda b: b.id):
            answer = self._send(self._socket(broker.host, broker.port), ApiKey.LIST_GROUPS,
                                LIST_GROUPS_VERSION, request)
            if answer.error_code:
                raise CommandFailed(GroupError(answer.error_code, None))
            for g in answer.groups:
                if g.group_type.lower() == "share":
                    out[g.group_id] = g.group_state
        return sorted(out.items())

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.list_groups()]
        return list(dict.fromkeys(self.args.groups))

    def describe(self, group: str) -> ShareGroupDescription:
        """ShareGroupDescribe of one group; GroupError when the broker refuses it."""
        Request = registry().shadowed_requests[SHARE_GROUP_DESCRIBE].cls
        answer = self._to_coordinator(group, SHARE_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE_VERSION,
                                      Request(group_ids=[group],
                                              include_authorized_operations=False),
                                      shadowed=True)
        (g,) = answer.groups
        if g.error_code:
            raise GroupError(g.error_code, g.error_message)
        members = tuple(
            ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch,
                        tuple((t.topic_name, p) for t in m.assignment.topic_partitions
                              for p in t.partitions))
            for m in g.members)
        return ShareGroupDescription(g.group_id, g.group_state, g.group_epoch,
                                     g.assignment_epoch, self.coordinator(group), members)

    def start_offsets(self, group: str) -> list[StartOffset]:
        """DescribeShareGroupOffsets of every initialized share-partition of the group;
        partitions answered with an error are left out, as Kafka's admin client does."""
        Request = registry()["DescribeShareGroupOffsetsRequest"].cls
        request = Request(groups=[Request.DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=None)])
        answer = self._to_coordinator(group, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                                      DESCRIBE_OFFSETS_VERSION, request)
        (g,) = answer.groups
        if g.error_code:
            raise GroupError(g.error_code, g.error_message)
        out = []
        for t in g.topics:
            for p in t.partitions:
                if p.error_code:
                    continue
                known = p.start_offset >= 0  # -1: no start offset yet
                out.append(StartOffset(
                    t.topic_name, p.partition_index, p.start_offset if known else None,
                    p.leader_epoch if known and p.leader_epoch >= 0 else None,
                    p.lag if known and p.lag >= 0 else None))
        return sorted(out, key=lambda o: (o.topic, o.partition))

    def alter_offsets(self, group: str, plan: cg.Plan) -> None:
        """AlterShareGroupOffsets; the first error raises GroupError."""
        Request = registry()["AlterShareGroupOffsetsRequest"].cls
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(plan.items()):
            by_topic.setdefault(topic, []).append(Request.AlterShareGroupOffsetsRequestPartition(
                partition_index=partition, start_offset=offset))
        request = Request(group_id=group, topics=[
            Request.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic.items()])
        answer = self._to_coordinator(group, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, request)
        if answer.error_code:
            raise GroupError(answer.error_code, answer.error_message)
        for t in answer.responses:
            for p in t.partitions:
                if p.error_code:
                    raise GroupError(p.error_code, p.error_message)

    def delete_offsets(self, group: str, topics: Sequence[str]
                       ) -> tuple[GroupError | None, dict[str, GroupError | None]]:
        """DeleteShareGroupOffsets: (top-level error, {topic: error or None})."""
        Request = registry()["DeleteShareGroupOffsetsRequest"].cls
        request = Request(group_id=group, topics=[
            Request.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        answer = self._to_coordinator(group, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, request)
        if answer.error_code:
            error = GroupError(answer.error_code, answer.error_message)
            return error, dict.fromkeys(topics, error)  # every topic fails with it (admin client)
        results: dict[str, GroupError | None] = {}
        for t in answer.responses:
            results[t.topic_name] = (GroupError(t.error_code, t.error_message)
                                     if t.error_code else None)
        for topic in topics:
            results.setdefault(topic, GroupError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 "The broker did not answer for this topic."))
        return None, results

    def delete_group(self, group: str) -> GroupError | None:
        """DeleteGroups of one group at its coordinator; its error, if any."""
        request = registry()["DeleteGroupsRequest"].cls(groups_names=[group])
        answer = self._to_coordinator(group, ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION,
                                      request)
        (result,) = answer.results
        return GroupError(result.error_code, None) if result.error_code else None

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self.admin.close()


# --- the tables --------------------------------------------------------------------------------


def format_group_list(groups: Sequence[tuple[str, str]]) -> str:
    """--list --state: GROUP and STATE (ShareGroupService.printGroupInfo)."""
    widths = [max([15, *(len(g) for g, _ in groups)]), 0]
    return "".join(table_line(widths, row) + "\n" for row in [("GROUP", "STATE"), *groups])


def format_offsets(group: str, rows: Sequence[StartOffset], verbose: bool) -> str:
    """The START-OFFSET table of one group (ShareGroupService.printOffsets)."""
    group_w = max(15, len(group))
    topic_w = max([15, *(len(r.topic) for r in rows)])
    if verbose:
        widths = [group_w, topic_w, 10, 13, 13, 0]
        header: list[object] = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET",
                                "LAG"]
    else:
        widths = [group_w, topic_w, 10, 13, 0]
        header = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    out = ["\n" + table_line(widths, header)]
    for r in rows:
        cells: list[object] = [group, r.topic, r.partition]
        if verbose:
            cells.append(r.leader_epoch)
        out.append("\n" + table_line(widths, [*cells, r.start_offset, r.lag]))
    return "".join(out) + "\n"


def assignment_string(assignment: Iterable[tuple[str, int]]) -> str:
    """`t1:0,1;t2:3`, empty for no partitions (ShareGroupService.getAssignmentString)."""
    assignment = list(assignment)
    return cg.assignment_string(assignment) if assignment else ""


def format_members(description: ShareGroupDescription, verbose: bool) -> str:
    """The members table of one group, sorted by member id (ShareGroupService.printMembers)."""
    members = sorted(description.members, key=lambda m: m.member_id)
    group_w = max(15, len(description.group))
    consumer_w = max([15, *(len(m.member_id) for m in members)])
    host_w = max([15, *(len(m.host) for m in members)])
    client_w = max([15, *(len(m.client_id) for m in members)])
    if verbose:
        widths = [group_w, consumer_w, host_w, client_w, 12, 13, 0]
        header: list[object] = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "MEMBER-EPOCH", "ASSIGNMENT"]
    else:
        widths = [group_w, consumer_w, host_w, client_w, 12, 0]
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    out = ["\n" + table_line(widths, header)]
    for m in members:
        cells: list[object] = [description.group, m.member_id, m.host, m.client_id,
                               len(m.assignment)]
        if verbose:
            cells.append(m.member_epoch)
        out.append("\n" + table_line(widths, [*cells, assignment_string(m.assignment)]))
    return "".join(out) + "\n"


def format_state(description: ShareGroupDescription, verbose: bool) -> str:
    """The state table of one group (ShareGroupService.printStates)."""
    node = description.coordinator
    coordinator = f"{node.host}:{node.port}  ({node.node_id})"
    group_w = max(15, len(description.group))
    coordinator_w = max(25, len(coordinator))
    if verbose:
        widths = [group_w, coordinator_w, 15, 12, 17, 0]
        header: list[object] = ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH",
                                "ASSIGNMENT-EPOCH", "#MEMBERS"]
        cells: list[object] = [description.group, coordinator, description.state,
                               description.group_epoch, description.assignment_epoch,
                               len(description.members)]
    else:
        widths = [group_w, coordinator_w, 15, 0]
        header = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
        cells = [description.group, coordinator, description.state, len(description.members)]
    return "\n" + table_line(widths, header) + "\n" + table_line(widths, cells) + "\n"


def format_delete_offsets(results: dict[str, GroupError | None]) -> str:
    """The TOPIC/STATUS table of --delete-offsets (ShareGroupService.deleteOffsets)."""
    widths = [max([15, *(len(t) for t in results)]), 0]
    out = ["\n" + table_line(widths, ["TOPIC", "STATUS"])]
    for topic, error in sorted(results.items()):
        out.append("\n" + table_line(widths, [topic, "Successful" if error is None
                                         else f"Error: {error.message}"]))
    return "".join(out) + "\n"


# --- actions -----------------------------------------------------------------------------------


def should_print(group: str, state: str, rows: int) -> bool:
    """maybePrintEmptyGroupState: the notice of a dead or empty group; whether its table has
    rows to print."""
    if state == "Dead":
        cg.print_error(f"Share group '{group}' does not exist.")
    elif state == "Empty":
        print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
    return state != "Dead" and rows > 0


def list_groups(service: ShareGroupService, args: argparse.Namespace) -> int:
    """--list: group ids, or with --state a GROUP STATE table, filtered by the states given."""
    if args.state is None:
        for group, _ in service.list_groups():
            print(group)
        return 0
    states = parse_states(args.state) if args.state else None
    listed = [(g, s) for g, s in service.list_groups(states) if states is None or s in states]
    sys.stdout.write(format_group_list(listed))
    return 0


def describe(service: ShareGroupService, args: argparse.Namespace) -> int:
    """--describe: the offsets (default), members or state view of each group, sorted by id;
    a group the broker cannot describe fails the command, as Kafka's does."""
    groups = service.group_ids()
    try:
        descriptions = {g: service.describe(g) for g in groups}
    except GroupError as exc:
        raise CommandFailed(exc) from None
    failed = False
    for group in sorted(descriptions):
        description = descriptions[group]
        failed |= description.state == "Dead"
        if args.members:
            if should_print(group, description.state, len(description.members)):
                sys.stdout.write(format_members(description, args.verbose))
        elif args.state is not None:
            should_print(group, description.state, 1)
            sys.stdout.write(format_state(description, args.verbose))
        else:
            try:
                rows = service.start_offsets(group)
            except GroupError as exc:
                raise CommandFailed(exc) from None
            if rows:
                sys.stdout.write(format_offsets(group, rows, args.verbose))
            else:
                print(f"\nShare group '{group}' has no offset information.")
    return 1 if failed else 0


def reset_offsets(service: ShareGroupService, args: argparse.Namespace) -> int:
    """--reset-offsets: the NEW-OFFSET plan of one inactive (or not yet existing) group, and
    with --execute AlterShareGroupOffsets; an active group is refused as Kafka refuses it."""
    group: str = args.groups[0]
    try:
        state = service.describe(group).state
    except GroupError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise CommandFailed(exc) from None
        state = "Dead"
    if state not in ("Empty", "Dead"):
        print(f"Share group '{group}' is not empty.", file=sys.stderr)
        return 1
    resetter = cg.Resetter(service.admin, args)
    if args.all_topics:
        try:
            partitions = sorted({(o.topic, o.partition) for o in service.start_offsets(group)})
        except GroupError as exc:
            raise CommandFailed(exc) from None
    else:
        partitions = resetter.partitions_to_reset(group)
    resetter.check_valid(partitions)
    if args.to_earliest:
        plan = resetter.offsets_at(partitions, OffsetSpec.earliest(), "starting")
    elif args.to_latest:
        plan = resetter.offsets_at(partitions, OffsetSpec.latest(), "ending")
    else:
        plan = resetter.by_timestamp(partitions, cg.parse_datetime(args.to_datetime))
    if args.execute and plan:
        try:
            service.alter_offsets(group, plan)
        except GroupError as exc:
            raise CommandFailed(exc) from None
    sys.stdout.write(cg.format_reset_plan({group: plan} if plan else {}))
    return 0


def delete_groups(service: ShareGroupService, args: argparse.Namespace) -> int:
    """--delete: only empty share groups are sent DeleteGroups (Kafka's checks first, with its
    messages); the groups deleted and why the others were not."""
    listed = dict(service.list_groups())
    groups = list(listed) if args.all_groups else list(dict.fromkeys(args.groups))
    failed: dict[str, str] = {}
    deleted: list[str] = []
    for group in groups:
        state = listed.get(group)
        if state is None:
            failed[group] = (f"{exception_name(ErrorCode.GROUP_ID_NOT_FOUND)}: Group '{group}' "
                             "is not a share group.")
        elif state == "Dead":
            failed[group] = (f"java.lang.IllegalStateException: Share group '{group}' group "
                             "state is DEAD.")
        elif state != "Empty":
            failed[group] = (f"{exception_name(ErrorCode.NON_EMPTY_GROUP)}: Share group "
                             f"'{group}' is not EMPTY.")
        else:
            error = service.delete_group(group)
            if error is None:
                deleted.append(group)
            else:
                failed[group] = str(error)
    quoted = ", ".join(f"'{g}'" for g in deleted)
    if not failed:
        print(f"Deletion of requested share groups ({quoted}) was successful.")
        return 0
    cg.print_error("Deletion of some share groups failed:")
    for group, reason in sorted(failed.items()):
        print(f"* Group '{group}' could not be deleted due to: {reason}")
    if deleted:
        print(f"\nThese share groups were deleted successfully: {quoted}")
    return 1


def delete_offsets(service: ShareGroupService, args: argparse.Namespace) -> int:
    """--delete-offsets: DeleteShareGroupOffsets of one group's topics, with Kafka's summary
    of a group-level error and the per-topic table."""
    group: str = args.groups[0]
    top_level, results = service.delete_offsets(group, list(dict.fromkeys(args.topics)))
    if top_level is not None:
        if top_level.code in (ErrorCode.INVALID_GROUP_ID, ErrorCode.GROUP_ID_NOT_FOUND,
                              ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.NON_EMPTY_GROUP):
            cg.print_error(top_level.message)
        elif top_level.code not in (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            cg.print_error(f"Encounter some unknown error: {top_level}")
    sys.stdout.write(format_delete_offsets(results) if results else "\n")
    return 0 if top_level is None and all(e is None for e in results.values()) else 1


# --- entry point -------------------------------------------------------------------------------


HANDLERS: dict[str, Callable[[ShareGroupService, argparse.Namespace], int]] = {
    "list": list_groups,
    "describe": describe,
    "delete": delete_groups,
    "reset_offsets": reset_offsets,
    "delete_offsets": delete_offsets,
}


def run(args: argparse.Namespace) -> int:
    """Execute the one action; 0 on success, 1 when an error was printed."""
    action = check_args(args)
    if action == "list" and args.state:
        parse_states(args.state)
    service = ShareGroupService(args)
    try:
        return HANDLERS[action](service, args)
    except (CommandFailed, GroupError) as exc:
        cg.print_error(f"Executing share group command failed due to {exc}")
        return 1
    except KafkaException as exc:
        cg.print_error(f"Executing share group command failed due to {cg.kafka_message(exc)}")
        return 1
    finally:
        service.close()
