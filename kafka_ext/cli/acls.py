"""`kafka-ext acls`: kafka-acls.sh (Kafka 3.9's AclCommand): CreateAcls, DescribeAcls and
DeleteAcls.

`--add`, `--remove` or `--list` ACLs on `--topic`, `--group`, `--cluster` and
`--transactional-id` resources named literally or by prefix (`--resource-pattern-type`, LITERAL
by default; ANY and MATCH filter `--list` and `--remove`). `--allow-principal` /
`--deny-principal` with `--allow-host` / `--deny-host` (`*` by default) and `--operation`
(`All` by default) make the entries; `--producer` and `--consumer` make the usual sets. An add
or remove prints Kafka's "Adding ACLs for resource" / confirmation lines, then the ACLs now on
the named resources. Errors print "Error while executing ACL command: <exception>: <message>"
and exit 1; usage errors exit 2. Resources and entries are printed sorted (Kafka prints them in
hash order).

The requests go through kafka-ext's codec over a connection made from `--command-config`'s Java
client properties (broker_connection.py), not through librdkafka: librdkafka (2.16) drops
DescribeAcls' error code, so a broker without an authorizer (SECURITY_DISABLED) or a principal
without DESCRIBE on the cluster would list as "no ACLs" where kafka-acls.sh fails.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Iterable
from typing import NamedTuple

from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.java_errors import java_error
from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import (
    CLUSTER_NAME,
    RESOURCE_OPERATIONS,
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

TIMEOUT_S = 30.0
# CreateAcls, DescribeAcls and DeleteAcls v2: pattern types (v1+), served by Kafka 2.4 to 4.x.
API_VERSION = 2
# The pattern types a user may name (PatternType.UNKNOWN is not one).
PATTERN_TYPES = {p.name: p for p in (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL,
                                     PatternType.PREFIXED)}
# Operations as SecurityUtils.operationName spells them (`ClusterAction`), by upper-case name.
OPERATION_NAMES: dict[AclOperation, str] = {
    op: "".join(part.capitalize() for part in op.name.split("_"))
    for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_OPERATION_BY_NAME = {name.upper(): op for op, name in OPERATION_NAMES.items()}
# Options --list refuses, and those --producer / --consumer refuse (AclCommandOptions.checkArgs).
_NOT_WITH_LIST = ("producer", "consumer", "allow_host", "allow_principal", "deny_host",
                  "deny_principal")
_NOT_WITH_ROLES = ("operation", "deny_principal", "deny_host")


class CommandFailed(Exception):
    """A failure AclCommand prints as "Error while executing ACL command: ..."; exit code 1."""


class ResourcePattern(NamedTuple):
    """A resource pattern, or a filter of them (ANY / MATCH); prints as Kafka's toString."""

    resource_type: ResourceType
    name: str | None  # None: any name (a filter)
    pattern_type: PatternType

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
                f"patternType={self.pattern_type.name})")


