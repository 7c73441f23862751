"""Certificates for the security tests, made fresh by each test run (never committed).

One CA signs the broker's certificate (for localhost / 127.0.0.1) and client certificates;
a second, unrelated CA and an expired client certificate give the cases a broker must refuse.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pem:
    """A certificate and its key as PEM files, and the key alone."""

    cert: Path
    key: Path
    keystore: Path  # key + certificate chain in one file, as ssl.keystore.location reads it


@dataclass(frozen=True)
class TlsMaterial:
    ca: Path  # the trusted CA certificate (PEM)
    broker: Pem
    client: Pem  # CN=client,OU=test,O=kafka-ext
    expired_client: Pem
    untrusted_ca: Path
    untrusted_broker: Pem  # signed by untrusted_ca


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafka-ext"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "test"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(directory: Path, name: str) -> tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def _leaf(directory: Path, name: str, ca_cert: x509.Certificate,
          ca_key: ec.EllipticCurvePrivateKey, expired: bool = False) -> Pem:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
                  if expired else (now - datetime.timedelta(days=1),
                                   now + datetime.timedelta(days=30)))
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    paths = Pem(directory / f"{name}.crt", directory / f"{name}.key",
                directory / f"{name}.keystore.pem")
    paths.cert.write_bytes(cert_pem)
    paths.key.write_bytes(key_pem)
    paths.keystore.write_bytes(key_pem + cert_pem)
    return paths


def make_tls_material(directory: Path) -> TlsMaterial:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_cert, ca_key = _ca(directory, "test-ca")
    untrusted, other_cert, other_key = _ca(directory, "untrusted-ca")
    return TlsMaterial(
        ca=ca,
        broker=_leaf(directory, "broker", ca_cert, ca_key),
        client=_leaf(directory, "client", ca_cert, ca_key),
        expired_client=_leaf(directory, "expired-client", ca_cert, ca_key, expired=True),
        untrusted_ca=untrusted,
        untrusted_broker=_leaf(directory, "impostor", other_cert, other_key),
    )
