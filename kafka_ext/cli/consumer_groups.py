"""`kafka-ext consumer-groups`: kafka-consumer-groups.sh's flags and output, over
confluent-kafka's AdminClient.

Actions (exactly one): `--list` (`--state [S,..]`, `--type [T,..]` add columns and filter),
`--describe` of `--group G` (repeatable) or `--all-groups` with the offsets view (the default,
or `--offsets`), `--members` or `--state` (each with `--verbose`), `--reset-offsets` with one of
`--to-earliest`, `--to-latest`, `--to-current`, `--to-offset N`, `--shift-by N`,
`--to-datetime`, `--by-duration`, `--from-file` over `--topic T[:P,..]` or `--all-topics`,
printing the NEW-OFFSET plan (`--dry-run`, the default) or applying it (`--execute`), or the
plan as CSV (`--export`); `--delete` of groups; `--delete-offsets` of a group's topics.

The tables are printed with the Java tool's printf layouts (column widths, the blank line before
each table, trailing padding) because scripts parse them. Messages keep the Java tool's words and
streams ("Error: ..." on stdout, the "has no active members" notice on stderr). Two exit codes
differ on purpose: kafka-consumer-groups.sh exits 0 after printing an "Error:" line and 1 for a
usage error; here a printed error exits 1 and a usage error 2, as every kafka-ext tool does.
confluent-kafka has no OffsetDelete, so `--delete-offsets` goes through kafka-python.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_ext.cli.client_config import UsageError, client_config
from kafka_ext.protocol.errors import ErrorCode

MISSING = "-"
DEFAULT_TIMEOUT_MS = 5000
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "shift_by", "to_datetime", "by_duration", "to_earliest", "to_latest",
             "to_current", "from_file")
NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing.In a future major "
    "release, the default behavior of this command will be to prompt the user before executing "
    "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
    "are scripting this command and want to keep the current default behavior without prompting.")
RESETTER_LOGGER = "org.apache.kafka.tools.GroupOffsetsResetter"

# Kafka's GroupState names (GroupState.toString) of confluent-kafka's states.
STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
# GroupState.groupStatesForType(CONSUMER), in the order Kafka declares them.
VALID_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                "Assigning", "Reconciling")
TYPE_NAMES = {ConsumerGroupType.UNKNOWN: "Unknown", ConsumerGroupType.CONSUMER: "Consumer",
              ConsumerGroupType.CLASSIC: "Classic"}
VALID_TYPES = ("Classic", "Consumer")
REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}

# Java exception class and message of the error codes the tool reports (Errors.java).
ERRORS: dict[int, tuple[str, str]] = {
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    5: ("LeaderNotAvailableException", "There is no leader for this topic-partition as we are "
                                       "in the middle of a leadership election."),
    15: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    16: ("NotCoordinatorException", "This is not the correct coordinator."),
    24: ("InvalidGroupIdException", "The configured groupId is invalid."),
    25: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    30: ("GroupAuthorizationException", "Group authorization failed."),
    68: ("GroupNotEmptyException", "The group is not empty."),
    69: ("GroupIdNotFoundException", "The group id does not exist."),
    86: ("GroupSubscribedToTopicException",
         "The consumer group is actively subscribed to the topic"),
}
GROUP_ID_NOT_FOUND = 69


class CommandFailed(Exception):
    """A failure kafka-consumer-groups.sh reports as "Executing consumer group command failed
    due to <message>"; exit code 1."""


# --- arguments ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `consumer-groups` with kafka-consumer-groups.sh's flags."""
    parser = subparsers.add_parser(
        "consumer-groups",
        help="list, describe, delete consumer groups and reset their offsets "
             "(kafka-consumer-groups.sh)",
        description="This tool helps to list all consumer groups, describe a consumer group, "
                    "delete consumer group info, or reset consumer group offsets.")
    add_group_tool_arguments(parser, "consumer", DEFAULT_TIMEOUT_MS, VALID_STATES)
    parser.add_argument("--type", nargs="?", const="", default=None, metavar="TYPES",
                        help="--list: each group's type, or only groups of these types")
    parser.add_argument("--export", action="store_true",
                        help="Print the reset plan as CSV (for --from-file).")
    parser.add_argument("--to-offset", type=int, metavar="OFFSET",
                        help="Reset offsets to a specific offset.")
    parser.add_argument("--shift-by", type=int, metavar="N",
                        help="Reset offsets shifting current offset by 'n' (may be negative).")
    parser.add_argument("--by-duration", metavar="DURATION",
                        help="Reset offsets to offset by duration from current timestamp. "
                             "Format: 'PnDTnHnMnS'")
    parser.add_argument("--to-current", action="store_true",
                        help="Reset offsets to current offset.")
    parser.add_argument("--from-file", metavar="CSV",
                        help="Reset offsets to values defined in CSV file.")
    parser.set_defaults(run=run)


