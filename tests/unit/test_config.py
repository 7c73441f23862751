"""Broker and topic configuration: properties syntax, env overrides, validation, DescribeConfigs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_ext.server.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    QuorumVoter,
    describe_broker_configs,
    describe_topic_configs,
    effective_topic_config,
    env_overrides,
    format_config_value,
    load_config,
    parse_properties,
    parse_value,
    topic_config_defaults,
    validate_topic_config,
    validate_topic_configs,
)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "server.properties"
    path.write_text(text, encoding="utf-8")
    return str(path)


def load(tmp_path: Path, text: str = "", env: dict[str, str] | None = None,
         overrides: list[str] | None = None) -> BrokerConfig:
    return load_config(write(tmp_path, f"log.dirs={tmp_path / 'data'}\n" + text), env or {},
                       overrides)


# --- Java properties syntax -------------------------------------------------------------------


def test_properties_accept_equals_colon_and_whitespace_separators() -> None:
    props = parse_properties("a=1\nb: 2\nc 3\n  d  =  4  \ne\t5\n")
    assert props == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "5"}


def test_properties_skip_hash_and_bang_comments_and_blank_lines() -> None:
    props = parse_properties("# comment=1\n   ! other: 2\n\n   \nkey=value\n")
    assert props == {"key": "value"}


def test_properties_join_continuation_lines_dropping_leading_whitespace() -> None:
    props = parse_properties("listeners=PLAINTEXT://a:1,\\\n        SSL://b:2\nnext=x\n")
    assert props == {"listeners": "PLAINTEXT://a:1,SSL://b:2", "next": "x"}


def test_properties_even_backslashes_do_not_continue_a_line() -> None:
    props = parse_properties("path=C:\\\\\nother=1\n")
    assert props == {"path": "C:\\", "other": "1"}


def test_properties_comment_ending_in_backslash_does_not_swallow_next_line() -> None:
    assert parse_properties("# note \\\nkey=value\n") == {"key": "value"}


def test_properties_continued_line_starting_with_hash_is_value_not_comment() -> None:
    assert parse_properties("key=a\\\n  #b\n") == {"key": "a#b"}


def test_properties_unescape_keys_and_values() -> None:
    props = parse_properties("a\\=b\\:c\\ d=tab\\there\\u0041\\q\n")
    assert props == {"a=b:c d": "tab\there" + "A" + "q"}


def test_properties_malformed_unicode_escape_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="uxxxx"):
        parse_properties("key=\\u12G4\n")


def test_properties_later_duplicate_wins_and_crlf_is_a_line_end() -> None:
    assert parse_properties("k=1\r\nk=2\rj=3") == {"k": "2", "j": "3"}


def test_properties_key_without_value_is_empty_string() -> None:
    assert parse_properties("alone\nother=\n") == {"alone": "", "other": ""}


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\" or ch in "=:#!" or (ch == " " and (is_key or i == 0)):
            out.append("\\" + ch)
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\f":
            out.append("\\f")
        else:
            out.append(ch)
    return "".join(out)


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=6))
def test_properties_round_trip_escaped_keys_and_values(props: dict[str, str]) -> None:
    text = "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in props.items())
    assert parse_properties(text) == props


# --- Loading the broker config ------------------------------------------------------------------


def test_defaults_give_embedded_single_node_broker(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, {})
    assert config.node_id == 1
    assert config.process_roles == ("broker", "controller")
    assert config.listeners == (Listener("PLAINTEXT", "localhost", 9092),)
    assert config.advertised_listeners == config.listeners
    assert config.log_dirs == [tmp_path / "kafka-ext-data"]
    assert config.diskless_storage_url == (tmp_path / "kafka-ext-data" / "objects").as_uri()
    assert config.num_partitions == 1 and config.default_replication_factor == 1
    assert config.log_segment_bytes == 1024**3
    assert config.log_retention_ms == 168 * 3_600_000
    assert config.message_max_bytes == 1048588
    assert config.num_replica_move_threads == 1
    assert config.cluster_id_generated and len(config.cluster_id) == 22
    assert config.sources["num.partitions"] is ConfigSource.DEFAULT_CONFIG


def test_every_default_parses_back_to_itself() -> None:
    for name, definition in BROKER_CONFIGS.items():
        text = format_config_value(definition.default)
        if text is None:
            continue
        assert parse_value(name, definition.type, text, definition.validator) == definition.default
    for name, topic_def in TOPIC_CONFIGS.items():
        text = format_config_value(topic_def.default)
        assert text is not None, name
        assert validate_topic_config(name, text) == topic_def.default


def test_file_values_are_typed(tmp_path: Path) -> None:
    config = load(tmp_path, "node.id=7\nnum.partitions = 3\nauto.create.topics.enable=FALSE\n"
                            "log.cleanup.policy=compact, delete\nbroker.rack=r1\n")
    assert config.node_id == 7
    assert config.num_partitions == 3
    assert config.auto_create_topics_enable is False
    assert config.log_cleanup_policy == ("compact", "delete")
    assert config.broker_rack == "r1"
    assert config.values["num.partitions"] == 3
    assert config.sources["num.partitions"] is ConfigSource.STATIC_BROKER_CONFIG


def test_env_variable_maps_to_dotted_key_and_overrides_file(tmp_path: Path) -> None:
    env_dir = tmp_path / "from-env"
    config = load(tmp_path, "num.partitions=3\n",
                  env={"KAFKA_EXT_LOG_DIRS": f"{env_dir},{tmp_path / 'b'}",
                       "KAFKA_EXT_NUM_PARTITIONS": "5", "PATH": "/bin"})
    assert config.log_dirs == [env_dir, tmp_path / "b"]
    assert config.num_partitions == 5
    assert config.num_replica_move_threads == 2


def test_command_line_override_beats_env(tmp_path: Path) -> None:
    config = load(tmp_path, env={"KAFKA_EXT_NUM_PARTITIONS": "5"},
                  overrides=["num.partitions=9"])
    assert config.num_partitions == 9


def test_env_overrides_mapping_lowercases_and_dots() -> None:
    assert env_overrides({"KAFKA_EXT_LOG_RETENTION_MS": "5", "KAFKA_EXT_": "x", "HOME": "/"}) == {
        "log.retention.ms": "5"}


def test_log_dir_is_used_when_log_dirs_absent(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, f"log.dir={tmp_path / 'one'}\n"), {})
    assert config.log_dirs == [tmp_path / "one"]
    assert config.metadata_log_dir == tmp_path / "one"


def test_unknown_key_in_file_names_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'log.dirz'") as info:
        load(tmp_path, "log.dirz=/tmp/x\n")
    assert info.value.key == "log.dirz"


def test_unknown_env_key_names_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KAFKA_EXT_NUM_PARTITION"):
        load(tmp_path, env={"KAFKA_EXT_NUM_PARTITION": "3"})


@pytest.mark.parametrize(("line", "key", "reason"), [
    ("node.id=abc", "node.id", "not a number"),
    ("num.partitions=0", "num.partitions", "at least 1"),
    ("num.partitions=2147483648", "num.partitions", "out of range"),
    ("num.partitions=1_000", "num.partitions", "not a number"),
    ("auto.create.topics.enable=yes", "auto.create.topics.enable", "true or false"),
    ("listeners=PLAINTEXT:/localhost:9092", "listeners", "NAME://host:port"),
    ("listeners=PLAINTEXT://localhost:70000", "listeners", "out of range"),
    ("compression.type=brotli", "compression.type", "one of"),
    ("log.cleanup.policy=erase", "log.cleanup.policy", "'erase'"),
    ("process.roles=broker,worker", "process.roles", "'worker'"),
    ("diskless.storage.url=ftp://x", "diskless.storage.url", "file://"),
    ("log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio", "at most 1"),
])
def test_malformed_value_names_key_and_value(tmp_path: Path, line: str, key: str,
                                             reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, line + "\n")
    message = str(info.value)
    assert key in message and repr(line.split("=", 1)[1]) in message and reason in message
    assert info.value.key == key


def test_retention_prefers_ms_then_minutes_then_hours(tmp_path: Path) -> None:
    assert load(tmp_path, "log.retention.hours=2\n").log_retention_ms == 7_200_000
    assert load(tmp_path, "log.retention.hours=2\nlog.retention.minutes=3\n").log_retention_ms == 180_000
    config = load(tmp_path, "log.retention.minutes=3\nlog.retention.ms=42\n")
    assert config.log_retention_ms == 42
    assert load(tmp_path, "log.retention.hours=-1\n").log_retention_ms == -1


def test_roll_and_flush_synonyms_resolve(tmp_path: Path) -> None:
    config = load(tmp_path, "log.roll.hours=1\nlog.flush.scheduler.interval.ms=500\n")
    assert config.log_roll_ms == 3_600_000
    assert config.log_flush_interval_ms == 500
    assert load(tmp_path, "log.flush.interval.ms=20\n").log_flush_interval_ms == 20


def test_listeners_parse_names_hosts_ports_and_advertise_client_listeners(tmp_path: Path) -> None:
    config = load(tmp_path, "listeners=plaintext://127.0.0.1:9092,CONTROLLER://[::1]:9093,"
                            "SSL://:9094\ncontroller.listener.names=CONTROLLER\n")
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),
                                Listener("CONTROLLER", "::1", 9093), Listener("SSL", "", 9094))
    assert [lst.name for lst in config.advertised_listeners] == ["PLAINTEXT", "SSL"]
    assert config.advertised_listeners[1].host != ""
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.security_protocol("ssl") == "SSL"
    assert config.security_protocol("CONTROLLER") == "PLAINTEXT"


def test_explicit_advertised_listener_may_not_be_wildcard(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="advertised.listeners"):
        load(tmp_path, "listeners=PLAINTEXT://0.0.0.0:9092\n"
                       "advertised.listeners=PLAINTEXT://0.0.0.0:9092\n")


def test_listener_missing_from_protocol_map_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="INTERNAL is not in listener.security.protocol.map"):
        load(tmp_path, "listeners=INTERNAL://localhost:9092\n")


def test_duplicate_listener_port_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="same port"):
        load(tmp_path, "listeners=PLAINTEXT://a:9092,SSL://b:9092\n")


def test_quorum_voters_parse_and_must_include_controller_node(tmp_path: Path) -> None:
    base = ("listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n"
            "controller.quorum.voters=1@h1:9093,2@h2:9093\n")
    config = load(tmp_path, base + "node.id=1\n")
    assert config.controller_quorum_voters == (QuorumVoter(1, "h1", 9093), QuorumVoter(2, "h2", 9093))
    with pytest.raises(ConfigError, match="not one of the voters"):
        load(tmp_path, base + "node.id=3\n")


def test_broker_only_node_needs_voters_and_controller_listener_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        load(tmp_path, "process.roles=broker\n")
    config = load(tmp_path, "process.roles=broker\ncontroller.quorum.voters=1@c:9093\n"
                            "controller.listener.names=CONTROLLER\nnode.id=4\n")
    assert config.is_broker and not config.is_controller


def test_configured_cluster_id_is_kept(tmp_path: Path) -> None:
    config = load(tmp_path, "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    assert config.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk" and not config.cluster_id_generated


def test_listener_prefixed_keys_pass_through(tmp_path: Path) -> None:
    config = load(tmp_path, "listener.name.sasl_ssl.plain.sasl.jaas.config=x\n")
    assert config.listener_configs == {"listener.name.sasl_ssl.plain.sasl.jaas.config": "x"}


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.properties"), {})


def test_override_without_equals_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load(tmp_path, overrides=["num.partitions"])


# --- Topic configs ------------------------------------------------------------------------------


def test_topic_config_validation_normalises_values() -> None:
    assert validate_topic_config("retention.ms", " 1000 ") == 1000
    assert validate_topic_config("cleanup.policy", "compact,delete") == ("compact", "delete")
    assert validate_topic_config("diskless.enable", "TRUE") is True
    assert validate_topic_config("min.cleanable.dirty.ratio", "0.25") == 0.25
    assert format_config_value(validate_topic_config("cleanup.policy", "compact, delete")) == \
        "compact,delete"


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("retention.ms", "soon", "not a number"),
    ("retention.ms", "-2", "at least -1"),
    ("segment.bytes", "9999999999", "out of range"),
    ("cleanup.policy", "forever", "'forever'"),
    ("compression.type", "brotli", "one of"),
    ("message.timestamp.type", "createtime", "one of"),
    ("min.insync.replicas", "0", "at least 1"),
    ("preallocate", "1", "true or false"),
])
def test_topic_config_validation_rejects_bad_values(name: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_config(name, value)
    assert name in str(info.value) and reason in str(info.value) and repr(value) in str(info.value)


def test_unknown_and_null_topic_configs_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown topic configuration 'retention.hours'"):
        validate_topic_config("retention.hours", "1")
    with pytest.raises(ConfigError, match="message.downconversion.enable"):
        validate_topic_config("message.downconversion.enable", "true")
    with pytest.raises(ConfigError, match="null"):
        validate_topic_config("retention.ms", None)


def test_compaction_lag_bounds_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_topic_defaults_derive_from_broker_settings(tmp_path: Path) -> None:
    config = load(tmp_path, "log.retention.hours=1\nmessage.max.bytes=2000\nlog.roll.ms=60000\n"
                            "log.cleanup.policy=compact\n")
    defaults = topic_config_defaults(config)
    assert defaults["retention.ms"] == 3_600_000
    assert defaults["max.message.bytes"] == 2000
    assert defaults["segment.ms"] == 60000
    assert defaults["cleanup.policy"] == ("compact",)
    assert defaults["diskless.enable"] is False
    merged = effective_topic_config(config, {"retention.ms": "5"})
    assert merged["retention.ms"] == 5 and merged["max.message.bytes"] == 2000


# --- DescribeConfigs ----------------------------------------------------------------------------


def test_wire_enum_numbers_match_kafka() -> None:
    assert [ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
            ConfigSource.DEFAULT_CONFIG] == [1, 2, 3, 4, 5]
    assert [ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT,
            ConfigType.LONG, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS,
            ConfigType.PASSWORD] == list(range(1, 10))


def test_describe_topic_override_lists_synonyms_in_precedence_order(tmp_path: Path) -> None:
    config = load(tmp_path, "log.retention.minutes=30\n")
    [entry] = describe_topic_configs(config, {"retention.ms": "1000"}, ["retention.ms"])
    assert entry.value == "1000"
    assert entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.minutes", "30", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entry.config_type is ConfigType.LONG and not entry.read_only
    assert entry.documentation


def test_describe_topic_without_override_reports_broker_source(tmp_path: Path) -> None:
    config = load(tmp_path, "log.segment.bytes=1048576\n")
    entries = {e.name: e for e in describe_topic_configs(config, {})}
    assert set(entries) == set(TOPIC_CONFIGS)
    assert entries["segment.bytes"].value == "1048576"
    assert entries["segment.bytes"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["flush.messages"].source is ConfigSource.DEFAULT_CONFIG
    assert entries["flush.messages"].is_default
    assert entries["diskless.enable"].value == "false" and entries["diskless.enable"].read_only


def test_describe_broker_hides_sensitive_values_and_skips_unknown_names(tmp_path: Path) -> None:
    config = load(tmp_path, "ssl.keystore.password=secret\nnum.partitions=4\n")
    entries = {e.name: e for e in describe_broker_configs(
        config, ["ssl.keystore.password", "num.partitions", "no.such.key"])}
    assert set(entries) == {"ssl.keystore.password", "num.partitions"}
    secret = entries["ssl.keystore.password"]
    assert secret.value is None and secret.is_sensitive
    assert secret.source is ConfigSource.STATIC_BROKER_CONFIG
    assert all(s.value is None for s in secret.synonyms)
    partitions = entries["num.partitions"]
    assert partitions.value == "4" and partitions.read_only
    assert partitions.config_type is ConfigType.INT


def test_describe_broker_retention_shows_effective_ms_with_unit_synonyms(tmp_path: Path) -> None:
    config = load(tmp_path, "log.retention.hours=2\n")
    [entry] = describe_broker_configs(config, ["log.retention.ms"])
    assert entry.value == "7200000"
    assert entry.source is ConfigSource.STATIC_BROKER_CONFIG
    assert [(s.name, s.value) for s in entry.synonyms] == [("log.retention.hours", "2")]


def test_a_request_budget_below_the_largest_request_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        load(tmp_path, "queued.max.request.bytes=1000\nsocket.request.max.bytes=2000\n")
    assert load(tmp_path, "queued.max.request.bytes=-1\n").queued_max_request_bytes == -1


def test_malformed_per_ip_connection_overrides_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        load(tmp_path, "max.connections.per.ip.overrides=10.0.0.1\n")
