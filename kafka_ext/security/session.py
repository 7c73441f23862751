"""A listener's security settings and each connection's security state.

`ListenerSecurity` is built once per listener at start-up (and fails start-up with a message
naming the key when its settings do not hold together). Every connection then carries a
`ConnectionSecurity`: its principal, and on SASL listeners whether it has authenticated yet
and until when (KIP-368 sessions).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from kafka_ext.security.principal import (
    ANONYMOUS,
    USER_TYPE,
    KafkaPrincipal,
    certificate_subject,
    map_subject,
    parse_mapping_rules,
)
from kafka_ext.security.sasl import PLAIN, SaslServer, parse_jaas_options, plain_users
from kafka_ext.security.tls import client_context, server_context

if TYPE_CHECKING:
    from kafka_ext.server.config import BrokerConfig


# Kafka's sasl.server.max.receive.size default: the largest frame before a SASL login.
DEFAULT_MAX_RECEIVE_BYTES = 524288


class SecurityConfigError(ValueError):
    """A listener's security settings are unusable; the message names the key."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What a listener asks of its connections; immutable once the listener is up."""

    listener: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    mapping_rules: tuple = ()
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    reauth_ms: int = 0
    failed_authentication_delay_ms: int = 0
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def new_connection(self) -> ConnectionSecurity:
        return ConnectionSecurity(self, authenticated=not self.uses_sasl)

    def certificate_principal(self, ssl_object: ssl.SSLObject | None) -> KafkaPrincipal:
        """An SSL connection's principal: its certificate's subject through the mapping rules,
        ANONYMOUS without a certificate; NoMappingRule when no rule applies."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, map_subject(certificate_subject(der), self.mapping_rules))


PLAINTEXT_LISTENER = ListenerSecurity("PLAINTEXT", "PLAINTEXT")


@dataclass(slots=True)
class ConnectionSecurity:
    """One connection's principal and SASL progress; touched only on the event loop."""

    listener: ListenerSecurity
    authenticated: bool
    principal: KafkaPrincipal = ANONYMOUS
    mechanism: str | None = None
    # Logged in with a delegation token (KIP-48): such a principal may not manage tokens.
    token_authenticated: bool = False
    # The SASL exchange under way, and whether the client skipped Kafka's framing for it
    # (SaslHandshake v0: raw size-prefixed tokens follow, no SaslAuthenticate).
    exchange: SaslServer | None = None
    raw_tokens: bool = False
    # When the SASL session ends (time.monotonic()); None: never (connections.max.reauth.ms=0).
    session_expires_at: float | None = None

    def session_expired(self) -> bool:
        expires = self.session_expires_at
        return expires is not None and time.monotonic() >= expires


def listener_security(config: BrokerConfig, listener_name: str) -> ListenerSecurity:
    """Build a listener's security from its (possibly listener-prefixed) settings."""
    protocol = config.security_protocol(listener_name)
    setting = config.listener_setting
    context = None
    rules: tuple = ()
    if protocol in ("SSL", "SASL_SSL"):
        try:
            context = server_context(config, listener_name)
        except ValueError as exc:
            raise SecurityConfigError(str(exc)) from None
        rules = parse_mapping_rules(str(setting(listener_name, "ssl.principal.mapping.rules")))
    if not protocol.startswith("SASL_"):
        return ListenerSecurity(listener_name, protocol, context, rules)
    enabled = cast(Iterable[object], setting(listener_name, "sasl.enabled.mechanisms") or ())
    mechanisms = tuple(str(m) for m in enabled)
    if not mechanisms:
        raise SecurityConfigError(f"listener {listener_name} uses {protocol} but "
                                  "sasl.enabled.mechanisms is empty")
    users: dict[str, str] = {}
    if PLAIN in mechanisms:
        jaas = jaas_config(config, listener_name, PLAIN)
        if jaas is None:
            raise SecurityConfigError(
                f"listener {listener_name} offers PLAIN but has no JAAS config: set "
                f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config with "
                "user_NAME=\"password\" entries")
        users = plain_users(jaas)
    return ListenerSecurity(
        listener_name, protocol, context, rules, mechanisms, users,
        reauth_ms=int(str(setting(listener_name, "connections.max.reauth.ms"))),
        failed_authentication_delay_ms=int(
            str(setting(listener_name, "connection.failed.authentication.delay.ms"))),
        max_receive_bytes=int(str(setting(listener_name, "sasl.server.max.receive.size"))))


def jaas_config(config: BrokerConfig, listener_name: str, mechanism: str) -> dict[str, str] | None:
    """The JAAS options for `mechanism` on a listener: listener.name.<l>.<mechanism>.
    sasl.jaas.config, else sasl.jaas.config; None when neither is set."""
    text = config.listener_setting(listener_name, f"{mechanism.lower()}.sasl.jaas.config")
    if text is None:
        text = config.values.get("sasl.jaas.config")
    if text is None:
        return None
    try:
        return parse_jaas_options(str(text))
    except ValueError as exc:
        raise SecurityConfigError(f"the {mechanism} JAAS config of listener {listener_name}: "
                                  f"{exc}") from None


@dataclass(frozen=True, slots=True)
class NodeClientSecurity:
    """How this node connects to another node's listener: TLS, and the SASL login it uses."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)


PLAINTEXT_CLIENT = NodeClientSecurity("PLAINTEXT")


def node_client_security(config: BrokerConfig, listener_name: str | None,
                         mechanism_key: str) -> NodeClientSecurity:
    """This node's side of a link to `listener_name` (the inter-broker or a controller
    listener); `mechanism_key` names the SASL mechanism setting (sasl.mechanism.inter.broker.
    protocol or sasl.mechanism.controller.protocol). Its login is the username and password of
    that listener's JAAS config for the mechanism, as Kafka's brokers take theirs."""
    if listener_name is None:
        return PLAINTEXT_CLIENT
    protocol = config.listener_security_protocol_map.get(listener_name.upper(), "PLAINTEXT")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            context = client_context(config, listener_name)
        except ValueError as exc:
            raise SecurityConfigError(str(exc)) from None
    if not protocol.startswith("SASL_"):
        return NodeClientSecurity(protocol, context)
    mechanism = str(config.values[mechanism_key])
    if mechanism != PLAIN and listener_name.upper() in config.controller_listener_names:
        # As in Kafka: SCRAM credentials live in the metadata the controllers serve, so a
        # quorum that has not formed yet could not check them.
        raise SecurityConfigError(f"{mechanism_key}={mechanism}: the controllers' listener "
                                  f"{listener_name} cannot use SCRAM, whose credentials are "
                                  "kept in the cluster metadata; use PLAIN")
    options = jaas_config(config, listener_name, mechanism) or {}
    if "username" not in options or "password" not in options:
        raise SecurityConfigError(
            f"{mechanism_key}={mechanism} on listener {listener_name} needs this node's login: "
            f"username=\"...\" password=\"...\" in listener.name.{listener_name.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config")
    return NodeClientSecurity(protocol, context, mechanism, options["username"],
                              options["password"])
