"""The wire fuzzer's sans-IO parts (tests/wire_fuzz/): the schema walk, the mutations, and
the judge's plan of what a broker may do with a stream of frames."""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from kafka_ext.protocol.framing import (
    decode_request_header,
    encode_request,
    encode_response,
    response_header_version,
)
from kafka_ext.protocol.messages import registry
from tests.wire_fuzz import judge as judge_module
from tests.wire_fuzz.corpus import load_corpus
from tests.wire_fuzz.judge import Verdict, judge, plan
from tests.wire_fuzz.mutate import MUTATIONS, encode_site, mutant, uvarint
from tests.wire_fuzz.walk import walk

CORPUS = load_corpus()
RANGES = {k: (m.versions.lowest, m.versions.highest or 0)
          for k, m in registry().requests.items()}


def test_walk_ends_where_the_codec_ends_for_every_recorded_request() -> None:
    for seed in CORPUS:
        w = walk(seed.frame)
        body = seed.frame[4:]
        _, pos = decode_request_header(body)
        _, end = registry().requests[seed.api_key].decode(body, seed.api_version, pos)
        assert w.complete and w.body_end == end + 4, seed.name


def test_walk_finds_counts_lengths_tags_and_every_batch_field() -> None:
    produce = next(s for s in CORPUS if s.name == "confluent-00-Produce-v10-none-plain.bin")
    w = walk(produce.frame)
    kinds = Counter(s.kind for s in w.sites)
    assert kinds["count"] >= 2 and kinds["length"] >= 3 and kinds["tag_count"] >= 4
    assert kinds["batch"] == 13 * len(w.batches) and kinds["record"] > 0
    counts = [s for s in w.sites if s.name.endswith(".records_count")]
    assert all(struct.unpack_from(">i", produce.frame, s.pos)[0] == s.value for s in counts)


def test_mutant_is_a_pure_function_of_seed_and_iteration() -> None:
    first = [mutant(CORPUS, 5, i) for i in range(200)]
    assert first == [mutant(CORPUS, 5, i) for i in range(200)]
    assert len({m.data for m in first}) > 190
    assert mutant(CORPUS, 6, 0) != first[0]


def test_every_mutation_kind_is_drawn_within_a_few_thousand_iterations() -> None:
    drawn = Counter(line.split(":", 1)[0] for i in range(3000)
                    for line in mutant(CORPUS, 9, i).mutations)
    assert {name for _, name, _ in MUTATIONS} <= set(drawn)


def test_size_prefix_matches_the_frame_unless_the_mutation_lies_about_it() -> None:
    for i in range(500):
        m = mutant(CORPUS, 11, i)
        if any("size prefix kept" in line or line.startswith("frame_size") for line in m.mutations):
            continue
        (size,) = struct.unpack_from(">i", m.data)
        assert size == len(m.data) - 4 or "followed by the unmutated request" in m.mutations[-1]


def test_compact_lengths_are_written_plus_one() -> None:
    flexible = next(s for s in CORPUS if s.name == "confluent-03-Metadata-v12-named.bin")
    site = next(s for s in walk(flexible.frame).sites if s.compact)
    assert encode_site(site, -1) == b"\x00" and encode_site(site, 200) == uvarint(201)


def _frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"c"
    if registry().requests[api_key].is_flexible(version):
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_plan_expects_an_answer_for_a_decodable_request() -> None:
    frame = _frame(18, 3, b"\x02a\x021\x00")  # ApiVersions v3: software name "a", version "1"
    p = plan(frame, RANGES)
    assert [(e.must, e.correlation_id) for e in p.frames] == [("answer", 7)]
    assert not p.pending and not p.ends_closed


def test_plan_expects_a_close_for_an_undecodable_request_and_stops_there() -> None:
    frame = _frame(3, 12, b"\x05")  # Metadata v12: a topics count with nothing after it
    p = plan(frame + frame, RANGES)
    assert [e.must for e in p.frames] == ["close"] and p.ends_closed


def test_plan_of_a_size_prefix_that_lies_high_waits_and_one_past_the_limit_closes() -> None:
    frame = bytearray(_frame(18, 3, b"\x02a\x021\x00"))
    struct.pack_into(">i", frame, 0, len(frame))  # four more bytes than there are
    assert plan(bytes(frame), RANGES).pending
    struct.pack_into(">i", frame, 0, 104857601)
    assert plan(bytes(frame), RANGES).ends_closed
    struct.pack_into(">i", frame, 0, -1)
    assert plan(bytes(frame), RANGES).ends_closed


def test_plan_lets_an_unsupported_api_versions_be_answered_at_v0() -> None:
    [expected] = plan(_frame(18, 99, b""), RANGES).frames
    assert (expected.must, expected.decode_as) == ("answer", (18, 0))


# -- the judge against fake brokers ---------------------------------------------------------------


def _produce_frame(acks: int, correlation_id: int) -> bytes:
    cls = registry()["ProduceRequest"].cls
    request = cls(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[])
    return encode_request(0, 9, correlation_id, "t", request)


async def _judge_against(answer: Callable[[bytes], bytes | None], data: bytes) -> Verdict:
    """Run `judge` against a server that answers each request frame with answer(body)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                reply = answer(await reader.readexactly(size))
                if reply is not None:
                    writer.write(reply)
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await judge(data, "127.0.0.1", port, RANGES)
    finally:
        server.close()


def _kafka_like(body: bytes) -> bytes | None:
    """Answers like Kafka: nothing for acks=0, an empty response otherwise."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", body)
    if api_key == 0 and struct.unpack_from(">h", body, 8 + 2 + 1 + 2)[0] == 0:
        return None
    response_type = registry().responses[api_key]
    parts = encode_response(correlation_id, response_header_version(api_key, version),
                            response_type, version, response_type.cls())
    return b"".join(bytes(p) for p in parts)


def test_judge_pins_the_answer_on_the_request_after_an_acks_zero_produce() -> None:
    # Both carry correlation id 3: the one answer belongs to the acks=1 produce.
    data = _produce_frame(0, 3) + _produce_frame(1, 3)
    verdict = asyncio.run(_judge_against(_kafka_like, data))
    assert (verdict.failure, verdict.outcome, verdict.answers) == (None, "answered", 1)


def test_judge_calls_a_decodable_request_left_unanswered_a_hang(monkeypatch: Any) -> None:
    monkeypatch.setattr(judge_module, "ANSWER_TIMEOUT_S", 0.2)
    verdict = asyncio.run(_judge_against(lambda body: None, _produce_frame(1, 5)))
    assert verdict.failure is not None and verdict.failure.startswith("hang")


def test_judge_calls_a_foreign_correlation_id_a_failure() -> None:
    def wrong(body: bytes) -> bytes | None:
        reply = bytearray(_kafka_like(body) or b"")
        struct.pack_into(">i", reply, 4, 99)
        return bytes(reply)

    verdict = asyncio.run(_judge_against(wrong, _produce_frame(1, 5)))
    assert verdict.failure is not None and "correlation id 99" in verdict.failure


def test_judge_calls_an_answered_acks_zero_produce_a_failure() -> None:
    def answers_everything(body: bytes) -> bytes | None:
        api_key, version, correlation_id = struct.unpack_from(">hhi", body)
        response_type = registry().responses[api_key]
        parts = encode_response(correlation_id, response_header_version(api_key, version),
                                response_type, version, response_type.cls())
        return b"".join(bytes(p) for p in parts)

    verdict = asyncio.run(_judge_against(answers_everything, _produce_frame(0, 5)))
    assert verdict.failure == "an acks=0 produce (correlation id 5) was answered"
