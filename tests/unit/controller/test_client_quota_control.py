"""Client quota validation and DescribeClientQuotas matching (Kafka's ClientQuotaControlManager
and ClientQuotasImage.describe), and their replay into the metadata image."""

from __future__ import annotations

import pytest

from kafka_ext.controller.client_quota_control import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    FilterComponent,
    QuotaAlteration,
    QuotaChange,
    alter_client_quotas,
    describe_client_quotas,
    quota_entity,
)
from kafka_ext.controller.image import MetadataImage
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.protocol.messages import registry

ALICE = quota_entity([(USER, "alice")])
DEFAULT_USER = quota_entity([(USER, None)])
ALICE_C1 = quota_entity([(USER, "alice"), (CLIENT_ID, "c1")])
C1 = quota_entity([(CLIENT_ID, "c1")])
DEFAULT_CLIENT = quota_entity([(CLIENT_ID, None)])


def alter(current: dict, entity: tuple, *ops: tuple[str, float | None]
          ) -> tuple[list[QuotaChange], KafkaError | None]:
    changes, results = alter_client_quotas(current, [QuotaAlteration(entity, tuple(ops))])
    return changes, results[entity]


def test_valid_ops_become_one_change_per_changed_key() -> None:
    current = {ALICE: {"producer_byte_rate": 1024.0, "request_percentage": 50.0}}
    changes, error = alter(current, ALICE, ("producer_byte_rate", 1024.0),
                           ("consumer_byte_rate", 2048.0), ("request_percentage", None))
    assert error is None
    assert changes == [QuotaChange(ALICE, "consumer_byte_rate", 2048.0),
                       QuotaChange(ALICE, "request_percentage", None)]


def test_removing_an_unset_key_writes_nothing() -> None:
    assert alter({}, C1, ("producer_byte_rate", None)) == ([], None)


@pytest.mark.parametrize(("entity", "ops", "message"), [
    (ALICE, [("bogus_rate", 1.0)], "Invalid configuration key bogus_rate"),
    (ALICE, [("producer_byte_rate", -5.0)], "must be greater than 0"),
    (ALICE, [("request_percentage", 0.0)], "must be greater than 0"),
    (ALICE, [("producer_byte_rate", 10.5)], "cannot be a fractional value"),
    (ALICE, [("consumer_byte_rate", float("nan"))], "finite"),
    (quota_entity([("group", "g")]), [("producer_byte_rate", 1.0)],
     "Unhandled client quota entity type: group"),
    (quota_entity([(USER, "")]), [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ((), [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    (quota_entity([("ip", "1.2.3.4")]), [("connection_creation_rate", 1.0)], "ip"),
])
def test_bad_input_fails_the_entity_with_invalid_request_and_changes_nothing(
        entity: tuple, ops: list, message: str) -> None:
    changes, error = alter({}, entity, ("controller_mutation_rate", 5.0), *ops)
    assert changes == []
    assert error is not None and error.code == ErrorCode.INVALID_REQUEST
    assert message in error.message


def test_one_bad_entity_leaves_the_others_to_go_ahead() -> None:
    changes, results = alter_client_quotas({}, [
        QuotaAlteration(ALICE, (("producer_byte_rate", -1.0),)),
        QuotaAlteration(C1, (("producer_byte_rate", 100.0),)),
    ])
    assert changes == [QuotaChange(C1, "producer_byte_rate", 100.0)]
    assert results[C1] is None and results[ALICE] is not None


def test_an_entity_listed_twice_is_refused_the_second_time() -> None:
    _, results = alter_client_quotas({}, [
        QuotaAlteration(ALICE, (("producer_byte_rate", 1.0),)),
        QuotaAlteration(ALICE, (("producer_byte_rate", 2.0),)),
    ])
    error = results[ALICE]
    assert error is not None and "Ignoring duplicate entity" in error.message


QUOTAS = {
    ALICE: {"producer_byte_rate": 1.0},
    DEFAULT_USER: {"producer_byte_rate": 2.0},
    ALICE_C1: {"producer_byte_rate": 3.0},
    C1: {"producer_byte_rate": 4.0},
    DEFAULT_CLIENT: {"producer_byte_rate": 5.0},
}


def matched(*components: FilterComponent, strict: bool = False) -> set[tuple]:
    return {entity for entity, _ in describe_client_quotas(QUOTAS, components, strict)}


def test_describe_matches_exact_default_and_any_name() -> None:
    assert matched(FilterComponent(USER, MATCH_EXACT, "alice")) == {ALICE, ALICE_C1}
    assert matched(FilterComponent(USER, MATCH_EXACT, "alice"), strict=True) == {ALICE}
    assert matched(FilterComponent(USER, MATCH_DEFAULT, None), strict=True) == {DEFAULT_USER}
    assert matched(FilterComponent(USER, MATCH_SPECIFIED, None), strict=True) == {
        ALICE, DEFAULT_USER}
    assert matched(FilterComponent(CLIENT_ID, MATCH_SPECIFIED, None)) == {
        ALICE_C1, C1, DEFAULT_CLIENT}
    assert matched(FilterComponent(USER, MATCH_SPECIFIED, None),
                   FilterComponent(CLIENT_ID, MATCH_EXACT, "c1"), strict=True) == {ALICE_C1}
    assert matched() == set(QUOTAS)
    assert matched(strict=True) == set()


@pytest.mark.parametrize(("components", "code"), [
    ([FilterComponent(USER, MATCH_EXACT, None)], ErrorCode.INVALID_REQUEST),
    ([FilterComponent(USER, MATCH_DEFAULT, "x")], ErrorCode.INVALID_REQUEST),
    ([FilterComponent(USER, 7, None)], ErrorCode.INVALID_REQUEST),
    ([FilterComponent(USER, MATCH_SPECIFIED, None)] * 2, ErrorCode.INVALID_REQUEST),
    ([FilterComponent("", MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST),
    ([FilterComponent("group", MATCH_SPECIFIED, None)], ErrorCode.UNSUPPORTED_VERSION),
    ([FilterComponent("ip", MATCH_SPECIFIED, None),
      FilterComponent(USER, MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST),
])
def test_describe_refuses_bad_filters_with_kafkas_codes(components: list, code: ErrorCode
                                                       ) -> None:
    with pytest.raises(KafkaError) as raised:
        describe_client_quotas(QUOTAS, components, False)
    assert raised.value.code == code


def test_client_quota_records_replay_into_the_image() -> None:
    cls = registry()["ClientQuotaRecord"].cls

    def record(key: str, value: float, remove: bool = False) -> tuple[str, object]:
        return "ClientQuotaRecord", cls(
            entity=[cls.EntityData(entity_type=CLIENT_ID, entity_name="c1"),
                    cls.EntityData(entity_type=USER, entity_name="alice")],
            key=key, value=value, remove=remove)

    image = MetadataImage().apply_all(0, [record("producer_byte_rate", 10.0),
                                          record("consumer_byte_rate", 20.0)])
    assert image.client_quotas == {ALICE_C1: {"producer_byte_rate": 10.0,
                                              "consumer_byte_rate": 20.0}}
    image = image.apply_all(2, [record("producer_byte_rate", 0.0, remove=True),
                                record("consumer_byte_rate", 0.0, remove=True)])
    assert image.client_quotas == {}
