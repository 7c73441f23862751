"""KafkaConfig's KRaft cross-key rules: roles, listeners, the quorum, advertising, inter-broker."""

from __future__ import annotations

import pytest

from kafka_ext.server.config import BrokerConfig, ConfigError, Listener, build_config

CONTROLLER_ONLY = {"process.roles": "controller", "node.id": "1",
                   "listeners": "CONTROLLER://h1:9093", "controller.listener.names": "CONTROLLER",
                   "controller.quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093"}
BROKER_ONLY = {"process.roles": "broker", "node.id": "4", "listeners": "PLAINTEXT://h4:9092",
               "controller.listener.names": "CONTROLLER",
               "controller.quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093"}
COMBINED = {"process.roles": "broker,controller", "node.id": "1",
            "listeners": "PLAINTEXT://h1:9092,CONTROLLER://h1:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093"}


def build(base: dict[str, str], **changes: str | None) -> BrokerConfig:
    raw = {"log.dirs": "/tmp/kafka-ext-unit", **base}
    for key, value in changes.items():
        name = key.replace("_", ".")
        if value is None:
            raw.pop(name, None)
        else:
            raw[name] = value
    return build_config(raw)


def refused(key: str, match: str, base: dict[str, str], **changes: str | None) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        build(base, **changes)
    assert err.value.key == key


# -- valid shapes ---------------------------------------------------------------------------


def test_the_three_kraft_node_shapes_are_valid() -> None:
    controller = build(CONTROLLER_ONLY)
    assert controller.is_controller and not controller.is_broker
    assert controller.controller_listeners == (Listener("CONTROLLER", "h1", 9093),)
    broker = build(BROKER_ONLY)
    assert broker.is_broker and not broker.is_controller
    assert broker.inter_broker_listener_name == "PLAINTEXT"
    combined = build(COMBINED)
    assert [lst.name for lst in combined.advertised_listeners] == ["PLAINTEXT"]
    assert not any(c.is_self_quorum for c in (controller, broker, combined))


def test_embedded_default_is_its_own_quorum_without_node_id_or_controller_listener() -> None:
    config = build({})
    assert config.is_self_quorum and config.node_id == 1
    assert config.controller_listeners == ()


def test_combined_node_voting_only_for_itself_is_its_own_quorum() -> None:
    config = build(COMBINED, controller_quorum_voters="1@h1:9093")
    assert config.is_self_quorum


def test_bootstrap_servers_alone_make_a_dynamic_quorum_not_a_self_quorum() -> None:
    config = build(COMBINED, controller_quorum_voters=None,
                   controller_quorum_bootstrap_servers="h1:9093")
    assert not config.is_self_quorum
    assert config.controller_quorum_bootstrap_servers == (("h1", 9093),)


def test_controller_listener_is_advertised_to_voters_by_its_advertised_address() -> None:
    config = build(COMBINED, listeners="PLAINTEXT://:9092,CONTROLLER://:9093",
                   advertised_listeners="PLAINTEXT://b1:9092,CONTROLLER://c1:9093")
    assert config.controller_listeners == (Listener("CONTROLLER", "c1", 9093),)
    assert config.advertised_listeners == (Listener("PLAINTEXT", "b1", 9092),)


def test_default_protocol_map_gives_any_controller_listener_plaintext() -> None:
    config = build(COMBINED, listeners="PLAINTEXT://h1:9092,QUORUM://h1:9093",
                   controller_listener_names="QUORUM")
    assert config.security_protocol("QUORUM") == "PLAINTEXT"


# -- the quorum -------------------------------------------------------------------------------


def test_non_embedded_node_needs_voters_or_bootstrap_servers() -> None:
    refused("controller.quorum.voters", "controller.quorum.bootstrap.servers", BROKER_ONLY,
            controller_quorum_voters=None)
    refused("controller.quorum.voters", "bootstrap", CONTROLLER_ONLY,
            controller_quorum_voters=None)


def test_non_embedded_node_must_set_node_id() -> None:
    refused("node.id", "missing required configuration node.id", BROKER_ONLY, node_id=None)
    refused("node.id", "node.id", COMBINED, node_id=None)


def test_controller_node_id_must_be_a_voter() -> None:
    refused("controller.quorum.voters", "node.id 7 is a controller but not one of the voters",
            CONTROLLER_ONLY, node_id="7")
    refused("controller.quorum.voters", "not one of the voters", COMBINED, node_id="9")


def test_broker_only_node_id_must_not_be_a_voter() -> None:
    refused("controller.quorum.voters", "node.id 2 is a voter", BROKER_ONLY, node_id="2")


def test_voter_ids_must_be_unique() -> None:
    refused("controller.quorum.voters", "appears twice", CONTROLLER_ONLY,
            controller_quorum_voters="1@h1:9093,1@h2:9093")


def test_malformed_voter_names_the_key() -> None:
    refused("controller.quorum.voters", "id@host:port", CONTROLLER_ONLY,
            controller_quorum_voters="h1:9093")


# -- controller listeners ---------------------------------------------------------------------