def add_group_tool_arguments(parser: argparse.ArgumentParser, kind: str, timeout_ms: int,
                             states: Sequence[str]) -> None:
    """The flags kafka-consumer-groups.sh and kafka-share-groups.sh share, for `kind`
    ("consumer" or "share") groups: the connection, the five actions, the groups and topics
    acted on, the describe views and the reset scenarios both have."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="REQUIRED: The server(s) to connect to.")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client.")
    parser.add_argument("--timeout", type=int, default=timeout_ms, metavar="MS",
                        help=f"timeout of each request in ms (default {timeout_ms})")
    parser.add_argument("--list", action="store_true", help=f"List all {kind} groups.")
    parser.add_argument("--describe", action="store_true",
                        help=f"Describe {kind} groups: their offsets, members or state.")
    parser.add_argument("--delete", action="store_true", help=f"Delete {kind} groups.")
    parser.add_argument("--reset-offsets", action="store_true",
                        help=f"Reset offsets of {kind} groups (their members must be inactive).")
    parser.add_argument("--delete-offsets", action="store_true",
                        help=f"Delete offsets of one {kind} group for the given topics.")
    parser.add_argument("--group", action="append", default=[], dest="groups", metavar="GROUP",
                        help=f"The {kind} group we wish to act on (repeatable).")
    parser.add_argument("--all-groups", action="store_true", help=f"Apply to all {kind} groups.")
    parser.add_argument("--topic", action="append", default=[], dest="topics", metavar="TOPIC",
                        help="topic (reset-offsets: topic:0,1,2 for some partitions; repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="Consider all topics assigned to a group in the reset-offsets "
                             "process.")
    parser.add_argument("--members", action="store_true", help="Describe members of the group.")
    parser.add_argument("--offsets", action="store_true",
                        help="Describe the group's partitions with their offsets and lag "
                             "(the default).")
    parser.add_argument("--verbose", action="store_true",
                        help="With --describe: additional information, if any.")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                        help="--describe: the group's state; --list: each group's state, or only "
                             f"groups in these comma-separated states ({', '.join(states)})")
    parser.add_argument("--dry-run", action="store_true",
                        help="Only show the new offsets (the default of --reset-offsets).")
    parser.add_argument("--execute", action="store_true", help="Apply the new offsets.")
    parser.add_argument("--to-datetime", metavar="DATETIME",
                        help="Reset offsets to offset from datetime. Format: "
                             "'YYYY-MM-DDTHH:mm:SS.sss' (UTC unless it ends in Z or +hh:mm)")
    parser.add_argument("--to-earliest", action="store_true",
                        help="Reset offsets to earliest offset.")
    parser.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return bool(value) if isinstance(value, bool | list) else value is not None


def jopt(name: str) -> str:
    """An option as joptsimple prints it in messages: [reset-offsets]."""
    return f"[{name.replace('_', '-')}]"


def conflict(used: str, other: str) -> UsageError:
    """joptsimple's refusal of two options given together."""
    return UsageError(f'Option "{jopt(used)}" can\'t be used with option "{jopt(other)}"')


def check_describe(args: argparse.Namespace) -> None:
    """--describe's checks, the same in both group tools: a scope and at most one view."""
    if not args.groups and not args.all_groups:
        raise UsageError(f"Option {jopt('describe')} takes one of these options: "
                         f"{jopt('all-groups')}, {jopt('group')}")
    if sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
        raise UsageError(f"Option {jopt('describe')} takes at most one of these options: "
                         f"{jopt('members')}, {jopt('offsets')}, {jopt('state')}")
    if args.state:
        raise UsageError(f"Option {jopt('describe')} does not take a value for {jopt('state')}")


def check_conflicts(args: argparse.Namespace, actions: Sequence[str]) -> None:
    """The options both group tools refuse together (whichever actions were given)."""
    if args.groups and args.all_groups:
        raise conflict("group", "all-groups")
    if args.groups and "list" in actions:
        raise conflict("group", "list")
    for action in ("list", "describe"):
        if args.topics and action in actions:
            raise conflict("topic", action)


def check_args(args: argparse.Namespace) -> str:
    """kafka-consumer-groups.sh's argument checks, with its messages; returns the action."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, "
                         "--reset-offsets, --delete-offsets")
    action = actions[0]
    scope = f"{jopt('all-groups')}, {jopt('group')}"
    if action == "describe":
        check_describe(args)
    else:
        for flag in ("members", "offsets", "verbose"):
            if getattr(args, flag):
                raise UsageError(f"Option {jopt(flag)} can only be used with {jopt('describe')}")
    if args.state is not None and action not in ("describe", "list"):
        raise UsageError(f"Option {jopt('state')} can only be used with {jopt('describe')} or "
                         f"{jopt('list')}")
    if args.type is not None and action != "list":
        raise UsageError(f"Option {jopt('type')} can only be used with {jopt('list')}")
    if action == "delete":
        if not args.groups and not args.all_groups:
            raise UsageError(f"Option {jopt('delete')} takes one of these options: {scope}")
        if args.topics:
            raise UsageError("The consumer does not support topic-specific offset deletion from "
                             "a consumer group.")
    if action == "delete_offsets" and (not args.groups or not args.topics):
        raise UsageError(f"Option {jopt('delete-offsets')} takes the following options: "
                         f"{jopt('group')}, {jopt('topic')}")
    if action == "delete_offsets" and len(args.groups) > 1:
        raise UsageError(f"Option {jopt('delete-offsets')} supports one consumer group at a time")
    scenarios = [s for s in SCENARIOS if _given(args, s)]
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise UsageError(f"Option {jopt('reset-offsets')} only accepts one of "
                             f"{jopt('execute')} and {jopt('dry-run')}")
        if not args.groups and not args.all_groups:
            raise UsageError(f"Option {jopt('reset-offsets')} takes one of these options: "
                             f"{scope}")
        if len(scenarios) > 1:
            raise conflict(scenarios[0], scenarios[1])
        if not scenarios:
            raise UsageError(f"Option '{jopt('reset-offsets')}' requires one of the following "
                             "scenarios: " + ", ".join(jopt(s) for s in SCENARIOS))
        if not args.topics and not args.all_topics and args.from_file is None:
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.topics and args.all_topics:
            raise conflict("topic", "all-topics")
        if args.to_datetime is not None:
            parse_datetime(args.to_datetime)
        if args.by_duration is not None:
            parse_duration(args.by_duration)
    else:
        for flag in (*scenarios, *(f for f in ("dry_run", "execute", "export", "all_topics")
                                   if getattr(args, f))):
            raise UsageError(f"Option {jopt(flag)} can only be used with {jopt('reset-offsets')}")
    check_conflicts(args, actions)
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return action


def parse_names(text: str, valid: Sequence[str], list_name: str, plural: str) -> set[str]:
    """`stable, EMPTY` as Kafka names them (`valid`), case aside; a name that is not one is
    refused with Kafka's message ("Invalid state list '..'. Valid states are: ..")."""
    by_lower = {name.lower(): name for name in valid}
    parsed = {by_lower.get(name.strip().lower(), "Unknown") for name in text.split(",")}
    if not parsed <= set(valid):
        raise UsageError(f"Invalid {list_name} list '{text}'. Valid {plural} are: "
                         + ", ".join(valid))
    return parsed


