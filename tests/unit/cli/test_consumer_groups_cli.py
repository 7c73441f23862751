"""`kafka-ext consumer-groups`: kafka-consumer-groups.sh's argument checks and table layouts,
without a broker (the tool against a broker is tests/integration/test_consumer_groups_tool.py)."""

from __future__ import annotations

import pytest

from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.consumer_groups import (
    GroupStateRow,
    MemberRow,
    OffsetRow,
    check_args,
    format_delete_offsets,
    format_export,
    format_group_list,
    format_members,
    format_offsets,
    format_reset_plan,
    format_state,
    parse_datetime,
    parse_duration,
    parse_reset_plan,
    parse_states,
    parse_topic_partitions,
)
from kafka_ext.cli.main import build_parser


def args_of(*flags: str):
    return build_parser().parse_args(["consumer-groups", "--bootstrap-server", "b:9092", *flags])


def test_offsets_table_has_kafkas_columns_and_widths() -> None:
    rows = [OffsetRow("g", "orders", 0, 4, 10, "consumer-1-abc", "/127.0.0.1", "consumer-1"),
            OffsetRow("g", "orders", 2, None, 7)]
    assert format_offsets(rows) == (
        "\n"
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG            "
        " CONSUMER-ID     HOST            CLIENT-ID\n"
        "g               orders          0          4               10              6              "
        " consumer-1-abc  /127.0.0.1      consumer-1\n"
        "g               orders          2          -               7               -              "
        " -               -               -\n")


def test_offsets_columns_grow_with_long_names_and_verbose_adds_leader_epoch() -> None:
    rows = [OffsetRow("a-rather-long-group", "t", 1, 5, 5, leader_epoch=3)]
    text = format_offsets(rows, verbose=True)
    header, row = text.strip("\n").split("\n")
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                              "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert row.split() == ["a-rather-long-group", "t", "1", "3", "5", "5", "0", "-", "-", "-"]
    assert header.index("TOPIC") == len("a-rather-long-group") + 1


def test_lag_is_unknown_without_a_committed_offset_or_log_end() -> None:
    assert OffsetRow("g", "t", 0, 3, 10).lag == 7
    assert OffsetRow("g", "t", 0, None, 10).lag is None
    assert OffsetRow("g", "t", 0, -1, 10).lag is None
    assert OffsetRow("g", "t", 0, 3, None).lag is None


def test_members_table_with_trailing_padding_and_verbose_assignment() -> None:
    rows = [MemberRow("g", "m-1", "/10.0.0.1", "c1", "", (("t", 2), ("t", 0), ("u", 1)))]
    assert format_members(rows) == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"
        "g               m-1             /10.0.0.1       c1              3               \n")
    verbose = format_members(rows, verbose=True).split("\n")
    assert verbose[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                  "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                  "TARGET-ASSIGNMENT"]
    assert verbose[2].split() == ["g", "m-1", "/10.0.0.1", "c1", "3", "-", "t:0,2;u:1", "-", "-"]


def test_members_table_shows_group_instance_id_only_when_a_member_has_one() -> None:
    rows = [MemberRow("g", "m-1", "h", "c", "static-1", ()), MemberRow("g", "m-2", "h", "c", "", ())]
    lines = format_members(rows).split("\n")
    assert lines[1].split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                                "#PARTITIONS"]
    assert lines[2].split() == ["g", "m-1", "static-1", "h", "c", "0"]


def test_an_empty_group_still_gets_the_members_header() -> None:
    assert format_members([]) == ("\nGROUP           CONSUMER-ID     HOST            CLIENT-ID  "
                                  "     #PARTITIONS     \n")


def test_state_table() -> None:
    row = GroupStateRow("g", "localhost:9092  (1)", "range", "Stable", 2)
    assert format_state(row) == (
        "\nGROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "#MEMBERS\n"
        "g               localhost:9092  (1)       range                Stable               2\n")
    assert format_state(GroupStateRow("g", "h:1  (1)", "", "Empty", 0)).split("\n")[2].split() \
        == ["g", "h:1", "(1)", "-", "Empty", "0"]


def test_list_with_state_and_type() -> None:
    text = format_group_list([("g1", "Classic", "Stable")], include_type=True, include_state=True)
    assert text == ("GROUP                     TYPE                 STATE               \n"
                    "g1                        Classic              Stable              \n")
    assert format_group_list([("g1", "Classic", "Empty")], False, True).split("\n")[0] == \
        "GROUP                     STATE               "


