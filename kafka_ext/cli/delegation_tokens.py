"""`kafka-ext delegation-tokens`: kafka-delegation-tokens.sh (Kafka's DelegationTokenCommand):
CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken, DescribeDelegationToken.

Exactly one of `--create` (`--max-life-time-period`, `--renewer-principal`, `--owner-principal`),
`--renew` (`--hmac`, `--renew-time-period`), `--expire` (`--hmac`, `--expiry-time-period`) or
`--describe` (`--owner-principal`), with `--bootstrap-server` and `--command-config` (required,
as in Kafka: tokens are managed only over an authenticated connection). The output is Kafka's:
the "Calling ... operation" line, then the TokenDetails table (TOKENID, HMAC, OWNER, REQUESTER,
RENEWERS, ISSUEDATE, EXPIRYDATE, MAXDATE; dates as yyyy-MM-dd'T'HH:mm in local time), or the
new expiry date. A refusal prints the Java exception and its message to stderr and exits 1;
usage errors exit 2. Without `--owner-principal`, `--describe` asks for every token the
principal may see (the documented behaviour of Kafka's tool).

The requests go through kafka-ext's codec over a connection made from `--command-config`'s Java
client properties (broker_connection.py).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka_ext.cli.broker_connection import SaslAuthenticationError, open_connection
from kafka_ext.cli.client_config import UsageError
from kafka_ext.cli.java_errors import java_error
from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.principal import KafkaPrincipal

TIMEOUT_S = 30.0
# The versions Kafka 3.x/4.x's admin client sends: Create and Describe v3 (owner, requester).
VERSIONS = {ApiKey.CREATE_DELEGATION_TOKEN: 3, ApiKey.RENEW_DELEGATION_TOKEN: 2,
            ApiKey.EXPIRE_DELEGATION_TOKEN: 2, ApiKey.DESCRIBE_DELEGATION_TOKEN: 3}
_ACTIONS = ("create", "renew", "expire", "describe")
# Options each action refuses (DelegationTokenCommandOptions.checkArgs).
_INVALID = {
    "create": ("hmac", "renew_time_period", "expiry_time_period"),
    "renew": ("renewer_principal", "max_life_time_period", "expiry_time_period",
              "owner_principal"),
    "expire": ("max_life_time_period", "renew_time_period", "owner_principal"),
    "describe": ("renew_time_period", "max_life_time_period", "hmac", "expiry_time_period"),
}
_REQUIRED = {"create": ("max_life_time_period",), "renew": ("hmac", "renew_time_period"),
             "expire": ("hmac", "expiry_time_period"), "describe": ()}
_reg = registry()


class CommandFailed(Exception):
    """The broker refused: the message is the Java exception and text Kafka's tool prints."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `delegation-tokens` with kafka-delegation-tokens.sh's flags."""
    parser = subparsers.add_parser(
        "delegation-tokens", help="create, renew, expire or describe delegation tokens "
                                  "(kafka-delegation-tokens.sh)",
        description="This tool helps to create, renew, expire, or describe delegation tokens.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="REQUIRED: server(s) to use for bootstrapping")
    parser.add_argument("--command-config", required=True, metavar="FILE",
                        help="REQUIRED: client properties file; token management is allowed "
                             "over authenticated connections only")
    parser.add_argument("--create", action="store_true",
                        help="create a new delegation token (--renewer-principal names who "
                             "may renew it)")
    parser.add_argument("--renew", action="store_true",
                        help="renew a delegation token (--hmac, --renew-time-period)")
    parser.add_argument("--expire", action="store_true",
                        help="expire a delegation token (--hmac, --expiry-time-period)")
    parser.add_argument("--describe", action="store_true",
                        help="describe the delegation tokens of --owner-principal (owner or "
                             "renewer); without it, every token this principal may see")
    parser.add_argument("--owner-principal", action="append", metavar="TYPE:NAME",
                        help="owner of the token to create, or owners to describe")
    parser.add_argument("--renewer-principal", action="append", metavar="TYPE:NAME",
                        help="a principal that may renew the created token")
    parser.add_argument("--max-life-time-period", type=int, metavar="MS",
                        help="longest life of the token; -1: delegation.token.max.lifetime.ms")
    parser.add_argument("--renew-time-period", type=int, metavar="MS",
                        help="renewal period; -1: delegation.token.expiry.time.ms")
    parser.add_argument("--expiry-time-period", type=int, metavar="MS",
                        help="expire this long from now; -1: at once")
    parser.add_argument("--hmac", metavar="BASE64", help="HMAC of the delegation token")
    parser.set_defaults(run=run)


def check_args(args: argparse.Namespace) -> str:
    """The one action; UsageError names what is missing or out of place."""
    chosen = [a for a in _ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --create, --renew, "
                         "--expire or --describe")
    action = chosen[0]
    for name in _REQUIRED[action]:
        if getattr(args, name) is None:
            raise UsageError(f'Missing required argument "[{name.replace("_", "-")}]"')
    for name in _INVALID[action]:
        if getattr(args, name) is not None:
            raise UsageError(f'Option "[{action}]" can\'t be used with option '
                             f'"[{name.replace("_", "-")}]"')
    return action


def _principals(texts: Sequence[str] | None) -> list[KafkaPrincipal]:
    try:
        return [KafkaPrincipal.parse(t.strip()) for t in texts or ()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _hmac(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError("--hmac is not base64") from None


def _date(timestamp_ms: int) -> str:
    """SimpleDateFormat("yyyy-MM-dd'T'HH:mm") in the local time zone, as Kafka's tool."""
    return time.strftime("%Y-%m-%dT%H:%M", time.localtime(timestamp_ms / 1000))


