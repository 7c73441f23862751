"""`kafka-ext configs`: kafka-configs.sh's flags and output, for client quotas (KIP-546), SCRAM
credentials (KIP-554), topics, brokers and broker loggers (KIP-412).

`--entity-type users|clients` with `--entity-name N` or `--entity-default` (repeat the pair for
a (user, client-id) entity), or the shortcuts `--user`, `--client`, `--user-defaults`,
`--client-defaults`; `--alter --add-config k=v,k2=v2 --delete-config k` or `--describe`.
Neither confluent-kafka 2.16 nor kafka-python 3.0 has client-quota admin calls, so this tool
sends DescribeClientQuotas / AlterClientQuotas itself through kafka-ext's codec.
`--entity-type users --entity-name U --add-config 'SCRAM-SHA-256=[iterations=8192,password=P]'`
upserts a SCRAM credential (AlterUserScramCredentials with a fresh salt and the salted password,
never the password), `--delete-config SCRAM-SHA-256` deletes it, and `--describe` of users adds
Kafka's "SCRAM credential configs" lines (DescribeUserScramCredentials). As in Kafka, one alter
changes quotas or SCRAM credentials, not both. `--command-config` gives the connection's TLS and
SASL settings (broker_connection.py).
`--entity-type topics|brokers` describe (dynamic configs, or every one with `--all`) and alter
(IncrementalAlterConfigs) a topic's or a broker's configs the same way; `--entity-default` is
the cluster-wide broker default. `--entity-type broker-loggers --entity-name N` (or
`--broker-logger N`) lists broker N's logger levels and sets (`--add-config
kafka_ext.server=DEBUG`) or unsets (`--delete-config`) them. As Kafka's admin client does, a
broker's or its loggers' request goes to that broker, found through Metadata.
`--entity-type groups --entity-name G` (or `--group G`) describes and alters a group's configs
(the GROUP resource, KIP-848/KIP-932: `share.auto.offset.reset`, ...); without a name, every
group ListGroups reports, of any type.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import sys
from decimal import Decimal
from typing import Any

from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.java_errors import java_error
from kafka_ext.client.probe import round_trip
from kafka_ext.controller.client_quota_control import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import (
    DEFAULT_SCRAM_ITERATIONS,
    MIN_SCRAM_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISMS,
    salted_password,
)

QUOTA_ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID}
# ConfigResource types
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 32
RESOURCE_TYPES = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE,
                  "broker-loggers": BROKER_LOGGER_RESOURCE, "groups": GROUP_RESOURCE}
# Resources Kafka's admin client sends to the broker they name (their describe is its own view).
_PER_BROKER = ("brokers", "broker-loggers")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
_LABELS = {USER: "user-principal", CLIENT_ID: "client-id"}
API_VERSION = 1
LIST_GROUPS_VERSION = 5  # every group type, with its type
SCRAM_API_VERSION = 0
TIMEOUT_S = 30.0
SALT_BYTES = 32
# A SCRAM credential's value as kafka-configs.sh reads it: iterations first, the rest is the
# password (commas included).
_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)
# A password in an argument: up to the `]` closing its credential, or to the end.
_PASSWORD = re.compile(r"(password=).*?(\](?=,|$)|$)", re.DOTALL)


class CommandFailed(Exception):
    """The broker refused the change: printed as kafka-configs.sh prints it, exit code 1."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `configs` with kafka-configs.sh's flags."""
    parser = subparsers.add_parser(
        "configs", help="describe or alter client quotas, SCRAM credentials, topic, broker "
                        "or group configs and broker logger levels (kafka-configs.sh)",
        description="Add, delete or describe client quotas of users and client ids, SCRAM "
                    "credentials of users, the configs of topics, brokers (per broker or "
                    "the cluster default) and groups, and the logger levels of brokers.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (security.protocol, ssl.*, sasl.*)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="alter the entity's configs")
    action.add_argument("--describe", action="store_true", help="list the entity's configs")
    parser.add_argument("--entity-type", action="append", default=[], dest="entity_types",
                        choices=sorted([*QUOTA_ENTITY_TYPES, *RESOURCE_TYPES]),
                        help="users, clients, topics, brokers, broker-loggers or groups")
    parser.add_argument("--entity-name", action="append", dest="entity_names",
                        help="name of the entity (user principal, client id, topic, broker "
                             "id or group id)")
    parser.add_argument("--entity-default", action="append_const", const=None,
                        dest="entity_names", help="the default entity of the type")
    # kafka-configs.sh's shortcuts: --user U is --entity-type users --entity-name U, ...
    for flag, entity_type in (("--user", "users"), ("--client", "clients"),
                              ("--topic", "topics"), ("--broker", "brokers"),
                              ("--broker-logger", "broker-loggers"), ("--group", "groups")):
        parser.add_argument(flag, dest="shortcuts", action="append", type=_entity(entity_type),
                            metavar="NAME",
                            help=f"same as --entity-type {entity_type} --entity-name NAME")
    for flag, entity_type in (("--user-defaults", "users"), ("--client-defaults", "clients"),
                              ("--broker-defaults", "brokers")):
        parser.add_argument(flag, dest="shortcuts", action="append_const",
                            const=(entity_type, None),
                            help=f"same as --entity-type {entity_type} --entity-default")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config of the topic, broker or group, "
                             "not only the dynamic ones")
    parser.add_argument("--add-config", default="", metavar="K=V,K2=V2",
                        help="configs to set, comma separated; a user's SCRAM credential is "
                             "SCRAM-SHA-256=[iterations=N,password=P]")
    parser.add_argument("--delete-config", action="append", default=[], metavar="K",
                        help="configs to remove (repeat or comma separate); SCRAM-SHA-256 "
                             "removes that credential")
    parser.set_defaults(run=run)


