"""Share groups' group configs (Kafka's GroupConfig, KIP-932 and KIP-1240): per-group overrides.

A group's configs are ConfigRecords of resource type GROUP (32) in the metadata log, set with
IncrementalAlterConfigs/AlterConfigs and shown by DescribeConfigs (server/admin.py). A key a
group does not set falls back to the broker's `group.share.*` setting, and a numeric override
must stay within the broker's `group.share.min.*`/`group.share.max.*` bounds, as Kafka's
controller checks. `share_group_configs` is the read API of the share-partition leader and the
group coordinator: it resolves a group's effective values once per metadata image.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ext.protocol.records import READ_COMMITTED, READ_UNCOMMITTED
from kafka_ext.server.config import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
)

GROUP_RESOURCE = 32  # ConfigResource type GROUP (KIP-848)

AUTO_OFFSET_RESET_LATEST = "latest"
AUTO_OFFSET_RESET_EARLIEST = "earliest"
AUTO_OFFSET_RESET_BY_DURATION = "by_duration"
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

# java.time.Duration.parse's ISO-8601 form (PnDTnHnMn.nS), which Kafka's by_duration takes.
_DURATION_RE = re.compile(
    r"^([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(?:T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?$",
    re.IGNORECASE)
_MS_PER = (86_400_000, 3_600_000, 60_000, 1000)


def parse_iso8601_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it; ValueError when
    it is not one ("PT" alone has no component) or is negative (Kafka refuses those)."""
    match = _DURATION_RE.match(text)
    if match is None or text.upper().endswith("T") or not any(match.groups()[1:5]):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    sign, *parts, fraction = match.groups()
    total = sum(int(p) * unit for p, unit in zip(parts, _MS_PER, strict=True) if p)
    if fraction:
        millis = int((fraction + "000")[:3])
        total += -millis if parts[3] and parts[3].startswith("-") else millis
    if sign == "-":
        total = -total
    if total < 0:
        raise ValueError(f"{text!r} is a negative duration")
    return total


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """share.auto.offset.reset: "latest", "earliest", or "by_duration" with its duration (the
    share-partition starts at the first record newer than now minus the duration)."""

    strategy: str
    duration_ms: int = -1

    @classmethod
    def parse(cls, text: str) -> AutoOffsetReset:
        lowered = text.strip().lower()
        if lowered in (AUTO_OFFSET_RESET_LATEST, AUTO_OFFSET_RESET_EARLIEST):
            return cls(lowered)
        prefix = AUTO_OFFSET_RESET_BY_DURATION + ":"
        if lowered.startswith(prefix):
            return cls(AUTO_OFFSET_RESET_BY_DURATION,
                       parse_iso8601_duration_ms(text.strip()[len(prefix):]))
        raise ValueError(f"Invalid value `{text}` for configuration share.auto.offset.reset. "
                         "The value must be either 'earliest', 'latest' or of the format "
                         "'by_duration:<PnDTnHnMn.nS>'.")


def _auto_offset_reset(text: str) -> str:
    AutoOffsetReset.parse(text)
    return text


