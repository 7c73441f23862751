"""`storage format`'s rules, the files it writes, and the start-up identity checks."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kafka_ext.storage.checkpoints import MetaProperties, kafka_uuid_to_str
from kafka_ext.storage.formatter import (
    BOOTSTRAP_CHECKPOINT,
    DynamicVoter,
    FormatError,
    FormatRequest,
    LogDirIdentityError,
    StorageLayout,
    check_dir_identity,
    format_storage,
    formatted_cluster_id,
    parse_cluster_id,
    parse_features,
    parse_initial_controllers,
    parse_release_version,
    random_uuid,
    read_bootstrap_records,
    read_bootstrap_voters,
    storage_info,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def layout(tmp_path: Path, dirs: int = 2, node_id: int = 1, controller: bool = True,
           metadata: int = 0) -> StorageLayout:
    log_dirs = tuple(tmp_path / f"d{i}" for i in range(dirs))
    return StorageLayout(log_dirs, log_dirs[metadata], node_id, controller)


def test_random_uuid_is_22_url_safe_base64_characters_never_starting_with_dash() -> None:
    for _ in range(200):
        text = random_uuid()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16
        assert parse_cluster_id(text) == text


@pytest.mark.parametrize("bad", ["", "abc", "MkU3OEVBNTcwNTJENDM2Q", "MkU3OEVBNTcwNTJENDM2Qk!",
                                 "not a uuid at all, no"])
def test_cluster_id_must_be_a_base64_uuid(bad: str) -> None:
    with pytest.raises(FormatError, match="does not appear to be a valid UUID"):
        parse_cluster_id(bad)


def test_format_writes_meta_properties_and_bootstrap_checkpoint_in_every_dir(
        tmp_path: Path) -> None:
    lines = format_storage(layout(tmp_path, 3), FormatRequest(CLUSTER))
    metas = [MetaProperties.read(tmp_path / f"d{i}") for i in range(3)]
    assert all(m is not None and m.cluster_id == CLUSTER and m.node_id == 1 for m in metas)
    assert len({m.directory_id for m in metas if m is not None}) == 3
    text = (tmp_path / "d0" / "meta.properties").read_text()
    assert "version=1\n" in text and f"cluster.id={CLUSTER}\n" in text and "node.id=1\n" in text
    assert lines[0] == f"Formatting metadata directory {tmp_path / 'd0'} with metadata.version 4.0-IV3."
    assert lines[1].startswith("Formatting data directory")
    records = read_bootstrap_records(tmp_path / "d1")
    assert records is not None
    assert [(r.name, r.feature_level) for r in records] == [("metadata.version", 25)]


def test_format_records_the_release_version_and_features(tmp_path: Path) -> None:
    request = FormatRequest(CLUSTER, parse_release_version("3.9")[0],
                            parse_features(["group.version=1", "transaction.version=2"]))
    format_storage(layout(tmp_path, 1), request)
    records = read_bootstrap_records(tmp_path / "d0")
    assert records is not None
    assert [(r.name, r.feature_level) for r in records] == [
        ("metadata.version", 21), ("group.version", 1), ("transaction.version", 2)]


def test_formatting_a_formatted_dir_fails_unless_ignore_formatted(tmp_path: Path) -> None:
    format_storage(layout(tmp_path, 1), FormatRequest(CLUSTER))
    before = (tmp_path / "d0" / "meta.properties").read_text()
    with pytest.raises(FormatError, match=r"d0 is already formatted. Use --ignore-formatted"):
        format_storage(layout(tmp_path, 2), FormatRequest(CLUSTER))
    assert not (tmp_path / "d1").exists()  # nothing written when the command fails
    lines = format_storage(layout(tmp_path, 2), FormatRequest(CLUSTER, ignore_formatted=True))
    assert lines == [f"Formatting data directory {tmp_path / 'd1'} with metadata.version 4.0-IV3."]
    assert (tmp_path / "d0" / "meta.properties").read_text() == before
    assert format_storage(layout(tmp_path, 2), FormatRequest(CLUSTER, ignore_formatted=True)) == [
        "All of the log directories are already formatted."]


def test_metadata_log_dir_apart_from_log_dirs_is_formatted_too(tmp_path: Path) -> None:
    apart = StorageLayout((tmp_path / "d0",), tmp_path / "meta", 3, True)
    format_storage(apart, FormatRequest(CLUSTER))
    meta = MetaProperties.read(tmp_path / "meta")
    assert meta is not None and meta.node_id == 3


def test_release_versions_map_to_kafkas_feature_levels() -> None:
    assert parse_release_version("3.9") == ("3.9-IV0", 21)
    assert parse_release_version("4.0") == ("4.0-IV3", 25)
    assert parse_release_version("3.7-IV2") == ("3.7-IV2", 17)
    with pytest.raises(FormatError, match="Unknown release version '2.8'"):
        parse_release_version("2.8")


@pytest.mark.parametrize(("entry", "match"), [
    ("metadata.version=20", "Use --release-version"),
    ("streams.version=1", "Unsupported feature: streams.version"),
    ("share.version=2", "Unsupported level 2 for feature share.version"),
    ("kraft.version=2", "Unsupported level 2 for feature kraft.version"),
    ("group.version", "FEATURE=LEVEL"),
])
def test_bad_features_are_refused(entry: str, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        parse_features([entry])


def test_standalone_voters_go_to_the_metadata_snapshot_with_the_voters_directory_id(
        tmp_path: Path) -> None:
    voters = parse_initial_controllers(
        "1@c1:9093:MkU3OEVBNTcwNTJENDM2Qk,2@[::1]:9094:OkkLiO2dQ9-w28R9nTt1Xw")
    assert voters[1] == DynamicVoter(2, "::1", 9094, voters[1].directory_id)
    assert str(voters[1]) == "2@[::1]:9094:OkkLiO2dQ9-w28R9nTt1Xw"
    lines = format_storage(layout(tmp_path, 2), FormatRequest(
        CLUSTER, initial_controllers=voters, controller_listener_name="CONTROLLER"))
    assert lines[0].startswith("Formatting dynamic metadata voter directory")
    assert read_bootstrap_voters(tmp_path / "d0") == voters
    assert read_bootstrap_voters(tmp_path / "d1") is None
    meta = MetaProperties.read(tmp_path / "d0")
    assert meta is not None and meta.directory_id == voters[0].directory_id


def test_kraft_version_must_match_the_quorum_kind(tmp_path: Path) -> None:
    voters = parse_initial_controllers("1@c1:9093:MkU3OEVBNTcwNTJENDM2Qk")
    with pytest.raises(FormatError, match="Cannot set kraft.version to 0"):
        format_storage(layout(tmp_path), FormatRequest(CLUSTER, features={"kraft.version": 0},
                                                       initial_controllers=voters))
    with pytest.raises(FormatError, match="Cannot set kraft.version to 1"):
        format_storage(layout(tmp_path), FormatRequest(CLUSTER, features={"kraft.version": 1}))


@pytest.mark.parametrize("bad", ["1@c1:9093", "x@c1:9093:MkU3OEVBNTcwNTJENDM2Qk",
                                 "1@c1:9093:MkU3OEVBNTcwNTJENDM2Qk,1@c2:9093:OkkLiO2dQ9-w28R9nTt1Xw"])
def test_malformed_initial_controllers_are_refused(bad: str) -> None:
    with pytest.raises(FormatError, match="initial-controllers"):
        parse_initial_controllers(bad)


def test_unformatted_metadata_dir_is_refused_naming_the_dir_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(LogDirIdentityError) as err:
        formatted_cluster_id(layout(tmp_path), "/etc/kafka/server.properties")
    assert str(tmp_path / "d0") in str(err.value)
    assert "kafka-ext storage format -t" in str(err.value)
    assert "-c /etc/kafka/server.properties" in str(err.value)
    format_storage(layout(tmp_path, 1), FormatRequest(CLUSTER))
    assert formatted_cluster_id(layout(tmp_path), None) == CLUSTER


def test_dir_of_another_cluster_or_node_is_refused(tmp_path: Path) -> None:
    format_storage(layout(tmp_path, 1), FormatRequest(CLUSTER))
    with pytest.raises(LogDirIdentityError, match=r"d0 belongs to cluster 'MkU3OEVBNTcwNTJENDM2Qk'"):
        check_dir_identity(tmp_path / "d0", 1, "OkkLiO2dQ9-w28R9nTt1Xw", ())
    with pytest.raises(LogDirIdentityError, match="belongs to node 1, not node 2"):
        check_dir_identity(tmp_path / "d0", 2, CLUSTER, ())
    directory_id = check_dir_identity(tmp_path / "d0", 1, CLUSTER, ())
    with pytest.raises(LogDirIdentityError, match="same directory.id"):
        check_dir_identity(tmp_path / "d0", 1, CLUSTER, [directory_id])


def test_empty_dir_gets_meta_properties_at_start_like_a_new_jbod_disk(tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    directory_id = check_dir_identity(tmp_path / "new", 5, CLUSTER, ())
    assert MetaProperties.read(tmp_path / "new") == MetaProperties(5, CLUSTER, directory_id)


def test_storage_info_shows_metadata_and_problems(tmp_path: Path) -> None:
    nodes = layout(tmp_path, 2)
    format_storage(StorageLayout((tmp_path / "d0",), tmp_path / "d0", 1, True),
                   FormatRequest(CLUSTER))
    lines, problems = storage_info(nodes)
    meta = MetaProperties.read(tmp_path / "d0")
    assert meta is not None
    assert problems
    assert lines[:3] == ["Found log directories:", f"  {tmp_path / 'd0'}", f"  {tmp_path / 'd1'}"]
    assert (f"Found metadata: {{cluster.id={CLUSTER}, directory.id="
            f"{kafka_uuid_to_str(meta.directory_id)}, node.id=1, version=1}}") in lines
    assert f"  {tmp_path / 'd1'} does not exist" in lines
    format_storage(nodes, FormatRequest(CLUSTER, ignore_formatted=True))
    assert not storage_info(nodes)[1]


def test_bootstrap_checkpoint_is_absent_for_dirs_formatted_before_it_existed(
        tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    assert read_bootstrap_records(tmp_path / "old") is None
    assert not (tmp_path / "old" / BOOTSTRAP_CHECKPOINT).exists()
