"""Requests recorded from kafka-python, confluent-kafka and aiokafka (tests/data/wire_corpus/):
golden bytes for the codec. Each decodes, and encodes back to the same bytes."""

from __future__ import annotations

import pytest

from kafka_ext.protocol.framing import SIZE, decode_request_header, encode_request
from kafka_ext.protocol.messages import registry
from tests.wire_fuzz.corpus import Seed, load_corpus

CORPUS = load_corpus()


def test_corpus_holds_every_client_and_the_apis_they_use() -> None:
    assert {s.client for s in CORPUS} == {"confluent", "kafka-python", "aiokafka"}
    keys = {s.api_key for s in CORPUS}
    # Produce, Fetch, ListOffsets, Metadata, groups, ApiVersions, admin, transactions, KIP-848.
    assert keys >= {0, 1, 2, 3, 8, 9, 10, 11, 13, 14, 18, 19, 20, 22, 24, 26, 28, 32, 68}
    assert sum(len(s.frame) for s in CORPUS) < 64 * 1024


@pytest.mark.parametrize("seed", CORPUS, ids=lambda s: s.name)
def test_recorded_request_decodes_and_encodes_back_to_its_bytes(seed: Seed) -> None:
    (size,) = SIZE.unpack_from(seed.frame)
    assert size == len(seed.frame) - 4
    body = seed.frame[4:]
    header, pos = decode_request_header(body)
    assert (header.request_api_key, header.request_api_version) == (seed.api_key,
                                                                    seed.api_version)
    request, end = registry().requests[seed.api_key].decode(body, seed.api_version, pos)
    # librdkafka's all-topics Metadata v12 carries three bytes after the body; nothing else does.
    assert len(body) - end == (3 if seed.name == "confluent-03-Metadata-v12-all.bin" else 0)
    again = encode_request(seed.api_key, seed.api_version, header.correlation_id,
                           header.client_id, request)
    assert again[4:] == body[:end]
