"""SCRAM and PLAIN exchanges, credential specs, JAAS options, certificate principal rules,
and the controller's SCRAM and ACL records."""

from __future__ import annotations

import pytest

from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.security_control import (
    ScramDeletion,
    ScramUpsertion,
    acl_creation_records,
    acl_deletion_records,
    scram_changes,
)
from kafka_ext.controller.snapshot import image_records
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.security.acl import AclEntry, AclFilter
from kafka_ext.security.principal import NoMappingRule, map_subject, parse_mapping_rules
from kafka_ext.security.sasl import (
    AuthenticationFailed,
    PlainServer,
    SaslClient,
    ScramServer,
    credential_from_spec,
    parse_jaas_options,
    parse_scram_spec,
    salted_password,
)


def _exchange(server: object, client: SaslClient) -> None:
    token: bytes | None = client.first()
    while token is not None:
        challenge = server.evaluate(token)  # type: ignore[attr-defined]
        token = client.answer(challenge)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_logs_in_with_the_right_password_only(mechanism: str) -> None:
    credential = credential_from_spec(mechanism, {"password": "s3cret", "iterations": "4096"})
    lookup = {("alice", mechanism): credential}
    server = ScramServer(mechanism, lambda user, mech: lookup.get((user, mech)))
    _exchange(server, SaslClient(mechanism, "alice", "s3cret"))
    assert server.complete and server.username == "alice"
    for user, password in (("alice", "wrong"), ("nobody", "s3cret")):
        refused = ScramServer(mechanism, lambda u, m: lookup.get((u, m)))
        with pytest.raises(AuthenticationFailed, match="invalid credentials"):
            _exchange(refused, SaslClient(mechanism, user, password))
    garbage = ScramServer(mechanism, lambda u, m: lookup.get((u, m)))
    with pytest.raises(AuthenticationFailed):
        garbage.evaluate(b"\xff\x00not scram")


def test_plain_checks_users_and_authorization_id() -> None:
    server = PlainServer({"alice": "pw"})
    assert server.evaluate(b"\0alice\0pw") == b"" and server.username == "alice"
    for token, problem in ((b"\0alice\0nope", "Invalid username or password"),
                           (b"\0bob\0pw", "Invalid username or password"),
                           (b"carol\0alice\0pw", "authorization id"),
                           (b"alice-pw", "expected 3 tokens")):
        with pytest.raises(AuthenticationFailed, match=problem):
            PlainServer({"alice": "pw"}).evaluate(token)


def test_specs_jaas_and_salted_passwords() -> None:
    mechanism, fields = parse_scram_spec('SCRAM-SHA-512=[name=alice,iterations=8192,'
                                         'password="a,b=c"]')
    assert mechanism == "SCRAM-SHA-512"
    assert fields == {"name": "alice", "iterations": "8192", "password": "a,b=c"}
    with pytest.raises(ValueError, match="SCRAM-SHA-256=\\[key=value"):
        parse_scram_spec("SCRAM-SHA-1=[password=x]")
    with pytest.raises(ValueError, match="between 4096 and 16384"):
        credential_from_spec("SCRAM-SHA-256", {"password": "x", "iterations": "10"})
    options = parse_jaas_options('org.apache.kafka.common.security.scram.ScramLoginModule '
                                 'required username="broker" password="p\\"w" user_x=y;')
    assert options == {"username": "broker", "password": 'p"w', "user_x": "y"}
    with pytest.raises(ValueError, match="required"):
        parse_jaas_options('username="x"')
    # RFC 7677's test vector for SCRAM-SHA-256: Hi("pencil", salt, 4096).
    import base64
    salted = salted_password("SCRAM-SHA-256", "pencil",
                             base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)
    assert base64.b64encode(salted).decode() == "xKSVEDI6tPlSysH6mUQZOeeOp01r6B3fcJbodRPcYV0="


def test_certificate_subjects_map_through_the_rules() -> None:
    rules = parse_mapping_rules("RULE:^CN=([^,]*),OU=ops,.*$/$1@ops/L, "
                                "RULE:^CN=(.*?),O=(.*)$/$2\\/$1/U,DEFAULT")
    assert map_subject("CN=Alice,OU=ops,O=example", rules) == "alice@ops"
    assert map_subject("CN=bob,O=acme", rules) == "ACME/BOB"
    assert map_subject("O=nobody", rules) == "O=nobody"
    strict = parse_mapping_rules("RULE:^CN=(.*)$/$1/")
    with pytest.raises(NoMappingRule):
        map_subject("O=nobody", strict)
    with pytest.raises(ValueError):
        parse_mapping_rules("RULE:broken")


def test_scram_changes_refuse_per_user_and_survive_a_snapshot() -> None:
    upsert = ScramUpsertion("alice", 1, 4096, b"salt", b"salted")
    records, outcomes = scram_changes(MetadataImage(), [], [
        upsert, ScramUpsertion("bob", 2, 100, b"s", b"p"),
        ScramUpsertion("carol", 1, 4096, b"s", b"p"), ScramUpsertion("carol", 1, 4096, b"s", b"p"),
        ScramUpsertion("dave", 9, 4096, b"s", b"p")])
    assert outcomes["alice"] == (ErrorCode.NONE, None)
    assert outcomes["bob"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert outcomes["carol"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert outcomes["dave"][0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert [r.name for r in records] == ["alice"]
    image = MetadataImage().apply_all(0, [("UserScramCredentialRecord", r) for r in records])
    assert set(image.scram_credentials["alice"]) == {"SCRAM-SHA-256"}
    _, missing = scram_changes(image, [ScramDeletion("bob", 1)], [])
    assert missing["bob"][0] == ErrorCode.RESOURCE_NOT_FOUND
    acl = AclEntry(2, "t", 3, "User:alice", "*", 3, 3)
    acl_records, acl_outcomes = acl_creation_records(image, [acl, acl])
    assert acl_outcomes == [(ErrorCode.NONE, None)] * 2 and len(acl_records) == 1
    image = image.apply_all(1, [("AccessControlEntryRecord", r) for r in acl_records])
    rebuilt = MetadataImage().apply_all(
        0, [(_name(r), r)
            for r in image_records(image)])
    assert rebuilt.scram_credentials == image.scram_credentials
    assert list(rebuilt.acls.values()) == [acl]
    removals, matched = acl_deletion_records(image, [AclFilter(2), AclFilter(2)])
    assert len(removals) == 1 and matched == [[acl], [acl]]


def _name(record: object) -> str:
    return type(record).__name__
