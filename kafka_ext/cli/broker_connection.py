"""A blocking connection to one broker with a client properties file's security settings
(`--command-config`), for the tools that send requests through kafka-ext's codec (`round_trip`).

`security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, as Kafka's clients take it. TLS
trusts `ssl.truststore.location` / `ssl.truststore.certificates` (PEM; librdkafka's
`ssl.ca.location` too), presents `ssl.keystore.location` (a PEM file with the key and chain;
or librdkafka's `ssl.certificate.location` + `ssl.key.location`), and checks the broker's host
name unless `ssl.endpoint.identification.algorithm` is empty. SASL logs in with PLAIN or SCRAM
from `sasl.mechanism` and the username and password of `sasl.jaas.config` (or librdkafka's
`sasl.username` / `sasl.password`). No error message repeats a password.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any

from kafka_ext.cli.client_config import UsageError, read_properties_file
from kafka_ext.client.probe import round_trip
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import (
    PLAIN,
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    SaslClient,
    parse_jaas_options,
)
from kafka_ext.server.config import parse_host_port

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2


class SaslAuthenticationError(Exception):
    """The broker refused the login; the message is the broker's, which names no secret."""


def open_connection(bootstrap_server: str, command_config: str | None,
                    timeout_s: float) -> socket.socket:
    """A socket to the first of `bootstrap_server`'s brokers that accepts a connection, through
    TLS and logged in as the properties file says. UsageError for settings this tool cannot
    use, OSError when no broker can be reached, SaslAuthenticationError for a refused login."""
    props = read_properties_file(command_config) if command_config is not None else {}
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"security.protocol={protocol} is not one of {', '.join(PROTOCOLS)}")
    try:
        servers = [parse_host_port(s.strip()) for s in bootstrap_server.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not servers:
        raise UsageError("--bootstrap-server names no broker")
    context = tls_context(props) if protocol.endswith("SSL") else None
    sasl = sasl_login(props) if protocol.startswith("SASL") else None
    for host, port in servers:
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            break
        except OSError:
            if (host, port) == servers[-1]:
                raise
    try:
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        if sasl is not None:
            log_in(sock, *sasl)
    except BaseException:
        sock.close()
        raise
    return sock


def tls_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client TLS context from Java's (or librdkafka's) `ssl.*` client properties."""
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = props.get(key, "PEM").strip().upper()
        if kind not in ("PEM", ""):
            raise UsageError(f"{key}={kind} is not supported by this tool; use PEM")
    if props.get("ssl.keystore.key"):
        raise UsageError("ssl.keystore.key is not supported by this tool; put the key and its "
                         "certificate chain in a PEM file named by ssl.keystore.location")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        location = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
        if location:
            context.load_verify_locations(cafile=location)
        elif props.get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=props["ssl.truststore.certificates"])
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        keystore = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
        if keystore:
            context.load_cert_chain(keystore, keyfile=props.get("ssl.key.location") or None,
                                    password=props.get("ssl.key.password") or None)
    except (ssl.SSLError, OSError) as exc:
        # Names the file's problem, never the key password.
        raise UsageError(f"cannot load the TLS settings of the client properties: "
                         f"{getattr(exc, 'reason', None) or exc.strerror or exc}") from None
    context.check_hostname = bool(props.get("ssl.endpoint.identification.algorithm", "https"))
    return context


def sasl_login(props: Mapping[str, str]) -> tuple[str, str, str]:
    """(mechanism, username, password) from `sasl.mechanism` and `sasl.jaas.config`."""
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism != PLAIN and mechanism not in SCRAM_MECHANISMS:
        raise UsageError(f"sasl.mechanism={mechanism} is not supported by this tool; use PLAIN, "
                         "SCRAM-SHA-256 or SCRAM-SHA-512")
    options: dict[str, str] = {}
    if props.get("sasl.jaas.config"):
        try:
            options = parse_jaas_options(props["sasl.jaas.config"])
        except ValueError as exc:
            raise UsageError(f"sasl.jaas.config: {exc}") from None
    username = options.get("username", props.get("sasl.username"))
    password = options.get("password", props.get("sasl.password"))
    if username is None or password is None:
        raise UsageError("SASL needs a username and a password in sasl.jaas.config")
    return mechanism, username, password


def log_in(sock: socket.socket, mechanism: str, username: str, password: str) -> None:
    """SaslHandshake v1, then SaslAuthenticate v2 rounds until the mechanism completes."""
    reg = registry()
    handshake = round_trip(sock, ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                           reg["SaslHandshakeRequest"].cls(mechanism=mechanism))
    if handshake.error_code:
        raise SaslAuthenticationError(f"Unsupported SASL mechanism {mechanism}; the broker "
                                      f"offers {', '.join(handshake.mechanisms)}")
    client = SaslClient(mechanism, username, password)
    token: bytes | None = client.first()
    Authenticate: Any = reg["SaslAuthenticateRequest"].cls
    while token is not None:
        answer = round_trip(sock, ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
                            Authenticate(auth_bytes=token))
        if answer.error_code:
            raise SaslAuthenticationError(answer.error_message or "Authentication failed")
        try:
            token = client.answer(bytes(answer.auth_bytes))
        except AuthenticationFailed as exc:
            raise SaslAuthenticationError(str(exc)) from None