def _entity(entity_type: str) -> Any:
    def parse(name: str) -> tuple[str, str | None]:
        return entity_type, name
    return parse


def entities_of(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type as the flag names it, name or None for the default) pairs, in order."""
    names = args.entity_names or []
    if len(names) > len(args.entity_types):
        raise UsageError("More entity names specified than entity types")
    pairs: list[tuple[str, str | None]] = []
    for i, entity_type in enumerate(args.entity_types):
        if i < len(names):
            pairs.append((entity_type, names[i]))
        elif args.alter:
            raise UsageError("An entity name must be specified for every entity type")
        else:
            pairs.append((entity_type, _ANY))
    pairs += args.shortcuts or []
    if not pairs:
        raise UsageError("--entity-type (or --user / --client) must be specified")
    if len({t for t, _ in pairs}) != len(pairs):
        raise UsageError("each entity type may be given once")
    if any(t in RESOURCE_TYPES for t, _ in pairs) and len(pairs) > 1:
        raise UsageError("topics, brokers, broker-loggers and groups take one entity")
    if pairs[0] == ("broker-loggers", None):
        raise UsageError("--entity-default is not supported for broker-loggers: name a broker")
    if pairs[0] == ("groups", None):  # a group has no default entity: kafka-configs.sh's words
        raise UsageError("An entity name must be specified with --alter of groups" if args.alter
                         else "--entity-default must not be specified with --describe of groups")
    return pairs


_ANY = "\x00any"  # --describe --entity-type T without a name: every entity of that type


def quota_values(added: dict[str, str]) -> dict[str, float]:
    """The quotas of --add-config as numbers; a value that is not a number is refused."""
    out: dict[str, float] = {}
    for key, value in added.items():
        try:
            out[key] = float(value)
        except ValueError:
            raise CommandFailed(f"Cannot parse quota configuration value for {key}: "
                                f"{value}") from None
    return out


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (kafka-configs.sh prints quotas so):
    shortest digits, plain from 10^-3 to 10^7, else d.dddE<n>."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + exponent}"


def describe(sock: socket.socket, pairs: list[tuple[str, str | None]]) -> list[str]:
    """kafka-configs.sh's lines for every entity matching exactly these types (strict)."""
    Request = registry()["DescribeClientQuotasRequest"].cls
    components = []
    for entity_type, name in pairs:
        if name == _ANY:
            components.append(Request.ComponentData(entity_type=entity_type,
                                                    match_type=MATCH_SPECIFIED, match=None))
        elif name is None:
            components.append(Request.ComponentData(entity_type=entity_type,
                                                    match_type=MATCH_DEFAULT, match=None))
        else:
            components.append(Request.ComponentData(entity_type=entity_type,
                                                    match_type=MATCH_EXACT, match=name))
    response = round_trip(sock, ApiKey.DESCRIBE_CLIENT_QUOTAS, API_VERSION,
                          Request(components=components, strict=True))
    if response.error_code:
        raise CommandFailed(f"{ErrorCode(response.error_code).name}: {response.error_message}")
    lines = []
    for entry in response.entries or []:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        parts = []
        for entity_type in (USER, CLIENT_ID):
            if entity_type in names:
                name = names[entity_type]
                label = _LABELS[entity_type]
                parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
        values = ", ".join(f"{v.key}={java_double(v.value)}" for v in entry.values)
        lines.append(f"Quota configs for {', '.join(parts)} are {values}")
    return lines