def _principal_list(principals: Sequence[KafkaPrincipal]) -> str:
    """A Java List's toString: [User:alice, User:bob]."""
    return "[" + ", ".join(str(p) for p in principals) + "]"


def _request(sock: socket.socket, api_key: ApiKey, **fields: Any) -> Any:
    answer = round_trip(sock, api_key, VERSIONS[api_key], _reg.requests[api_key].cls(**fields))
    if answer.error_code:
        raise CommandFailed(java_error(ErrorCode(answer.error_code).name, None))
    return answer


class TokenRow(NamedTuple):
    """One line of Kafka's TokenDetails table."""

    token_id: str
    hmac: bytes
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: list[KafkaPrincipal]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int


def print_tokens(tokens: Sequence[TokenRow]) -> None:
    """Kafka's printToken: the header line, then one line per token, each after a blank."""
    row = "\n%-15s %-30s %-15s %-15s %-25s %-15s %-15s %-15s"
    print(row % ("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE",
                 "EXPIRYDATE", "MAXDATE"))
    for t in tokens:
        print(row % (t.token_id, base64.b64encode(t.hmac).decode(), t.owner, t.requester,
                     _principal_list(t.renewers), _date(t.issue_timestamp_ms),
                     _date(t.expiry_timestamp_ms), _date(t.max_timestamp_ms)))


def create_token(sock: socket.socket, args: argparse.Namespace) -> None:
    renewers = _principals(args.renewer_principal)
    owners = _principals(args.owner_principal)
    print(f"Calling create token operation with renewers :{_principal_list(renewers)} , "
          f"max-life-time-period :{args.max_life_time_period}")
    Request = _reg.requests[ApiKey.CREATE_DELEGATION_TOKEN].cls
    answer = _request(
        sock, ApiKey.CREATE_DELEGATION_TOKEN,
        owner_principal_type=owners[0].principal_type if owners else None,
        owner_principal_name=owners[0].name if owners else None,
        renewers=[Request.CreatableRenewers(principal_type=r.principal_type,
                                            principal_name=r.name) for r in renewers],
        max_lifetime_ms=args.max_life_time_period)
    print(f"Created delegation token with tokenId : {answer.token_id}")
    print_tokens([TokenRow(
        answer.token_id, bytes(answer.hmac),
        KafkaPrincipal(answer.principal_type, answer.principal_name),
        KafkaPrincipal(answer.token_requester_principal_type,
                       answer.token_requester_principal_name),
        renewers, answer.issue_timestamp_ms, answer.expiry_timestamp_ms,
        answer.max_timestamp_ms)])


def renew_token(sock: socket.socket, args: argparse.Namespace) -> None:
    _change_expiry(sock, args.hmac, "renew", "renew-time-period", args.renew_time_period,
                   ApiKey.RENEW_DELEGATION_TOKEN, "renew_period_ms")


def expire_token(sock: socket.socket, args: argparse.Namespace) -> None:
    _change_expiry(sock, args.hmac, "expire", "expire-time-period", args.expiry_time_period,
                   ApiKey.EXPIRE_DELEGATION_TOKEN, "expiry_time_period_ms")


def _change_expiry(sock: socket.socket, hmac: str, verb: str, period_name: str,
                   period_ms: int, api_key: ApiKey, period_field: str) -> None:
    print(f"Calling {verb} token operation with hmac :{hmac} , {period_name} :{period_ms}")
    answer = _request(sock, api_key, hmac=_hmac(hmac), **{period_field: period_ms})
    print(f"Completed {verb} operation. New expiry date : {_date(answer.expiry_timestamp_ms)}")


def describe_tokens(sock: socket.socket, args: argparse.Namespace) -> None:
    owners = _principals(args.owner_principal)
    if owners:
        print(f"Calling describe token operation for owners: {_principal_list(owners)}")
    else:
        print("Calling describe token operation for current user.")
    Request = _reg.requests[ApiKey.DESCRIBE_DELEGATION_TOKEN].cls
    answer = _request(sock, ApiKey.DESCRIBE_DELEGATION_TOKEN, owners=[
        Request.DescribeDelegationTokenOwner(principal_type=o.principal_type,
                                             principal_name=o.name)
        for o in owners] if owners else None)
    print(f"Total number of tokens : {len(answer.tokens)}", end="")
    print_tokens([TokenRow(
        t.token_id, bytes(t.hmac), KafkaPrincipal(t.principal_type, t.principal_name),
        KafkaPrincipal(t.token_requester_principal_type, t.token_requester_principal_name),
        [KafkaPrincipal(r.principal_type, r.principal_name) for r in t.renewers],
        t.issue_timestamp, t.expiry_timestamp, t.max_timestamp) for t in answer.tokens])


_RUN = {"create": create_token, "renew": renew_token, "expire": expire_token,
        "describe": describe_tokens}


def run(args: argparse.Namespace) -> int:
    action = check_args(args)
    try:
        with open_connection(args.bootstrap_server, args.command_config, TIMEOUT_S) as sock:
            _RUN[action](sock, args)
    except CommandFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    except SaslAuthenticationError as exc:
        print(java_error("SASL_AUTHENTICATION_FAILED", str(exc)), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    return 0