class AccessControlEntry(NamedTuple):
    """Who may (or may not) do what from where; prints as Kafka's toString."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


CLUSTER_PATTERN = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `acls` with kafka-acls.sh's flags."""
    parser = subparsers.add_parser(
        "acls", help="add, remove or list ACLs (kafka-acls.sh)",
        description="This tool helps to manage acls on kafka.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (security settings of the admin client)")
    parser.add_argument("--add", action="store_true", help="add ACLs")
    parser.add_argument("--remove", action="store_true", help="remove ACLs")
    parser.add_argument("--list", action="store_true",
                        help="list the ACLs of the named resources (every ACL without one)")
    parser.add_argument("--topic", action="append", default=[],
                        help="topic of the ACLs; '*' means every topic")
    parser.add_argument("--group", action="append", default=[],
                        help="consumer group of the ACLs; '*' means every group")
    parser.add_argument("--cluster", action="store_true", help="ACLs on the cluster")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="transactional id of the ACLs; '*' means every one")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IDEMPOTENT_WRITE on the cluster too")
    parser.add_argument("--resource-pattern-type", type=_pattern_type, metavar="TYPE",
                        help="LITERAL (default) or PREFIXED; ANY or MATCH to list or remove")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal the ACLs allow, e.g. User:alice")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal the ACLs deny (DENY wins over ALLOW)")
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="with --list: only the ACLs of this principal")
    parser.add_argument("--allow-host", action="append", default=[],
                        help="host the allowed principals may connect from (default *)")
    parser.add_argument("--deny-host", action="append", default=[],
                        help="host the denied principals are refused from (default *)")
    parser.add_argument("--operation", action="append", metavar="OPERATION",
                        help="operation allowed or denied (default All): " +
                             ", ".join(OPERATION_NAMES.values()))
    parser.add_argument("--producer", action="store_true",
                        help="WRITE, DESCRIBE and CREATE on the topics (and WRITE, DESCRIBE on "
                             "the transactional ids)")
    parser.add_argument("--consumer", action="store_true",
                        help="READ, DESCRIBE on the topics and READ on the group")
    parser.add_argument("--force", action="store_true",
                        help="assume yes to every question and do not prompt")
    parser.set_defaults(run=run)


def _pattern_type(text: str) -> PatternType:
    try:
        return PATTERN_TYPES[text.strip().upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"Unknown resource-pattern-type: {text}") from None


# -- what the flags ask for (AclCommand's getResourceFilter / getAcl) ----------------------------