def alter(sock: socket.socket, pairs: list[tuple[str, str | None]], add: dict[str, float],
          delete: list[str]) -> None:
    """One AlterClientQuotas entry; a config to delete that is not set is refused first, as
    kafka-configs.sh does."""
    current = _current(sock, pairs)
    unknown = [k for k in delete if k not in current]
    if unknown:
        raise CommandFailed(f"Invalid config(s): {','.join(unknown)}")
    Request = registry()["AlterClientQuotasRequest"].cls
    ops = [Request.OpData(key=k, value=v, remove=False) for k, v in add.items()]
    ops += [Request.OpData(key=k, value=0.0, remove=True) for k in delete]
    entry = Request.EntryData(entity=[Request.EntityData(entity_type=t, entity_name=n)
                                      for t, n in pairs], ops=ops)
    response = round_trip(sock, ApiKey.ALTER_CLIENT_QUOTAS, API_VERSION,
                          Request(entries=[entry], validate_only=False))
    for result in response.entries:
        if result.error_code:
            raise CommandFailed(f"{ErrorCode(result.error_code).name}: {result.error_message}")


def _current(sock: socket.socket, pairs: list[tuple[str, str | None]]) -> dict[str, float]:
    Request = registry()["DescribeClientQuotasRequest"].cls
    components = [Request.ComponentData(
        entity_type=t, match_type=MATCH_DEFAULT if n is None else MATCH_EXACT, match=n)
        for t, n in pairs]
    response = round_trip(sock, ApiKey.DESCRIBE_CLIENT_QUOTAS, API_VERSION,
                          Request(components=components, strict=True))
    if response.error_code:
        raise CommandFailed(f"{ErrorCode(response.error_code).name}: {response.error_message}")
    entries = response.entries or []
    return {v.key: v.value for v in entries[0].values} if entries else {}


