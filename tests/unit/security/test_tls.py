"""TLS contexts from Kafka's ssl.* keys: PEM files, inline PEM, encrypted keys, per-listener
overrides, and errors that name the key but never the secret."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from kafka_ext.security.session import SecurityConfigError, listener_security
from kafka_ext.security.tls import TlsConfigError, client_context, server_context
from kafka_ext.server.config import BrokerConfig, build_config
from tests.tls_material import TlsMaterial, make_tls_material


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def config(tmp_path: Path, **settings: str) -> BrokerConfig:
    return build_config({"log.dirs": str(tmp_path), "listeners": "SSL://127.0.0.1:0",
                         **settings})


def test_a_keystore_file_and_client_auth(tmp_path: Path, tls: TlsMaterial) -> None:
    cfg = config(tmp_path, **{"ssl.keystore.location": str(tls.broker.keystore),
                              "ssl.truststore.location": str(tls.ca),
                              "listener.name.ssl.ssl.client.auth": "required",
                              "ssl.enabled.protocols": "TLSv1.3"})
    context = server_context(cfg, "SSL")
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3
    plain = server_context(config(tmp_path, **{
        "ssl.keystore.location": str(tls.broker.keystore)}), "SSL")
    assert plain.verify_mode == ssl.CERT_NONE


def test_inline_pem_with_an_encrypted_key(tmp_path: Path, tls: TlsMaterial) -> None:
    key = serialization.load_pem_private_key(tls.broker.key.read_bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-secret")).decode()
    chain = tls.broker.cert.read_text()
    good = config(tmp_path, **{"ssl.keystore.key": encrypted,
                               "ssl.keystore.certificate.chain": chain,
                               "ssl.key.password": "key-secret",
                               "ssl.truststore.certificates": tls.ca.read_text()})
    server_context(good, "SSL")
    assert client_context(good, "SSL").check_hostname
    wrong = config(tmp_path, **{"ssl.keystore.key": encrypted,
                                "ssl.keystore.certificate.chain": chain,
                                "ssl.key.password": "not-it"})
    with pytest.raises(TlsConfigError) as refused:
        server_context(wrong, "SSL")
    assert "ssl.keystore.key" in str(refused.value)
    assert "not-it" not in str(refused.value) and "PRIVATE KEY" not in str(refused.value)


def test_missing_or_contradictory_keystores_are_refused(tmp_path: Path, tls: TlsMaterial) -> None:
    with pytest.raises(SecurityConfigError, match="has no keystore"):
        listener_security(config(tmp_path), "SSL")
    both = config(tmp_path, **{"ssl.keystore.location": str(tls.broker.keystore),
                               "ssl.keystore.key": tls.broker.key.read_text(),
                               "ssl.keystore.certificate.chain": tls.broker.cert.read_text()})
    with pytest.raises(TlsConfigError, match="either ssl.keystore.location"):
        server_context(both, "SSL")
    bad_suites = config(tmp_path, **{"ssl.keystore.location": str(tls.broker.keystore),
                                     "ssl.cipher.suites": "NOT-A-SUITE"})
    with pytest.raises(TlsConfigError, match="ssl.cipher.suites"):
        server_context(bad_suites, "SSL")