def check_args(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs: the flag combinations kafka-acls.sh refuses."""
    if [args.add, args.remove, args.list].count(True) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    for action, refused in (("list", _NOT_WITH_LIST), ("producer", _NOT_WITH_ROLES),
                            ("consumer", _NOT_WITH_ROLES)):
        if getattr(args, action):
            for name in refused:
                if getattr(args, name):
                    raise UsageError(f'Option "[{action}]" can\'t be used with option '
                                     f'"[{name.replace("_", "-")}]"')
    if args.principal and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("With --consumer you must specify a --topic and a --group and no "
                         "--cluster or --transactional-id option should be specified.")


def pattern_type_of(args: argparse.Namespace) -> PatternType:
    return args.resource_pattern_type or PatternType.LITERAL


def resource_filters(args: argparse.Namespace, required: bool) -> set[ResourcePattern]:
    """The resources (or filters) the flags name; with `required`, at least one."""
    pattern_type = pattern_type_of(args)
    found = {ResourcePattern(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic}
    if pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.add(CLUSTER_PATTERN)
    found |= {ResourcePattern(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group}
    found |= {ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
              for t in args.transactional_id}
    if not found and required:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster "
                         "or --group <group>")
    return found


def principals(values: Iterable[str]) -> set[str]:
    """`Type:name` principals (SecurityUtils.parseKafkaPrincipal); a bare name fails."""
    out = set()
    for value in values:
        principal_type, sep, name = value.strip().partition(":")
        if not value.strip() or not sep:
            raise CommandFailed("expected a string in format principalType:principalName but "
                                f"got {value.strip()}")
        out.add(f"{principal_type}:{name}")
    return out


def entries(args: argparse.Namespace,
            operations: Iterable[AclOperation]) -> set[AccessControlEntry]:
    """Every (principal, host, operation) of the ALLOW and DENY flags."""
    out = set()
    for permission, named, hosts in (
            (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
            (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
        chosen_hosts = {h.strip() for h in hosts} or ({WILDCARD} if named else set())
        for principal in principals(named):
            out |= {AccessControlEntry(principal, host, op, permission)
                    for op in operations for host in chosen_hosts}
    return out


def operation(name: str) -> AclOperation:
    """An `--operation` value (`Read`, `READ`, `ClusterAction`, `CLUSTER_ACTION`); UNKNOWN for
    anything else, which the operation check then refuses as Kafka does."""
    return _OPERATION_BY_NAME.get(name.strip().replace("_", "").upper(), AclOperation.UNKNOWN)


def filter_to_acls(args: argparse.Namespace) -> dict[ResourcePattern, set[AccessControlEntry]]:
    """AclCommand.getResourceFilterToAcls: the entries for each resource, from the flags or the
    --producer / --consumer sets."""
    wanted: dict[ResourcePattern, set[AccessControlEntry]] = {}
    filters = resource_filters(args, required=True)
    if not args.producer and not args.consumer:
        chosen = entries(args, {operation(o) for o in args.operation or ["All"]})
        wanted = {f: set(chosen) for f in filters}
    if args.producer:
        topic_acls = entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE,
                                    AclOperation.CREATE))
        id_acls = entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE))
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                wanted[f] = set(topic_acls)
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                wanted[f] = set(id_acls)
        if args.idempotent:
            wanted[CLUSTER_PATTERN] = entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                wanted.setdefault(f, set()).update(
                    entries(args, (AclOperation.READ, AclOperation.DESCRIBE)))
            elif f.resource_type == ResourceType.GROUP:
                wanted.setdefault(f, set()).update(entries(args, (AclOperation.READ,)))
    for f, acls in wanted.items():
        valid = (*RESOURCE_OPERATIONS[f.resource_type], AclOperation.ALL)
        if any(acl.operation not in valid for acl in acls):
            raise UsageError(f"ResourceType {f.resource_type.name} only supports operations "
                             + ", ".join(OPERATION_NAMES[op] for op in valid))
    return wanted


def resource_to_acls(args: argparse.Namespace) -> dict[ResourcePattern, set[AccessControlEntry]]:
    """AclCommand.getResourceToAcls: what --add creates (specific patterns, some principal)."""
    pattern_type = pattern_type_of(args)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern_type.name}' is not "
                         "valid when adding acls.")
    wanted = filter_to_acls(args)
    if any(not acls for acls in wanted.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when "
                         "trying to add ACLs.")
    return wanted


# -- the admin calls -------------------------------------------------------------------------------

def _failed(error_code: int, message: str | None) -> CommandFailed:
    return CommandFailed(java_error(ErrorCode(error_code).name, message))


def describe(sock: socket.socket, filters: set[ResourcePattern]
             ) -> dict[ResourcePattern, set[AccessControlEntry]]:
    """The ACLs matching any of `filters` (every ACL when there is none), by resource."""
    Request = registry()["DescribeAclsRequest"].cls
    found: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for f in filters or {ResourcePattern(ResourceType.ANY, None, PatternType.ANY)}:
        response = round_trip(sock, ApiKey.DESCRIBE_ACLS, API_VERSION, Request(
            resource_type_filter=f.resource_type, resource_name_filter=f.name,
            pattern_type_filter=f.pattern_type, principal_filter=None, host_filter=None,
            operation=AclOperation.ANY, permission_type=AclPermissionType.ANY))
        if response.error_code:
            raise _failed(response.error_code, response.error_message)
        for r in response.resources:
            resource = ResourcePattern(ResourceType(r.resource_type), r.resource_name,
                                       PatternType(r.pattern_type))
            found.setdefault(resource, set()).update(
                AccessControlEntry(a.principal, a.host, AclOperation(a.operation),
                                   AclPermissionType(a.permission_type)) for a in r.acls)
    return found


def create(sock: socket.socket, resource: ResourcePattern,
           acls: Iterable[AccessControlEntry]) -> None:
    """CreateAcls for the entries on one resource; the first refused one fails the command."""
    Request = registry()["CreateAclsRequest"].cls
    response = round_trip(sock, ApiKey.CREATE_ACLS, API_VERSION, Request(creations=[
        Request.AclCreation(resource_type=resource.resource_type, resource_name=resource.name,
                            resource_pattern_type=resource.pattern_type,
                            principal=acl.principal, host=acl.host, operation=acl.operation,
                            permission_type=acl.permission_type) for acl in acls]))
    for result in response.results:
        if result.error_code:
            raise _failed(result.error_code, result.error_message)


def delete(sock: socket.socket, resource: ResourcePattern,
           acls: Iterable[AccessControlEntry | None]) -> None:
    """DeleteAcls with one filter per entry (None: every entry on the resource filter)."""
    Request = registry()["DeleteAclsRequest"].cls
    filters = []
    for acl in acls:
        principal, host, operation, permission = (
            (None, None, AclOperation.ANY, AclPermissionType.ANY) if acl is None else acl)
        filters.append(Request.DeleteAclsFilter(
            resource_type_filter=resource.resource_type, resource_name_filter=resource.name,
            pattern_type_filter=resource.pattern_type, principal_filter=principal,
            host_filter=host, operation=operation, permission_type=permission))
    response = round_trip(sock, ApiKey.DELETE_ACLS, API_VERSION, Request(filters=filters))
    for result in response.filter_results:
        if result.error_code:
            raise _failed(result.error_code, result.error_message)
        for matched in result.matching_acls:
            if matched.error_code:
                raise _failed(matched.error_code, matched.error_message)


def _block(acls: Iterable[AccessControlEntry]) -> str:
    """Kafka's `$Newline ${acls.map("\\t" + _).mkString(Newline)} $Newline` layout."""
    return "\n " + "\n".join(f"\t{acl}" for acl in sorted(acls)) + " \n"


def print_acls(resource_acls: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    for resource in sorted(resource_acls):
        print(f"Current ACLs for resource `{resource}`: {_block(resource_acls[resource])}")


def list_acls(sock: socket.socket, args: argparse.Namespace) -> None:
    """Every ACL on the named resources (all ACLs when none is named), per --principal."""
    listed = sorted(principals(args.principal))
    found = describe(sock, resource_filters(args, required=False))
    if not listed:
        print_acls(found)
    for principal in listed:
        print(f"ACLs for principal `{principal}`")
        mine = {r: {a for a in acls if a.principal == principal} for r, acls in found.items()}
        print_acls({r: acls for r, acls in mine.items() if acls})


def add_acls(sock: socket.socket, args: argparse.Namespace) -> None:
    wanted = resource_to_acls(args)
    for resource in sorted(wanted):
        print(f"Adding ACLs for resource `{resource}`: {_block(wanted[resource])}")
        create(sock, resource, sorted(wanted[resource]))
    list_acls(sock, args)


def remove_acls(sock: socket.socket, args: argparse.Namespace) -> None:
    wanted = filter_to_acls(args)
    for resource in sorted(wanted):
        acls = wanted[resource]
        if not acls:
            question = (f"Are you sure you want to delete all ACLs for resource filter "
                        f"`{resource}`? (y/n)")
        else:
            question = (f"Are you sure you want to remove ACLs: {_block(acls)} from resource "
                        f"filter `{resource}`? (y/n)")
        if confirmed(args, question):
            delete(sock, resource, sorted(acls) if acls else [None])
    list_acls(sock, args)


def confirmed(args: argparse.Namespace, question: str) -> bool:
    """--force, or a `y` typed in answer to `question` (end of input answers no)."""
    if args.force:
        return True
    print(question, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def run(args: argparse.Namespace) -> int:
    check_args(args)
    action = add_acls if args.add else remove_acls if args.remove else list_acls
    try:
        with open_connection(args.bootstrap_server, args.command_config, TIMEOUT_S) as sock:
            action(sock, args)
    except CommandFailed as exc:
        print(f"Error while executing ACL command: {exc}")
        return 1
    except SaslAuthenticationError as exc:
        print(f"Error while executing ACL command: "
              f"{java_error('SASL_AUTHENTICATION_FAILED', str(exc))}")
        return 1
    except OSError as exc:
        print(f"Error while executing ACL command: cannot reach {args.bootstrap_server}: {exc}")
        return 1
    return 0