def test_reset_plan_table_and_the_header_of_a_refused_group() -> None:
    plan = {"g": {("t", 1): 5, ("t", 0): 7}}
    assert format_reset_plan(plan) == (
        "\nGROUP           TOPIC           PARTITION  NEW-OFFSET\n"
        "g               t               0          7\n"
        "g               t               1          5\n")
    assert format_reset_plan({"g": {}}) == (
        "\nGROUP           TOPIC           PARTITION  NEW-OFFSET\n")
    assert format_reset_plan({}) == "\n"


def test_export_csv_round_trips_through_from_file() -> None:
    plan = {"g": {("t", 0): 7, ("t", 1): 5}}
    single = format_export(plan, single_group=True)
    assert single == "t,0,7\nt,1,5\n\n"
    assert parse_reset_plan(single, ["g"]) == plan
    multi = format_export({**plan, "h": {("u", 2): 1}}, single_group=False)
    assert multi == "g,t,0,7\ng,t,1,5\nh,u,2,1\n\n"
    assert parse_reset_plan(multi, ["g", "h"]) == {**plan, "h": {("u", 2): 1}}


def test_delete_offsets_table_sorts_as_kafka_and_marks_unknown_partitions() -> None:
    text = format_delete_offsets({("t", 1): None, ("t", 0): "boom", ("x", -1): "missing"})
    assert text == (
        "\nTOPIC           PARTITION  STATUS         \n"
        "t               0          Error: boom    \n"
        "t               1          Successful     \n"
        "x               -          Error: missing \n")


def test_topic_partition_scopes() -> None:
    assert parse_topic_partitions("t:0,2") == [("t", 0), ("t", 2)]
    with pytest.raises(UsageError, match="Invalid partition 'x'"):
        parse_topic_partitions("t:0,x")
    with pytest.raises(UsageError, match="expected topic name and partitions"):
        parse_topic_partitions("a:b:c")


def test_datetimes_are_utc_unless_zoned() -> None:
    assert parse_datetime("2020-09-13T12:26:40.000") == 1_600_000_000_000
    assert parse_datetime("2020-09-13T12:26:40.005Z") == 1_600_000_000_005
    assert parse_datetime("2020-09-13T14:26:40.000+02:00") == 1_600_000_000_000
    assert parse_datetime("2020-09-13T10:26:40-0200") == 1_600_000_000_000
    for bad in ("2020-09-13", "2020-13-13T00:00:00.000", "yesterday T"):
        with pytest.raises(UsageError):
            parse_datetime(bad)


def test_durations_as_java_reads_them() -> None:
    assert parse_duration("PT1H") == 3_600_000
    assert parse_duration("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4_500
    assert parse_duration("-PT10S") == -10_000
    assert parse_duration("pt0.001s") == 1
    for bad in ("P", "PT", "1H", "P1H", "PT1D"):
        with pytest.raises(UsageError):
            parse_duration(bad)


def test_state_filter_names() -> None:
    assert parse_states("stable, EMPTY") == {"Stable", "Empty"}
    with pytest.raises(UsageError, match="Invalid state list 'nope'"):
        parse_states("nope")


@pytest.mark.parametrize(("flags", "message"), [
    (["--describe"], "takes one of these options"),
    (["--list", "--describe", "--group", "g"], "exactly one action"),
    ([], "exactly one action"),
    (["--describe", "--group", "g", "--members", "--state"], "at most one of these"),
    (["--describe", "--group", "g", "--state", "stable"], "does not take a value"),
    (["--delete", "--group", "g", "--topic", "t"], "topic-specific offset deletion"),
    (["--delete-offsets", "--group", "g"], "takes the following options"),
    (["--reset-offsets", "--group", "g", "--all-topics"], "requires one of the following"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "One of the reset scopes"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
     "can't be used with option"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run",
      "--execute"], "only accepts one of"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"],
     "cannot be parsed to a Duration"),
    (["--list", "--group", "g"], "can't be used with option \"[list]\""),
    (["--describe", "--group", "g", "--all-groups"], "can't be used with option"),
    (["--list", "--execute"], "can only be used with [reset-offsets]"),
])
def test_usage_errors(flags: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_args(args_of(*flags))


def test_valid_combinations_name_their_action() -> None:
    assert check_args(args_of("--list", "--state")) == "list"
    assert check_args(args_of("--describe", "--all-groups", "--members", "--verbose")) \
        == "describe"
    assert check_args(args_of("--reset-offsets", "--group", "g", "--topic", "t:0",
                              "--shift-by", "-2", "--execute")) == "reset_offsets"
    assert check_args(args_of("--reset-offsets", "--group", "g", "--from-file", "f.csv")) \
        == "reset_offsets"
    assert check_args(args_of("--delete-offsets", "--group", "g", "--topic", "t")) \
        == "delete_offsets"