def parse_states(text: str) -> set[str]:
    """`--state stable,empty`: a consumer group's states."""
    return parse_names(text, VALID_STATES, "state", "states")


def parse_types(text: str) -> set[str]:
    """`--type classic,consumer`: the group types."""
    return parse_names(text, VALID_TYPES, "types", "types")


def parse_topic_partitions(arg: str) -> list[tuple[str, int]]:
    """`topic:0,1,2` (GroupOffsetsResetter.parseTopicsWithPartitions)."""
    parts = arg.split(":")
    if len(parts) != 2 or not parts[1]:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for p in partitions.split(","):
        try:
            out.append((topic, int(p)))
        except ValueError:
            raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
    return out


_DATETIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """Epoch ms of `--to-datetime` as Kafka's Utils.getDateTime reads it: ISO 8601 with 'T', UTC
    unless a zone (Z, +hh, +hhmm, +hh:mm) is given. The milliseconds may be left out here."""
    if "T" not in text:
        raise UsageError(f"Error parsing timestamp. It does not contain a 'T' according to "
                         f"ISO8601 format: {text}")
    match = _DATETIME_RE.fullmatch(text)
    if match is None:
        raise UsageError(f'Unparseable date: "{text}"')
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    millis = int(match.group(7) or 0)
    zone = match.group(8) or "Z"
    if zone == "Z":
        tz = UTC
    else:
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        tz = timezone(-offset if zone[0] == "-" else offset)
    try:
        moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
    except ValueError:
        raise UsageError(f'Unparseable date: "{text}"') from None
    return int(moment.timestamp() * 1000)


_DURATION_RE = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO 8601 duration as java.time.Duration.parse reads it (PnDTnHnMn.nS)."""
    match = _DURATION_RE.fullmatch(text)
    if match is None or text[-1:] in ("T", "t") or (match.group(2) is None
                                                     and match.group(3) is None):
        raise UsageError(f"Text cannot be parsed to a Duration: {text}")
    days, hours, minutes, seconds = (int(match.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = match.group(7) or ""
    nanos = int((fraction + "0" * 9)[:9]) if fraction else 0
    if match.group(6) is not None and match.group(6).startswith("-"):
        nanos = -nanos
    total_ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + nanos // 1_000_000
    return -total_ms if match.group(1) == "-" else total_ms


def parse_reset_plan(text: str, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """A --from-file CSV: `topic,partition,offset` lines (with one --group) or
    `group,topic,partition,offset` lines."""
    rows = [row for row in csv.reader(io.StringIO(text)) if row and any(c.strip() for c in row)]

    def old_format(row: list[str]) -> bool:
        try:
            int(row[1]), int(row[2])
        except (IndexError, ValueError):
            return False
        return len(row) == 3

    plan: dict[str, dict[tuple[str, int], int]] = {}
    single = len(groups) == 1 and bool(rows) and old_format(rows[0])
    for row in rows:
        try:
            if single:
                topic, partition, offset = row
                group = groups[0]
            else:
                group, topic, partition, offset = row
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError:
            raise UsageError(f"malformed reset plan line: {','.join(row)!r}") from None
    return plan


# --- the tables --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One row of the --describe offsets view; None prints as '-'."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING
    leader_epoch: int | None = None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.current_offset == -1:
            return None
        if self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One row of the --describe --members view."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    group_instance_id: str
    assignment: tuple[tuple[str, int], ...]
    target_assignment: tuple[tuple[str, int], ...] = ()
    current_epoch: int | None = None
    target_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GroupStateRow:
    """The --describe --state view of one group."""

    group: str
    coordinator: str
    assignment_strategy: str
    state: str
    members: int
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


def _s(value: object) -> str:
    return MISSING if value is None else str(value)


def table_line(widths: Sequence[int], cells: Sequence[object]) -> str:
    """Java's printf of `%-w1s %-w2s ... %s`: each cell padded to its width but the last,
    cells separated by one space; a width of 0 means the cell is not padded."""
    texts = [_s(c) for c in cells]
    return " ".join(f"{t:<{w}}" if w else t for t, w in zip(texts, widths, strict=True))


def format_offsets(rows: Sequence[OffsetRow], verbose: bool = False) -> str:
    """The offsets table of one group (ConsumerGroupCommand.printOffsets)."""
    group_w = max([15, *(len(r.group) for r in rows)])
    topic_w = max([15, *(len(_s(r.topic)) for r in rows)])
    consumer_w = max([15, *(len(r.consumer_id) for r in rows)])
    host_w = max([15, *(len(r.host) for r in rows)])
    if verbose:
        widths = [group_w, topic_w, 10, 15, 15, 15, 15, consumer_w, host_w, 0]
        header: list[object] = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                                "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    else:
        widths = [group_w, topic_w, 10, 15, 15, 15, consumer_w, host_w, 0]
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]
    out = ["\n" + table_line(widths, header)]
    for r in rows:
        cells: list[object] = [r.group, r.topic, r.partition]
        if verbose:
            cells.append(r.leader_epoch)
        cells += [r.current_offset, r.log_end_offset, r.lag, r.consumer_id, r.host, r.client_id]
        out.append("\n" + table_line(widths, cells))
    return "".join(out) + "\n"


def assignment_string(assignment: Iterable[tuple[str, int]]) -> str:
    """`t1:0,1;t2:3`: partitions per topic, sorted (ConsumerGroupCommand.getAssignmentString)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    parts = [f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()]
    return ";".join(sorted(parts)) or MISSING