def _isolation_level(text: str) -> str:
    if text not in ISOLATION_LEVELS:
        raise ValueError(f"String must be one of: {', '.join(sorted(ISOLATION_LEVELS))}")
    return text


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One group config: its type, the broker setting it defaults to and the broker settings
    bounding it (None: only `at_least`), or the check of a string value."""

    name: str
    type: ConfigType
    broker_default: str
    doc: str
    at_least: int = 1
    bounds: tuple[str, str] | None = None
    check: Callable[[str], str] | None = None


_DEFS = (
    GroupConfigDef("share.session.timeout.ms", ConfigType.INT, "group.share.session.timeout.ms",
                   "The timeout to detect client failures when using the share group protocol.",
                   bounds=("group.share.min.session.timeout.ms",
                           "group.share.max.session.timeout.ms")),
    GroupConfigDef("share.heartbeat.interval.ms", ConfigType.INT,
                   "group.share.heartbeat.interval.ms",
                   "The heartbeat interval given to the members of a share group.",
                   bounds=("group.share.min.heartbeat.interval.ms",
                           "group.share.max.heartbeat.interval.ms")),
    GroupConfigDef("share.record.lock.duration.ms", ConfigType.INT,
                   "group.share.record.lock.duration.ms",
                   "The record acquisition lock duration in milliseconds for share groups.",
                   at_least=1000, bounds=("group.share.min.record.lock.duration.ms",
                                          "group.share.max.record.lock.duration.ms")),
    GroupConfigDef("share.delivery.count.limit", ConfigType.INT,
                   "group.share.delivery.count.limit",
                   "The maximum number of delivery attempts for a record delivered to a share "
                   "group.", at_least=2, bounds=("group.share.min.delivery.count.limit",
                                                 "group.share.max.delivery.count.limit")),
    GroupConfigDef("share.partition.max.record.locks", ConfigType.INT,
                   "group.share.partition.max.record.locks",
                   "Share-group record lock limit per share-partition.", at_least=100,
                   bounds=("group.share.min.partition.max.record.locks",
                           "group.share.max.partition.max.record.locks")),
    GroupConfigDef("share.auto.offset.reset", ConfigType.STRING, "",
                   "The strategy to initialize the share-partition start offset: earliest, "
                   "latest, or by_duration:<ISO-8601 duration> (records newer than now minus "
                   "the duration).", check=_auto_offset_reset),
    GroupConfigDef("share.isolation.level", ConfigType.STRING, "",
                   "Controls how to read records written transactionally: read_committed "
                   "delivers only committed transactional records, read_uncommitted all.",
                   check=_isolation_level),
)
GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in _DEFS}
# Strings without a broker setting: Kafka's own defaults.
_STRING_DEFAULTS = {"share.auto.offset.reset": AUTO_OFFSET_RESET_LATEST,
                    "share.isolation.level": "read_uncommitted"}


def group_config_default(name: str, broker_values: Mapping[str, object]) -> str:
    """The value a group without an override of `name` has, as text."""
    definition = GROUP_CONFIGS[name]
    if definition.type is ConfigType.STRING:
        return _STRING_DEFAULTS[name]
    return str(broker_values[definition.broker_default])


def validate_group_configs(configs: Mapping[str, str], broker_values: Mapping[str, object]
                           ) -> dict[str, str]:
    """A group's whole set of overrides, checked as Kafka's GroupConfig.validate does (names,
    types, bounds from the broker's settings, session timeout above the heartbeat interval);
    the values normalized. Raises ConfigError naming the first offending key."""
    out: dict[str, str] = {}
    for name, text in configs.items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown group config name: {name}")
        if definition.type is ConfigType.STRING:
            assert definition.check is not None
            try:
                out[name] = definition.check(text)
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text} for configuration {name}: {exc}") from None
            continue
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"Invalid value {text} for configuration {name}: Not a number of "
                              "type INT") from None
        if not -(2**31) <= value < 2**31:
            raise ConfigError(f"Invalid value {text} for configuration {name}: Not a number of "
                              "type INT")
        if value < definition.at_least:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be "
                              f"at least {definition.at_least}")
        if definition.bounds is not None:
            low, high = definition.bounds
            if value < int(broker_values[low]):  # type: ignore[call-overload]
                raise ConfigError(f"{name} must be greater than or equal to {low}")
            if value > int(broker_values[high]):  # type: ignore[call-overload]
                raise ConfigError(f"{name} must be less than or equal to {high}")
        out[name] = str(value)
    session = int(out.get("share.session.timeout.ms")
                  or group_config_default("share.session.timeout.ms", broker_values))
    heartbeat = int(out.get("share.heartbeat.interval.ms")
                    or group_config_default("share.heartbeat.interval.ms", broker_values))
    if session <= heartbeat:
        raise ConfigError("share.session.timeout.ms must be greater than "
                          "share.heartbeat.interval.ms")
    return out


def describe_group_configs(overrides: Mapping[str, str], broker_values: Mapping[str, object],
                           names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs of a GROUP resource (Kafka's ConfigHelper): every group config (or
    those asked for), its override (GROUP_CONFIG) or the default (DEFAULT_CONFIG)."""
    wanted = GROUP_CONFIGS if names is None else [n for n in names if n in GROUP_CONFIGS]
    entries = []
    for name in sorted(wanted):
        definition = GROUP_CONFIGS[name]
        value = overrides.get(name)
        source = ConfigSource.GROUP_CONFIG
        if value is None:
            value, source = group_config_default(name, broker_values), ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, False, False, source,
                                   (ConfigSynonym(name, value, source),), definition.type,
                                   definition.doc))
    return entries


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """A share group's effective configs: its overrides over the broker's settings."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    auto_offset_reset: AutoOffsetReset
    isolation_level: int  # READ_UNCOMMITTED (0) or READ_COMMITTED (1), as Fetch says it

    @classmethod
    def resolve(cls, overrides: Mapping[str, str], broker_values: Mapping[str, object]
                ) -> ShareGroupConfig:
        """Stored overrides were validated when set; one that no longer passes (the broker's
        bounds changed since) gives way to the broker's value, as a bad record must not break
        the group."""
        def value(name: str) -> str:
            text = overrides.get(name)
            if text is not None:
                try:
                    validate_group_configs({name: text}, _with_wide_session(broker_values))
                    return text
                except ConfigError:
                    pass
            return group_config_default(name, broker_values)

        return cls(
            session_timeout_ms=int(value("share.session.timeout.ms")),
            heartbeat_interval_ms=int(value("share.heartbeat.interval.ms")),
            record_lock_duration_ms=int(value("share.record.lock.duration.ms")),
            delivery_count_limit=int(value("share.delivery.count.limit")),
            partition_max_record_locks=int(value("share.partition.max.record.locks")),
            auto_offset_reset=AutoOffsetReset.parse(value("share.auto.offset.reset")),
            isolation_level=ISOLATION_LEVELS[value("share.isolation.level")])


def _with_wide_session(broker_values: Mapping[str, object]) -> Mapping[str, object]:
    """Broker values for checking one override alone: the session/heartbeat cross-check is
    the whole set's, not one key's."""
    return {**broker_values, "group.share.session.timeout.ms": 2**31 - 1,
            "group.share.heartbeat.interval.ms": 0}


@dataclass(slots=True)
class _ImageCache:
    image: Any
    broker_values: Mapping[str, object]
    by_group: dict[str, ShareGroupConfig]


_CACHES: weakref.WeakKeyDictionary[Any, _ImageCache] = weakref.WeakKeyDictionary()


def share_group_configs(broker: Any, group_id: str) -> ShareGroupConfig:
    """The effective configs of share group `group_id` on `broker` (anything with `config`
    and `controller.image`). Cheap: resolved once per group and metadata image."""
    image = broker.controller.image
    cache = _CACHES.get(broker)
    if cache is None or cache.image is not image:
        cache = _CACHES[broker] = _ImageCache(image, broker.config.values, {})
    resolved = cache.by_group.get(group_id)
    if resolved is None:
        overrides = image.configs.get((GROUP_RESOURCE, group_id), {})
        resolved = cache.by_group[group_id] = ShareGroupConfig.resolve(overrides,
                                                                       cache.broker_values)
    return resolved