def test_controller_must_listen_on_its_controller_listener() -> None:
    refused("controller.listener.names", "not in listeners", CONTROLLER_ONLY,
            controller_listener_names="CONTROLLER,OTHER",
            listener_security_protocol_map="CONTROLLER:PLAINTEXT,OTHER:PLAINTEXT")
    refused("controller.listener.names", "not in listeners", COMBINED,
            listeners="PLAINTEXT://h1:9092")


def test_controller_of_a_multi_node_quorum_needs_a_controller_listener_name() -> None:
    refused("controller.listener.names", "at least one", COMBINED,
            controller_listener_names=None, listeners="PLAINTEXT://h1:9092")


def test_controller_only_node_lists_only_controller_listeners() -> None:
    refused("listeners", "must only contain the controller listeners", CONTROLLER_ONLY,
            listeners="CONTROLLER://h1:9093,PLAINTEXT://h1:9092")


def test_broker_only_node_must_not_list_the_controller_listener() -> None:
    refused("controller.listener.names", "must not be in listeners", BROKER_ONLY,
            listeners="PLAINTEXT://h4:9092,CONTROLLER://h4:9093")


def test_broker_only_node_needs_a_controller_listener_name() -> None:
    refused("controller.listener.names", "controllers' listener name", BROKER_ONLY,
            controller_listener_names=None)


def test_controller_listener_name_must_have_a_security_protocol() -> None:
    refused("controller.listener.names", "not in listener.security.protocol.map", BROKER_ONLY,
            listener_security_protocol_map="PLAINTEXT:PLAINTEXT")


def test_every_listener_must_have_a_security_protocol() -> None:
    refused("listeners", "INTERNAL is not in listener.security.protocol.map", BROKER_ONLY,
            listeners="PLAINTEXT://h4:9092,INTERNAL://h4:9094")


# -- advertised listeners ---------------------------------------------------------------------


def test_broker_only_node_must_not_advertise_the_controller_listener() -> None:
    refused("advertised.listeners", "is not in listeners", BROKER_ONLY,
            advertised_listeners="CONTROLLER://h4:9093")


def test_advertised_listeners_cannot_use_the_meta_address() -> None:
    refused("advertised.listeners", "0.0.0.0", BROKER_ONLY,
            listeners="PLAINTEXT://0.0.0.0:9092", advertised_listeners="PLAINTEXT://0.0.0.0:9092")


def test_advertised_listener_must_be_a_listener() -> None:
    refused("advertised.listeners", "EXTERNAL is not in listeners", BROKER_ONLY,
            advertised_listeners="EXTERNAL://h4:9092",
            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,"
                                           "CONTROLLER:PLAINTEXT")


def test_a_broker_needs_a_listener_that_is_not_a_controllers() -> None:
    refused("listeners", "not a controller's", COMBINED, listeners="CONTROLLER://h1:9093",
            controller_quorum_voters="1@h1:9093")


# -- inter-broker listener ------------------------------------------------------------------


def test_inter_broker_listener_defaults_to_security_inter_broker_protocol() -> None:
    refused("security.inter.broker.protocol", "must be one of the advertised broker listeners",
            BROKER_ONLY, listeners="CLIENT://h4:9092",
            listener_security_protocol_map="CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT")
    config = build(BROKER_ONLY, listeners="CLIENT://h4:9092", inter_broker_listener_name="client",
                   listener_security_protocol_map="CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT")
    assert config.inter_broker_listener_name == "CLIENT"


def test_embedded_default_takes_its_first_broker_listener_for_inter_broker() -> None:
    config = build({}, listeners="CLIENT://h1:9092",
                   listener_security_protocol_map="CLIENT:PLAINTEXT")
    assert config.inter_broker_listener_name == "CLIENT"
    refused("security.inter.broker.protocol", "must be one of the advertised broker listeners",
            {}, listeners="CLIENT://h1:9092", listener_security_protocol_map="CLIENT:PLAINTEXT",
            security_inter_broker_protocol="PLAINTEXT")


def test_inter_broker_listener_must_be_an_advertised_broker_listener() -> None:
    refused("inter.broker.listener.name", "must be one of the advertised broker listeners",
            COMBINED, inter_broker_listener_name="CONTROLLER")
    refused("inter.broker.listener.name", "not in listener.security.protocol.map", BROKER_ONLY,
            inter_broker_listener_name="NOWHERE")


def test_inter_broker_listener_name_and_protocol_are_exclusive() -> None:
    refused("inter.broker.listener.name", "only one of", BROKER_ONLY,
            inter_broker_listener_name="PLAINTEXT", security_inter_broker_protocol="PLAINTEXT")


def test_security_inter_broker_protocol_must_be_a_protocol() -> None:
    refused("security.inter.broker.protocol", "must be one of", BROKER_ONLY,
            security_inter_broker_protocol="TLS")


def test_roles_must_be_broker_or_controller() -> None:
    refused("process.roles", "is not one of", BROKER_ONLY, process_roles="broker,zookeeper")
    refused("process.roles", "must not be empty", BROKER_ONLY, process_roles="")