def format_members(rows: Sequence[MemberRow], verbose: bool = False) -> str:
    """The members table of one group (ConsumerGroupCommand.printMembers)."""
    group_w = max([15, *(len(r.group) for r in rows)])
    consumer_w = max([15, *(len(r.consumer_id) for r in rows)])
    instance_w = max([17, *(len(r.group_instance_id) for r in rows)])
    host_w = max([15, *(len(r.host) for r in rows)])
    client_w = max([15, *(len(r.client_id) for r in rows)])
    current_w = max([20, *(len(assignment_string(r.assignment)) for r in rows)])
    target_w = max([20, *(len(assignment_string(r.target_assignment)) for r in rows)])
    with_instance = any(r.group_instance_id for r in rows)

    def head(cells: list[object]) -> str:
        if with_instance:
            widths = [group_w, consumer_w, instance_w, host_w, client_w, 15]
        else:
            widths = [group_w, consumer_w, host_w, client_w, 15]
            del cells[2]
        return table_line(widths, cells) + " "

    def tail(cells: list[object]) -> str:
        return table_line([15, current_w, 15, target_w], cells) if verbose else ""

    out = ["\n" + head(["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                         "#PARTITIONS"])
           + tail(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"])
           + "\n"]
    for r in rows:
        out.append(head([r.group, r.consumer_id, r.group_instance_id, r.host, r.client_id,
                         len(r.assignment)])
                   + tail([r.current_epoch, assignment_string(r.assignment), r.target_epoch,
                           assignment_string(r.target_assignment)])
                   + "\n")
    return "".join(out)


def format_state(row: GroupStateRow, verbose: bool = False) -> str:
    """The state table of one group (ConsumerGroupCommand.printStates)."""
    coordinator_w = max(25, len(row.coordinator))
    group_w = max(15, len(row.group))
    strategy = row.assignment_strategy or MISSING
    if verbose:
        widths = [group_w, coordinator_w, 20, 20, 15, 25, 0]
        header: list[object] = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        cells: list[object] = [row.group, row.coordinator, strategy, row.state, row.group_epoch,
                               row.target_assignment_epoch, row.members]
    else:
        widths = [group_w, coordinator_w, 20, 20, 0]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        cells = [row.group, row.coordinator, strategy, row.state, row.members]
    return "\n" + table_line(widths, header) + "\n" + table_line(widths, cells) + "\n"


def format_group_list(groups: Sequence[tuple[str, str, str]], include_type: bool,
                      include_state: bool) -> str:
    """--list with --type/--state: (group, type, state) rows (printGroupInfo)."""
    group_w = max([15, *(len(g) for g, _, _ in groups)]) + 10
    widths = [group_w] + [20] * (include_type + include_state)

    def line(group: str, type_: str, state: str) -> str:
        cells = [group, *([type_] if include_type else []), *([state] if include_state else [])]
        return " ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + "\n"

    return line("GROUP", "TYPE", "STATE") + "".join(line(*g) for g in groups)


def format_reset_plan(plan: dict[str, dict[tuple[str, int], int]]) -> str:
    """The NEW-OFFSET table of --reset-offsets (GroupOffsetsResetter.printOffsetsToReset);
    a group refused (inactive check) has an empty plan but still gets the header."""
    group_w = max([15, *(len(g) for g in plan)])
    topic_w = max([15, *(len(t) for p in plan.values() for t, _ in p)])
    widths = [group_w, topic_w, 10, 0]
    out = []
    if plan:
        out.append("\n" + table_line(widths, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
    for group in sorted(plan):
        for (topic, partition), offset in sorted(plan[group].items()):
            out.append("\n" + table_line(widths, [group, topic, partition, offset]))
    return "".join(out) + "\n"


def format_export(plan: dict[str, dict[tuple[str, int], int]], single_group: bool) -> str:
    """--export: the plan as the CSV --from-file reads (then println's blank line)."""
    lines = []
    for group in sorted(plan):
        for (topic, partition), offset in sorted(plan[group].items()):
            fields = [topic, partition, offset] if single_group else [group, topic, partition,
                                                                      offset]
            lines.append(",".join(map(str, fields)) + "\n")
    return "".join(lines) + "\n"


def format_delete_offsets(results: dict[tuple[str, int], str | None]) -> str:
    """The TOPIC/PARTITION/STATUS table of --delete-offsets; None is success; partition -1 is a
    topic that could not be described."""
    topic_w = max([15, *(len(t) for t, _ in results)])
    widths = [topic_w, 10, 15]
    out = ["\n" + table_line(widths, ["TOPIC", "PARTITION", "STATUS"])]
    for (topic, partition), error in sorted(results.items(), key=lambda e: f"{e[0][0]}{e[0][1]}"):
        out.append("\n" + table_line(widths, [topic, partition if partition >= 0 else MISSING,
                                         "Successful" if error is None else f"Error: {error}"]))
    return "".join(out) + "\n"


def tp_name(tp: tuple[str, int]) -> str:
    """A partition as Java's TopicPartition.toString writes it: topic-0."""
    return f"{tp[0]}-{tp[1]}"


# --- talking to the cluster ------------------------------------------------------------------


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        code: int = exc.args[0].code()
        return code
    return None


def kafka_message(exc: BaseException) -> str:
    """Kafka's message of a broker error code, else the client's."""
    code = _error_code(exc)
    if code is not None and code in ERRORS:
        return ERRORS[code][1]
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        return error.str() or error.name()
    return str(exc)


def _java_error(code: int | None, fallback: str) -> str:
    """`org.apache.kafka.common.errors.X: message`, as a Java Throwable prints itself."""
    if code is not None and code in ERRORS:
        name, message = ERRORS[code]
        return f"org.apache.kafka.common.errors.{name}: {message}"
    return fallback


def print_error(message: str) -> None:
    """ConsumerGroupCommand.printError: a blank line then "Error: ..." on stdout."""
    print(f"\nError: {message}")


def _warn(message: str) -> None:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    print(f"[{stamp}] WARN {message} ({RESETTER_LOGGER})", file=sys.stderr)


class Service:
    """The admin calls of the tool (ConsumerGroupService + GroupOffsetsResetter)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout_s = args.timeout / 1000.0
        conf: dict[str, str | int | float | bool] = dict(client_config(
            args.bootstrap_server, args.command_config, [], "--command-config"))
        self.admin = AdminClient(conf)

    def _wait(self, future: Any) -> Any:
        return future.result()

    # groups

    def list_groups(self) -> list[Any]:
        """ConsumerGroupListing of every consumer group, sorted by id."""
        result = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s))
        if result.errors and not result.valid:
            raise result.errors[0]
        return sorted(result.valid, key=lambda g: g.group_id)

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g.group_id for g in self.list_groups()]
        return list(dict.fromkeys(self.args.groups))

    def describe_groups(self, groups: Sequence[str]) -> dict[str, Any]:
        """{group: ConsumerGroupDescription, or the KafkaException describing it raised}."""
        if not groups:
            return {}
        futures = self.admin.describe_consumer_groups(list(groups),
                                                      request_timeout=self.timeout_s)
        out: dict[str, Any] = {}
        for group in groups:
            try:
                out[group] = self._wait(futures[group])
            except KafkaException as exc:
                out[group] = exc
        return out

    def committed(self, group: str) -> dict[tuple[str, int], tuple[int | None, int | None]]:
        """{(topic, partition): (committed offset, leader epoch)} of the group."""
        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s)
        answer = self._wait(futures[group])
        out: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        for tp in answer.topic_partitions:
            offset = tp.offset if tp.offset >= 0 else None
            epoch = getattr(tp, "leader_epoch", None)
            out[(tp.topic, tp.partition)] = (offset, epoch if epoch is not None and epoch >= 0
                                             else None)
        return out

    # topics and offsets

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, dict[int, bool]]:
        """{topic: {partition: has a leader}}; a topic that does not exist raises."""
        names = sorted(set(topics))
        if not names:
            return {}
        futures = self.admin.describe_topics(TopicCollection(names),
                                             request_timeout=self.timeout_s)
        out = {}
        for name in names:
            description = self._wait(futures[name])
            out[name] = {p.id: p.leader is not None and p.leader.id >= 0
                         for p in description.partitions}
        return out

    def log_offsets(self, partitions: Iterable[tuple[str, int]], spec: Any
                    ) -> dict[tuple[str, int], int | None]:
        """ListOffsets of each partition; None where the broker did not answer one."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                          request_timeout=self.timeout_s)
        out: dict[tuple[str, int], int | None] = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = self._wait(future).offset
            except KafkaException:
                out[(tp.topic, tp.partition)] = None
        return out

    def close(self) -> None:
        pass  # confluent-kafka's AdminClient has no close; dropping it is enough


# --- describe ----------------------------------------------------------------------------------


def _state_name(description: Any) -> str:
    state = getattr(description, "state", ConsumerGroupState.UNKNOWN)
    return STATE_NAMES.get(state, "Unknown")


def _assignment(member: Any) -> tuple[tuple[str, int], ...]:
    assignment = getattr(member, "assignment", None)
    tps = getattr(assignment, "topic_partitions", None) or []
    return tuple((tp.topic, tp.partition) for tp in tps)


def _target(member: Any) -> tuple[tuple[str, int], ...]:
    target = getattr(member, "target_assignment", None)
    tps = getattr(target, "topic_partitions", None) or []
    return tuple((tp.topic, tp.partition) for tp in tps)


def should_print(group: str, state: str, rows: int) -> bool:
    """ConsumerGroupCommand.shouldPrintMemberState: the notices of a dead, empty or
    rebalancing group; whether its table has rows to print."""
    if state == "Dead":
        print_error(f"Consumer group '{group}' does not exist.")
    elif state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return state != "Dead" and rows > 0


def collect_offsets(service: Service, group: str, description: Any) -> list[OffsetRow]:
    """Rows of the offsets view: partitions of each member (most partitions first), then the
    committed partitions no member holds."""
    committed = service.committed(group)
    members = sorted((m for m in description.members if _assignment(m)),
                     key=lambda m: -len(_assignment(m)))
    assigned = [(m, sorted(_assignment(m))) for m in members]
    held = {tp for _, tps in assigned for tp in tps}
    unassigned = sorted(tp for tp in committed if tp not in held)
    all_tps = held | set(unassigned)
    try:
        leaders = service.topic_partitions({t for t, _ in all_tps})
    except KafkaException:
        leaders = {}
    with_leader = [tp for tp in all_tps if leaders.get(tp[0], {}).get(tp[1], True)]
    ends = service.log_offsets(with_leader, OffsetSpec.latest())

    def row(tp: tuple[str, int], consumer: str, host: str, client: str) -> OffsetRow:
        offset, epoch = committed.get(tp, (None, None))
        return OffsetRow(group, tp[0], tp[1], offset, ends.get(tp), consumer, host, client,
                         epoch)

    rows = [row(tp, m.member_id, m.host, m.client_id) for m, tps in assigned for tp in tps]
    rows += [row(tp, MISSING, MISSING, MISSING) for tp in unassigned]
    return rows


def describe(service: Service, args: argparse.Namespace) -> int:
    """--describe: the offsets (default), members or state view of each group, sorted by id."""
    groups = service.group_ids()
    descriptions = service.describe_groups(groups)
    failed = False
    for group in sorted(descriptions):
        description = descriptions[group]
        if isinstance(description, KafkaException):
            if _error_code(description) == GROUP_ID_NOT_FOUND:
                print_error(f"Consumer group '{group}' does not exist.")
            else:
                print_error(f"Executing consumer group command failed due to "
                            f"{kafka_message(description)}")
            failed = True
            continue
        state = _state_name(description)
        failed |= state == "Dead"
        if args.members:
            members = [MemberRow(group, m.member_id, m.host, m.client_id,
                                 m.group_instance_id or "", _assignment(m), _target(m))
                       for m in description.members]
            should_print(group, state, len(members))
            sys.stdout.write(format_members(members, args.verbose))
        elif args.state is not None:
            if should_print(group, state, 1):
                node = description.coordinator
                coordinator = f"{node.host}:{node.port}  ({node.id})"
                sys.stdout.write(format_state(GroupStateRow(
                    group, coordinator, description.partition_assignor or "", state,
                    len(description.members)), args.verbose))
        else:
            rows = [] if state == "Dead" else collect_offsets(service, group, description)
            if should_print(group, state, len(rows)):
                sys.stdout.write(format_offsets(rows, args.verbose))
    return 1 if failed else 0


def list_groups(service: Service, args: argparse.Namespace) -> int:
    """--list: group ids, or with --state/--type a GROUP [TYPE] [STATE] table, filtered."""
    listings = service.list_groups()
    if args.state is None and args.type is None:
        for listing in listings:
            print(listing.group_id)
        return 0
    states = parse_states(args.state) if args.state else None
    types = parse_types(args.type) if args.type else None
    rows = []
    for listing in listings:
        state = STATE_NAMES.get(getattr(listing, "state", ConsumerGroupState.UNKNOWN), "Unknown")
        type_ = TYPE_NAMES.get(getattr(listing, "type", ConsumerGroupType.UNKNOWN), "Unknown")
        if (states is None or state in states) and (types is None or type_ in types):
            rows.append((listing.group_id, type_, state))
    sys.stdout.write(format_group_list(rows, args.type is not None, args.state is not None))
    return 0


# --- reset offsets -----------------------------------------------------------------------------


Plan = dict[tuple[str, int], int]


class Resetter:
    """GroupOffsetsResetter: the new offsets of one inactive group's partitions."""

    def __init__(self, service: Service, args: argparse.Namespace) -> None:
        self.service = service
        self.args = args
        self._file_plan: dict[str, Plan] | None = None

    def file_plan(self) -> dict[str, Plan]:
        if self._file_plan is None:
            try:
                with open(self.args.from_file, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise CommandFailed(f"{self.args.from_file} ({exc.strerror})") from None
            self._file_plan = parse_reset_plan(text, self.args.groups)
        return self._file_plan

    def partitions_to_reset(self, group: str) -> list[tuple[str, int]]:
        if self.args.all_topics:
            return sorted(self.service.committed(group))
        if self.args.topics:
            explicit = [tp for arg in self.args.topics if ":" in arg
                        for tp in parse_topic_partitions(arg)]
            whole = [arg for arg in self.args.topics if ":" not in arg]
            try:
                described = self.service.topic_partitions(whole)
            except KafkaException as exc:
                raise CommandFailed(_java_error(_error_code(exc), kafka_message(exc))) from None
            return explicit + [(t, p) for t in whole for p in sorted(described[t])]
        return []

    def check_valid(self, partitions: Sequence[tuple[str, int]]) -> None:
        """The partitions exist and have a leader (checkAllTopicPartitionsValid)."""
        try:
            layout = self.service.topic_partitions({t for t, _ in partitions})
        except KafkaException as exc:
            raise CommandFailed(_java_error(_error_code(exc), kafka_message(exc))) from None
        missing = [tp for tp in partitions if tp[1] not in layout.get(tp[0], {})]
        if missing:
            raise CommandFailed('The partitions "' + ",".join(map(tp_name, missing))
                                + '" do not exist')
        leaderless = [tp for tp in partitions if not layout[tp[0]][tp[1]]]
        if leaderless:
            raise CommandFailed('The partitions "' + ",".join(map(tp_name, leaderless))
                                + '" have no leader')

    def offsets_at(self, partitions: Sequence[tuple[str, int]], spec: Any, what: str) -> Plan:
        found = self.service.log_offsets(partitions, spec)
        out: Plan = {}
        for tp in partitions:
            offset = found.get(tp)
            if offset is None:
                raise CommandFailed(f"Error getting {what} offset of topic partition: "
                                    f"{tp_name(tp)}")
            out[tp] = offset
        return out

    def check_range(self, requested: Plan) -> Plan:
        """Offsets past the log end or before its start move to the end or the start, with
        Kafka's warning."""
        starts = self.service.log_offsets(requested, OffsetSpec.earliest())
        ends = self.service.log_offsets(requested, OffsetSpec.latest())
        out: Plan = {}
        for tp, offset in requested.items():
            end, start = ends.get(tp), starts.get(tp)
            if end is not None and offset > end:
                _warn(f"New offset ({offset}) is higher than latest offset for topic partition "
                      f"{tp_name(tp)}. Value will be set to {end}.")
                out[tp] = end
            elif start is not None and offset < start:
                _warn(f"New offset ({offset}) is lower than earliest offset for topic partition "
                      f"{tp_name(tp)}. Value will be set to {start}.")
                out[tp] = start
            else:
                out[tp] = offset
        return out

    def by_timestamp(self, partitions: Sequence[tuple[str, int]], timestamp: int) -> Plan:
        found = self.service.log_offsets(partitions, OffsetSpec.for_timestamp(timestamp))
        out: Plan = {}
        empty = []
        for tp in partitions:
            offset = found.get(tp)
            if offset is None or offset < 0:
                empty.append(tp)
            else:
                out[tp] = offset
        for topic, partition in empty:
            print(f"\nWarn: Partition {partition} from topic {topic} is empty. Falling back to "
                  "latest known offset.")
        out.update(self.offsets_at(empty, OffsetSpec.latest(), "offset by timestamp of"))
        return out

    def plan(self, group: str, partitions: Sequence[tuple[str, int]]) -> Plan | None:
        """The new offsets; None when --from-file has no plan for the group."""
        a = self.args
        self.check_valid(partitions)
        if a.to_offset is not None:
            return self.check_range({tp: a.to_offset for tp in partitions})
        if a.to_earliest:
            return self.offsets_at(partitions, OffsetSpec.earliest(), "starting")
        if a.to_latest:
            return self.offsets_at(partitions, OffsetSpec.latest(), "ending")
        if a.shift_by is not None:
            committed = self.service.committed(group)
            requested: Plan = {}
            for tp in partitions:
                current = committed.get(tp, (None, None))[0]
                if current is None:
                    raise UsageError(f"Cannot shift offset for partition {tp_name(tp)} since "
                                     "there is no current committed offset")
                requested[tp] = current + a.shift_by
            return self.check_range(requested)
        if a.to_datetime is not None:
            return self.by_timestamp(partitions, parse_datetime(a.to_datetime))
        if a.by_duration is not None:
            now_ms = int(time.time() * 1000)
            return self.by_timestamp(partitions, now_ms - parse_duration(a.by_duration))
        if a.from_file is not None:
            plan = self.file_plan().get(group)
            if plan is None:
                print_error(f"No reset plan for group {group} found.")
                return None
            self.check_valid(list(plan))
            return self.check_range(dict(plan))
        committed = self.service.committed(group)  # --to-current
        out: Plan = {}
        for tp in partitions:
            current = committed.get(tp, (None, None))[0]
            if current is not None:
                out[tp] = current
        missing = [tp for tp in partitions if tp not in out]
        out.update(self.offsets_at(missing, OffsetSpec.latest(), "ending"))
        return out


def reset_offsets(service: Service, args: argparse.Namespace) -> int:
    """--reset-offsets: plan (and with --execute, commit) new offsets for each inactive group;
    an active group is refused as Kafka refuses it."""
    if not args.dry_run and not args.execute:
        print(NO_EXECUTE_WARNING, file=sys.stderr)
    groups = service.group_ids()
    descriptions = service.describe_groups(groups)
    resetter = Resetter(service, args)
    plans: dict[str, Plan] = {}
    failed = False
    for group in groups:
        description = descriptions[group]
        if isinstance(description, KafkaException):
            if _error_code(description) != GROUP_ID_NOT_FOUND:
                raise CommandFailed(kafka_message(description))
            state = "Dead"
        else:
            state = _state_name(description)
        if state not in ("Empty", "Dead"):
            print_error(f"Assignments can only be reset if the group '{group}' is inactive, but "
                        f"the current state is {state}.")
            plans[group] = {}
            failed = True
            continue
        plan = resetter.plan(group, resetter.partitions_to_reset(group))
        if plan is None:
            plans[group] = {}
            failed = True
            continue
        if args.execute and plan:
            _commit(service, group, plan)
        plans[group] = plan
    if args.export:
        sys.stdout.write(format_export(plans, len(args.groups) == 1))
    else:
        sys.stdout.write(format_reset_plan(plans))
    return 1 if failed else 0


def _commit(service: Service, group: str, plan: Plan) -> None:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, offset) for (t, p), offset in sorted(plan.items())])
    futures = service.admin.alter_consumer_group_offsets([request],
                                                         request_timeout=service.timeout_s)
    try:
        answer = service._wait(futures[group])
    except KafkaException as exc:
        raise CommandFailed(_java_error(_error_code(exc), kafka_message(exc))) from None
    for tp in answer.topic_partitions:
        if tp.error is not None:
            code = tp.error.code()
            raise CommandFailed(_java_error(code, tp.error.str()))


# --- delete ------------------------------------------------------------------------------------


def delete_groups(service: Service, args: argparse.Namespace) -> int:
    """--delete: DeleteGroups; the groups deleted and the reasons of those that were not."""
    groups = service.group_ids()
    if not groups:
        print("Deletion of requested consumer groups () was successful.")
        return 0
    futures = service.admin.delete_consumer_groups(groups, request_timeout=service.timeout_s)
    deleted, failed = [], []
    for group in groups:
        try:
            service._wait(futures[group])
            deleted.append(group)
        except KafkaException as exc:
            failed.append((group, _java_error(_error_code(exc), kafka_message(exc))))
    quoted = ", ".join(f"'{g}'" for g in deleted)
    if not failed:
        print(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return 0
    print_error("Deletion of some consumer groups failed:")
    for group, error in failed:
        print(f"* Group '{group}' could not be deleted due to: {error}")
    if deleted:
        print(f"\nThese consumer groups were deleted successfully: {quoted}")
    return 1


def delete_offsets(service: Service, args: argparse.Namespace) -> int:
    """--delete-offsets: OffsetDelete of one group's partitions (every partition of a --topic
    given without partitions), with Kafka's summary and per-partition table."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import KafkaError as KafkaPythonError

    from kafka_ext.cli.log_dirs import admin_client

    group: str = args.groups[0]
    results: dict[tuple[str, int], str | None] = {}
    partitions: set[tuple[str, int]] = set()
    for arg in args.topics:
        if ":" in arg:
            partitions.update(parse_topic_partitions(arg))
            continue
        try:
            partitions.update((arg, p) for p in service.topic_partitions([arg])[arg])
        except KafkaException as exc:
            results[(arg, -1)] = _java_error(_error_code(exc), kafka_message(exc))
    top_level: int | None = 0
    if partitions:
        admin = admin_client(args.bootstrap_server, args.command_config)
        try:
            answer = admin.delete_group_offsets(
                group, [KafkaTopicPartition(t, p) for t, p in sorted(partitions)])
        except KafkaPythonError as exc:
            top_level = getattr(exc, "errno", None)
            error = _java_error(top_level, str(exc))
            results.update({tp: error for tp in partitions})
        else:
            for tp, error_class in answer.items():
                code = getattr(error_class, "errno", 0)
                results[(tp.topic, tp.partition)] = None if not code else _java_error(
                    code, getattr(error_class, "__name__", str(code)))
                if code and top_level == 0:
                    top_level = code
        finally:
            admin.close()
    # As Kafka: the summary speaks of the OffsetDelete answer only; a topic that could not be
    # described shows in the table.
    if top_level == 0:
        print(f"Request succeeded for deleting offsets from group {group}.")
    elif top_level in (24, 69, 30, 68):
        print_error(ERRORS[top_level][1])
    elif top_level in (86, 29, 3):
        print_error("Encountered some partition-level error, see the follow-up details.")
    else:
        name = str(top_level)
        if top_level is not None and top_level in ErrorCode._value2member_map_:
            name = ErrorCode(top_level).name
        print_error(f"Encountered some unknown error: {name}")
    sys.stdout.write(format_delete_offsets(results))
    return 0 if all(e is None for e in results.values()) else 1


# --- entry point -------------------------------------------------------------------------------


HANDLERS: dict[str, Callable[[Service, argparse.Namespace], int]] = {
    "list": list_groups,
    "describe": describe,
    "delete": delete_groups,
    "reset_offsets": reset_offsets,
    "delete_offsets": delete_offsets,
}


def run(args: argparse.Namespace) -> int:
    """Execute the one action; 0 on success, 1 when an error was printed."""
    action = check_args(args)
    if action == "list":
        if args.state:
            parse_states(args.state)
        if args.type:
            parse_types(args.type)
    service = Service(args)
    try:
        return HANDLERS[action](service, args)
    except CommandFailed as exc:
        print_error(f"Executing consumer group command failed due to {exc}")
        return 1
    except KafkaException as exc:
        print_error(f"Executing consumer group command failed due to {kafka_message(exc)}")
        return 1
    finally:
        service.close()
