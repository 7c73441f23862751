"""TLS contexts from Kafka's `ssl.*` keys, for listeners and for this node's own connections.

PEM only (`ssl.keystore.type=PEM`, `ssl.truststore.type=PEM`): the keystore is a file holding the
private key and the certificate chain (`ssl.keystore.location`), or both inline
(`ssl.keystore.key`, `ssl.keystore.certificate.chain`); `ssl.key.password` decrypts the key.
Every key can be set per listener (`listener.name.<listener>.ssl.*`).

Python's `ssl` module loads keys and certificates only from files, so inline PEM goes through a
private temporary file that is removed as soon as it is loaded.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kafka_ext.security.principal import parse_mapping_rules

if TYPE_CHECKING:
    from kafka_ext.server.config import BrokerConfig

_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


# One setting as a listener sees it (BrokerConfig.listener_setting bound to the listener).
Setting = Callable[[str], Any]


class TlsConfigError(ValueError):
    """A listener's ssl.* settings cannot make a TLS context; the message names the key."""


def server_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The TLS context a listener accepts connections with."""
    setting = _settings(config, listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, setting, listener_name)
    _load_keystore(context, setting, listener_name, required=True)
    client_auth = str(setting("ssl.client.auth") or "none")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, setting, ssl.Purpose.CLIENT_AUTH)
    parse_mapping_rules(str(setting("ssl.principal.mapping.rules") or "DEFAULT"))  # fail early
    return context


def client_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The TLS context this node connects to another node's listener with: it trusts the
    listener's truststore, presents its keystore if it has one (mutual TLS), and checks the
    peer's host name unless ssl.endpoint.identification.algorithm is empty."""
    setting = _settings(config, listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, setting, listener_name)
    _load_keystore(context, setting, listener_name, required=False)
    _load_truststore(context, setting, ssl.Purpose.SERVER_AUTH)
    context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    return context


def _settings(config: BrokerConfig, listener_name: str) -> Setting:
    return lambda key: config.listener_setting(listener_name, key)


def _common(context: ssl.SSLContext, setting: Setting, listener_name: str) -> None:
    versions = [_TLS_VERSIONS[v] for v in setting("ssl.enabled.protocols")]
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    suites = list(setting("ssl.cipher.suites") or ())
    if suites:
        # OpenSSL's names select TLS 1.2 suites; TLS 1.3's five suites cannot be narrowed from
        # Python and stay as OpenSSL orders them.
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites of listener {listener_name}: none of "
                                 f"{','.join(suites)} is a cipher suite OpenSSL knows") from None


def _load_keystore(context: ssl.SSLContext, setting: Setting, listener_name: str,
                   required: bool) -> None:
    location = setting("ssl.keystore.location")
    key, chain = setting("ssl.keystore.key"), setting("ssl.keystore.certificate.chain")
    password = setting("ssl.key.password") or setting("ssl.keystore.password")
    if location and (key or chain):
        raise TlsConfigError(f"listener {listener_name}: set either ssl.keystore.location or "
                             "ssl.keystore.key with ssl.keystore.certificate.chain, not both")
    if bool(key) != bool(chain):
        raise TlsConfigError(f"listener {listener_name}: ssl.keystore.key and "
                             "ssl.keystore.certificate.chain go together")
    try:
        if location:
            context.load_cert_chain(str(location), password=password)
        elif key:
            with _private_file(f"{str(key).strip()}\n{str(chain).strip()}\n") as path:
                context.load_cert_chain(path, password=password)
        elif required:
            raise TlsConfigError(f"listener {listener_name} uses TLS but has no keystore: set "
                                 "ssl.keystore.location or ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain")
    except (ssl.SSLError, OSError) as exc:
        # The message names the setting, never the key material or its password.
        raise TlsConfigError(f"listener {listener_name}: cannot load its keystore "
                             f"({'ssl.keystore.location' if location else 'ssl.keystore.key'}): "
                             f"{getattr(exc, 'reason', None) or exc.strerror or type(exc).__name__}"
                             ) from None


def _load_truststore(context: ssl.SSLContext, setting: Setting, purpose: ssl.Purpose) -> None:
    location, inline = setting("ssl.truststore.location"), setting("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=str(location))
        elif inline:
            context.load_verify_locations(cadata=str(inline))
        else:
            context.load_default_certs(purpose)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"cannot load the truststore: "
                             f"{getattr(exc, 'reason', None) or exc}") from None


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A file only this user can read, holding `text`, removed when the block ends."""
    fd, path = tempfile.mkstemp(prefix="kafka-ext-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text)
        yield path
    finally:
        os.unlink(path)