def run(args: argparse.Namespace) -> int:
    pairs = entities_of(args)
    delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if args.alter and not args.add_config.strip() and not delete:
        raise UsageError("--alter needs --add-config or --delete-config")
    head_type, head_name = pairs[0]
    try:
        added = parse_resource_configs(args.add_config)
        if head_type not in RESOURCE_TYPES:
            check_entity_configs(pairs, list(added), delete)
            scram_added = {k: v for k, v in added.items() if k in SCRAM_MECHANISMS}
            scram_deleted = [k for k in delete if k in SCRAM_MECHANISMS]
            add = quota_values({k: v for k, v in added.items() if k not in SCRAM_MECHANISMS})
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(open_connection(args.bootstrap_server,
                                                       args.command_config, TIMEOUT_S))
            if head_type in RESOURCE_TYPES:
                check_broker_id(head_type, head_name)
                nodes = NodeConnections(sock, args.command_config, stack)
                if args.describe:
                    for line in describe_resources(nodes, head_type, head_name, args.all):
                        print(line)
                    return 0
                alter_resource(nodes.for_entity(head_type, head_name), head_type, head_name,
                               added, delete)
            else:
                quota_pairs = [(QUOTA_ENTITY_TYPES[t], n) for t, n in pairs]
                if args.describe:
                    lines = describe(sock, quota_pairs)
                    # As Kafka: not for clients, nor for the default user.
                    if [t for t, _ in pairs] == ["users"] and head_name is not None:
                        lines += describe_scram(sock, head_name)
                    for line in lines:
                        print(line)
                    return 0
                if scram_added or scram_deleted:
                    assert head_name is not None  # check_entity_configs refused the default user
                    alter_scram(sock, head_name, scram_added, scram_deleted)
                else:
                    alter(sock, quota_pairs, add, delete)
    except CommandFailed as exc:
        print(f"Error while executing config command with args "
              f"'{' '.join(map(redacted, sys.argv[1:]))}'\n{exc}", file=sys.stderr)
        return 1
    except SaslAuthenticationError as exc:
        print(java_error("SASL_AUTHENTICATION_FAILED", str(exc)), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    if head_name is not None:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0


def redacted(arg: str) -> str:
    """A command-line argument fit to print: a SCRAM credential's password hidden (kafka-configs.sh
    repeats its arguments, password included, in an error)."""
    return _PASSWORD.sub(r"\1[hidden]\2", arg)


def check_entity_configs(pairs: list[tuple[str, str | None]], added: list[str],
                     delete: list[str]) -> None:
    """kafka-configs.sh's checks before sending anything: clients (alone or with a user) take
    quotas only; a user alone takes quotas or SCRAM credentials, not both in one alter, and a
    SCRAM credential belongs to a named user."""
    users_alone = [t for t, _ in pairs] == ["users"]
    allowed = (*QUOTA_KEYS, *SCRAM_MECHANISMS) if users_alone else QUOTA_KEYS
    entity_type = "users" if users_alone else "clients"
    what = "quota and SCRAM credential configs" if users_alone else "quota configs"
    for verb, keys in (("added", added), ("deleted", delete)):
        unknown = [k for k in keys if k not in allowed]
        if unknown:
            raise CommandFailed(f"Only {what} can be {verb} for '{entity_type}' using "
                             f"--bootstrap-server. Unexpected config names: {', '.join(unknown)}")
    scram = [k for k in (*added, *delete) if k in SCRAM_MECHANISMS]
    if scram and pairs[0][1] is None:
        raise CommandFailed("The use of --entity-default or --user-defaults is not allowed "
                            "with User SCRAM Credentials using --bootstrap-server.")
    if scram and len(scram) < len(added) + len(delete):
        raise CommandFailed("Cannot alter both quota and SCRAM credential configs "
                            "simultaneously for 'users' using --bootstrap-server.")


# -- SCRAM credentials (KIP-554) ------------------------------------------------------------------

def scram_upsertion(mechanism: str, value: str) -> tuple[int, str]:
    """(iterations, password) of `[iterations=N,]password=P`; the error never repeats P."""
    match = _SCRAM_VALUE.fullmatch(value)
    if match is None or match.group(1) == "":
        raise CommandFailed(f"Invalid credential property {mechanism}: expected "
                            "[iterations=<n>,]password=<password>")
    iterations = (DEFAULT_SCRAM_ITERATIONS if match.group(1) in (None, "-1")
                  else int(match.group(1)))
    if iterations < MIN_SCRAM_ITERATIONS:
        raise CommandFailed(f"Iterations {iterations} is less than the minimum "
                            f"{MIN_SCRAM_ITERATIONS} required for {mechanism}")
    return iterations, match.group(2)


def alter_scram(sock: socket.socket, user: str, added: dict[str, str],
                deleted: list[str]) -> None:
    """One AlterUserScramCredentials request: deletions, and upsertions carrying a fresh random
    salt and the salted password (RFC 5802's Hi()), as Kafka's admin client computes them."""
    Request = registry()["AlterUserScramCredentialsRequest"].cls
    upsertions = []
    for mechanism, value in added.items():
        iterations, password = scram_upsertion(mechanism, value)
        salt = os.urandom(SALT_BYTES)
        upsertions.append(Request.ScramCredentialUpsertion(
            name=user, mechanism=SCRAM_MECHANISMS[mechanism], iterations=iterations, salt=salt,
            salted_password=salted_password(mechanism, password, salt, iterations)))
    deletions = [Request.ScramCredentialDeletion(name=user, mechanism=SCRAM_MECHANISMS[m])
                 for m in deleted]
    response = round_trip(sock, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, SCRAM_API_VERSION,
                          Request(deletions=deletions, upsertions=upsertions))
    for result in response.results:
        if result.error_code:
            raise CommandFailed(f"{ErrorCode(result.error_code).name}: {result.error_message}")


def describe_scram(sock: socket.socket, name: str) -> list[str]:
    """kafka-configs.sh's SCRAM lines of one user (every user with credentials for `_ANY`); a
    named user without credentials prints nothing, another per-user error its own line."""
    Request = registry()["DescribeUserScramCredentialsRequest"].cls
    users = [] if name == _ANY else [Request.UserName(name=name)]
    response = round_trip(sock, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, SCRAM_API_VERSION,
                          Request(users=users))
    if response.error_code:
        raise CommandFailed(f"{ErrorCode(response.error_code).name}: {response.error_message}")
    lines = []
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            continue
        if result.error_code:
            lines.append(f"Error retrieving SCRAM credential configs for user-principal "
                         f"'{result.user}': ExecutionException: "
                         f"{java_error(ErrorCode(result.error_code).name, result.error_message)}")
            continue
        infos = ", ".join(f"{SCRAM_MECHANISM_NAMES[i.mechanism]}=iterations={i.iterations}"
                          for i in result.credential_infos)
        lines.append(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
    return lines


def parse_resource_configs(text: str) -> dict[str, str]:
    """`k=v,k2=[a,b]` as kafka-configs.sh reads it (square brackets group a list value)."""
    out: dict[str, str] = {}
    depth = 0
    pair = ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            if pair.strip():
                key, sep, value = pair.partition("=")
                if not sep or not key.strip():
                    # Not repeated: the stray text may be part of a SCRAM password.
                    raise UsageError("--add-config expects key=value pairs separated by commas "
                                     "(a list or SCRAM credential value in [...])")
                out[key.strip()] = value.strip().removeprefix("[").removesuffix("]")
            pair = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        pair += ch
    return out


def _resource_name(entity_type: str, name: str | None) -> str:
    return "" if name is None else name


def check_broker_id(entity_type: str, name: str | None) -> None:
    """A broker or broker-logger entity is a broker id, as kafka-configs.sh checks."""
    if entity_type in _PER_BROKER and name not in (None, _ANY):
        try:
            int(str(name))
        except ValueError:
            raise CommandFailed(f"The entity name for {entity_type} must be a valid integer "
                                f"broker id, found: {name}") from None


class NodeConnections:
    """The bootstrap connection, and one to each broker a `brokers` or `broker-loggers` entity
    names: Kafka's admin client sends those resources to that broker, which answers for itself
    only. The connections close with the ExitStack given."""

    def __init__(self, bootstrap: socket.socket, command_config: str | None,
                 stack: contextlib.ExitStack) -> None:
        self.bootstrap = bootstrap
        self._command_config = command_config
        self._stack = stack
        self._brokers: dict[str, tuple[str, int]] | None = None
        self._open: dict[str, socket.socket] = {}

    def broker_ids(self) -> list[str]:
        return sorted(self._endpoints(), key=int)

    def to_broker(self, broker_id: str) -> socket.socket:
        """A connection to broker `broker_id`, which Metadata lists; opened once."""
        sock = self._open.get(broker_id)
        if sock is None:
            host, port = self._endpoints()[broker_id]
            sock = self._open[broker_id] = self._stack.enter_context(open_connection(
                f"[{host}]:{port}" if ":" in host else f"{host}:{port}", self._command_config,
                TIMEOUT_S))
        return sock

    def _endpoints(self) -> dict[str, tuple[str, int]]:
        if self._brokers is None:
            response = _metadata(self.bootstrap)
            self._brokers = {str(b.node_id): (b.host, b.port) for b in response.brokers}
        return self._brokers

    def for_entity(self, entity_type: str, name: str | None) -> socket.socket:
        """Where a request about this entity goes: the broker it names, else the bootstrap
        broker (topics, the cluster default, or a broker id Metadata does not list, which
        then answers the error)."""
        if entity_type not in _PER_BROKER or name is None or name not in self._endpoints():
            return self.bootstrap
        return self.to_broker(name)

    def group_ids(self) -> list[str]:
        """Every group of the cluster, of any type (ListGroups at each broker, as Kafka's
        admin client lists them), sorted."""
        request = registry()["ListGroupsRequest"].cls(states_filter=[], types_filter=[])
        groups: set[str] = set()
        for broker_id in self.broker_ids():
            response = round_trip(self.to_broker(broker_id), ApiKey.LIST_GROUPS,
                                  LIST_GROUPS_VERSION, request)
            if response.error_code:
                raise CommandFailed(f"{ErrorCode(response.error_code).name}: listing the groups "
                                    f"of broker {broker_id} failed")
            groups.update(g.group_id for g in response.groups)
        return sorted(groups)


def _metadata(sock: socket.socket) -> Any:
    Request = registry()["MetadataRequest"].cls
    return round_trip(sock, ApiKey.METADATA, 12, Request(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))


def describe_resources(nodes: NodeConnections, entity_type: str, name: str | None,
                       describe_all: bool) -> list[str]:
    """kafka-configs.sh's describe of topics, brokers, broker loggers or groups (every one
    when no name is given, and for brokers the cluster default last)."""
    if name == _ANY:
        names: list[str | None]
        if entity_type == "topics":
            names = sorted(t.name for t in _metadata(nodes.bootstrap).topics if t.name)
        elif entity_type == "groups":
            names = list(nodes.group_ids())
        else:
            names = list(nodes.broker_ids())
        if entity_type == "brokers":
            names.append(None)
    else:
        names = [name]
    lines: list[str] = []
    for each in names:
        if entity_type == "brokers" and each is None:
            lines.append("Default configs for brokers in the cluster are:")
        else:
            lines.append(f"{'All' if describe_all else 'Dynamic'} configs for "
                         f"{entity_type[:-1]} {each} are:")
        lines += _config_lines(nodes.for_entity(entity_type, each), entity_type, each,
                               describe_all)
    return lines


# DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, GROUP_CONFIG
_DYNAMIC_SOURCE = {"topics": 1, "brokers": 2, "groups": 8}
# The wire's config sources by the names Kafka's admin client gives them (ConfigEntry).
_SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                 3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                 7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}


def _resource_configs(sock: socket.socket, entity_type: str, name: str | None,
                      describe_all: bool) -> list[Any]:
    """The entity's config entries by name: those set dynamically on it (every logger for
    broker-loggers, which has no other kind), or all of them."""
    Request = registry()["DescribeConfigsRequest"].cls
    response = round_trip(sock, ApiKey.DESCRIBE_CONFIGS, 4, Request(
        resources=[Request.DescribeConfigsResource(
            resource_type=RESOURCE_TYPES[entity_type],
            resource_name=_resource_name(entity_type, name), configuration_keys=None)],
        include_synonyms=True, include_documentation=False))
    result = response.results[0]
    if result.error_code:
        raise CommandFailed(f"{ErrorCode(result.error_code).name}: {result.error_message}")
    wanted = None
    if not describe_all and entity_type in _DYNAMIC_SOURCE:
        wanted = 3 if name is None else _DYNAMIC_SOURCE[entity_type]
    return sorted((c for c in result.configs if wanted is None or c.config_source == wanted),
                  key=lambda c: c.name)


def _config_lines(sock: socket.socket, entity_type: str, name: str | None,
                  describe_all: bool) -> list[str]:
    lines = []
    for c in _resource_configs(sock, entity_type, name, describe_all):
        synonyms = ", ".join(f"{_SOURCE_NAMES.get(s.source, s.source)}:{s.name}={_java(s.value)}"
                             for s in c.synonyms)
        lines.append(f"  {c.name}={_java(c.value)} sensitive={str(c.is_sensitive).lower()} "
                     f"synonyms={{{synonyms}}}")
    return lines


def _java(value: str | None) -> str:
    return "null" if value is None else value


def alter_resource(sock: socket.socket, entity_type: str, name: str | None,
                   add: dict[str, str], delete: list[str]) -> None:
    """IncrementalAlterConfigs DELETE / SET, after kafka-configs.sh's checks: every config to
    delete is set; for broker loggers, every logger named exists."""
    current = {c.name for c in _resource_configs(sock, entity_type, name, False)}
    if entity_type == "broker-loggers":
        unknown = [k for k in (*delete, *add) if k not in current]
        if unknown:
            raise CommandFailed(f"Invalid broker logger(s): {','.join(unknown)}")
    unknown = [k for k in delete if k not in current]
    if unknown:
        raise CommandFailed(f"Invalid config(s): {','.join(unknown)}")
    Request = registry()["IncrementalAlterConfigsRequest"].cls
    configs = [Request.AlterableConfig(name=k, config_operation=1, value=None) for k in delete]
    configs += [Request.AlterableConfig(name=k, config_operation=0, value=v)
                for k, v in add.items()]
    response = round_trip(sock, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, Request(
        resources=[Request.AlterConfigsResource(
            resource_type=RESOURCE_TYPES[entity_type],
            resource_name=_resource_name(entity_type, name), configs=configs)],
        validate_only=False))
    for result in response.responses:
        if result.error_code:
            raise CommandFailed(f"{ErrorCode(result.error_code).name}: {result.error_message}")
