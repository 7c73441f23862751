"""Decoder fuzzing: garbage and mangled frames either decode or raise DecodeError, nothing else.

The contract is h11's (STYLE.md rule 1): a decoder handed bad bytes raises only DecodeError, and
bounds every length against the bytes left before allocating. Inputs are capped at
MAX_CASE_BYTES, so a decoder that is linear in its input cannot hang here. Seeded: a failure
names its message, version and iteration and replays exactly.
"""

from __future__ import annotations

import random
import struct
import tracemalloc
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.framing import decode_request_header
from kafka_ext.protocol.messages import MessageType, registry
from kafka_ext.protocol.schema import FieldSpec, StructSpec
from tests.unit.protocol.strategies import INT_RANGES, all_message_versions

MAX_CASE_BYTES = 4096
REQUEST_ITERATIONS = 3000   # spread over every request (message, version)
RESPONSE_ITERATIONS = 1000  # responses are decoded by our client only: a lighter pass
SEED = 0x6B61666B61  # "kafka"

REQUEST_PAIRS = all_message_versions(("request",))
RESPONSE_PAIRS = all_message_versions(("response",))
REQUEST_NAMES = sorted({name for name, _ in REQUEST_PAIRS})
RESPONSE_NAMES = sorted({name for name, _ in RESPONSE_PAIRS})


# -- a seeded filler for valid messages ----------------------------------------------------

def random_message(rng: random.Random, mtype: MessageType, version: int) -> Any:
    """A valid message for `version` with random contents (arrays of 0-3 items)."""
    return _random_struct(rng, mtype.cls, mtype.spec.struct, version)


def _random_struct(rng: random.Random, cls: type, spec: StructSpec, version: int) -> Any:
    kwargs = {}
    for f in spec.fields:
        if version in f.versions:
            kwargs[f.attr] = _random_field(rng, cls, f, version)
    return cls(**kwargs)


def _random_field(rng: random.Random, parent: type, f: FieldSpec, version: int) -> Any:
    if version in f.nullable_versions and rng.random() < 0.2:
        return None
    if f.is_array:
        return [_random_element(rng, parent, f, version) for _ in range(rng.randint(0, 3))]
    return _random_element(rng, parent, f, version)


def _random_element(rng: random.Random, parent: type, f: FieldSpec, version: int) -> Any:
    if f.struct is not None:
        return _random_struct(rng, getattr(parent, f.struct.name), f.struct, version)
    t = f.element_type
    if t in INT_RANGES:
        low, high = INT_RANGES[t]
        return rng.choice((0, 1, low, high, max(low, -1), rng.randint(low, high)))
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.uniform(-1e9, 1e9)
    if t == "string":
        return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600") for _ in range(rng.randint(0, 6)))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 20))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    raise AssertionError(f"unhandled type {t}")


# -- mutations -----------------------------------------------------------------------------

def _flip_bits(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)


def _truncate(rng: random.Random, data: bytearray) -> None:
    del data[rng.randrange(len(data)):]


def _overwrite_int32(value: int) -> Callable[[random.Random, bytearray], None]:
    def mutate(rng: random.Random, data: bytearray) -> None:
        if len(data) >= 4:
            pos = rng.randrange(len(data) - 3)
            data[pos:pos + 4] = struct.pack(">i", value)
    return mutate


def _huge_int16(rng: random.Random, data: bytearray) -> None:
    if len(data) >= 2:
        pos = rng.randrange(len(data) - 1)
        data[pos:pos + 2] = struct.pack(">h", rng.choice((0x7FFF, -2, -0x8000, 1000)))


def _huge_uvarint(rng: random.Random, data: bytearray) -> None:
    pos = rng.randrange(len(data) + 1)
    data[pos:pos] = rng.choice((b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01",
                                b"\x80\x80\x80\x80\x80\x80", b"\xfe\xff\xff\xff\x07"))


def _random_negative_count(rng: random.Random, data: bytearray) -> None:
    _overwrite_int32(rng.choice((-2, -3, -1000, -(2**31))))(rng, data)


def _insert_garbage(rng: random.Random, data: bytearray) -> None:
    pos = rng.randrange(len(data) + 1)
    data[pos:pos] = rng.randbytes(rng.randint(1, 16))


def _delete_span(rng: random.Random, data: bytearray) -> None:
    pos = rng.randrange(len(data))
    del data[pos:pos + rng.randint(1, 8)]


MUTATIONS: tuple[Callable[[random.Random, bytearray], None], ...] = (
    _flip_bits, _truncate, _overwrite_int32(2**31 - 1), _overwrite_int32(0x7FFFFF00),
    _huge_int16, _huge_uvarint, _random_negative_count, _insert_garbage, _delete_span,
)


def _case(rng: random.Random, mtype: MessageType, version: int) -> bytes:
    """Random bytes one time in five, else a valid encoding with one to three mutations."""
    if rng.random() < 0.2:
        return rng.randbytes(rng.randint(0, 64))
    data = bytearray(mtype.encode(random_message(rng, mtype, version), version))
    for _ in range(rng.randint(1, 3)):
        if data:
            rng.choice(MUTATIONS)(rng, data)
    return bytes(data[:MAX_CASE_BYTES])


def _assert_contract(decode: Callable[[bytes], Any], data: bytes, where: str) -> None:
    try:
        decode(data)
    except DecodeError:
        pass
    except Exception as exc:  # the contract under test: anything else is a decoder bug
        raise AssertionError(f"{where}: {type(exc).__name__}: {exc} on {data.hex()}") from exc


def _fuzz(name: str, versions: list[int], iterations_per_version: int) -> None:
    mtype = registry()[name]
    rng = random.Random(f"{SEED}-{name}")
    for version in versions:
        for i in range(iterations_per_version):
            data = _case(rng, mtype, version)
            where = f"{name} v{version} iteration {i}"
            decode: Callable[[bytes], Any]
            if i % 2:
                decode = partial(mtype.decode_all, version=version)
            else:
                decode = partial(_decode_within, mtype, version=version)
            _assert_contract(decode, data, where)


def _decode_within(mtype: MessageType, data: bytes, version: int) -> Any:
    message, end = mtype.decode(data, version)
    assert 0 <= end <= len(data), f"decoder ended at {end} of {len(data)}"
    return message


# -- fuzz tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", REQUEST_NAMES)
def test_request_decoder_raises_only_decode_error_on_mangled_bytes(name: str) -> None:
    versions = [v for n, v in REQUEST_PAIRS if n == name]
    _fuzz(name, versions, max(4, REQUEST_ITERATIONS // len(REQUEST_PAIRS)))


@pytest.mark.parametrize("name", RESPONSE_NAMES)
def test_response_decoder_raises_only_decode_error_on_mangled_bytes(name: str) -> None:
    versions = [v for n, v in RESPONSE_PAIRS if n == name]
    _fuzz(name, versions, max(2, RESPONSE_ITERATIONS // len(RESPONSE_PAIRS)))


def test_request_header_decoder_raises_only_decode_error_on_garbage() -> None:
    rng = random.Random(SEED)
    for i in range(500):
        api_key, api_version = rng.choice(REQUEST_PAIRS + [("?", 0)])
        key = registry()[api_key].api_key if api_key != "?" else rng.randint(-5, 32767)
        prefix = struct.pack(">hhi", key, api_version, rng.getrandbits(31))
        data = prefix + rng.randbytes(rng.randint(0, 12))
        _assert_contract(decode_request_header, data[: rng.randint(0, len(data))], f"case {i}")


# -- explicit hostile inputs ---------------------------------------------------------------

def _produce_v3_prefix() -> bytes:
    """ProduceRequest v3 up to its topic_data count: null transactional id, acks, timeout."""
    return struct.pack(">hhi", -1, -1, 1000)


def test_truncated_message_is_a_decode_error_at_every_cut() -> None:
    mtype = registry()["MetadataResponse"]
    rng = random.Random(SEED)
    for version in mtype.versions:
        encoded = mtype.encode(random_message(rng, mtype, version), version)
        for cut in range(len(encoded)):
            with pytest.raises(DecodeError):
                mtype.decode_all(encoded[:cut], version)


def test_string_length_past_the_end_is_a_decode_error() -> None:
    mtype = registry()["FindCoordinatorRequest"]  # v1: key (string) first
    with pytest.raises(DecodeError):
        mtype.decode(struct.pack(">h", 500) + b"short", 1)


def test_bytes_length_past_the_end_is_a_decode_error() -> None:
    mtype = registry()["SaslAuthenticateRequest"]  # v0: auth_bytes (bytes)
    with pytest.raises(DecodeError):
        mtype.decode(struct.pack(">i", 2**31 - 1) + b"0123456789", 0)


def test_compact_string_length_past_the_end_is_a_decode_error() -> None:
    mtype = registry()["SaslAuthenticateRequest"]  # v2: compact bytes
    with pytest.raises(DecodeError):
        mtype.decode(b"\xff\xff\xff\xff\x07" + b"0123456789", 2)


def test_array_length_minus_two_is_a_decode_error() -> None:
    mtype = registry()["ProduceRequest"]
    with pytest.raises(DecodeError):
        mtype.decode(_produce_v3_prefix() + struct.pack(">i", -2) + bytes(10), 3)


def test_nullable_array_negative_length_reads_as_null_as_in_kafka() -> None:
    """Kafka's Java reads any negative length of a nullable array as null; so do we."""
    mtype = registry()["MetadataRequest"]  # v1+: topics is nullable
    message = mtype.decode_all(struct.pack(">i", -1), 1)
    assert message.topics is None


@pytest.mark.parametrize("count", [2**31 - 1, 2**31 - 2, 1 << 20, 11])
def test_absurd_array_count_fails_fast_without_allocating(count: int) -> None:
    mtype = registry()["ProduceRequest"]
    data = _produce_v3_prefix() + struct.pack(">i", count) + bytes(10)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            mtype.decode(data, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"peak {peak} bytes while rejecting a count of {count}"


@pytest.mark.parametrize("count", [2**31 - 1, 1 << 20, 3])
def test_absurd_fixed_width_array_count_fails_fast(count: int) -> None:
    mtype = registry()["ElectLeadersRequest"]
    # v1: election_type, topic_partitions[1] = {topic "t", partitions: []int32 of `count`}
    data = (struct.pack(">bi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", count)
            + bytes(10))
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            mtype.decode(data, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"peak {peak} bytes while rejecting a count of {count}"


def test_compact_array_count_past_the_end_is_a_decode_error() -> None:
    mtype = registry()["MetadataRequest"]  # v12: topics is a compact nullable array first
    with pytest.raises(DecodeError):
        mtype.decode(b"\xff\xff\xff\xff\x07" + bytes(10), 12)


def test_tagged_field_size_past_the_end_is_a_decode_error() -> None:
    mtype = registry()["ApiVersionsRequest"]
    body = b"\x02a\x02b" + b"\x01" + b"\x05" + b"\xff\xff\x03" + b"xx"
    with pytest.raises(DecodeError):
        mtype.decode(body, 3)


def test_known_tagged_field_with_a_wrong_size_is_a_decode_error() -> None:
    mtype = registry()["ApiVersionsResponse"]
    # error_code, empty api_keys, throttle_time_ms, one tag: FinalizedFeaturesEpoch (int64)
    # declared as 2 bytes long
    body = b"\x00\x00" + b"\x01" + bytes(4) + b"\x01" + b"\x01" + b"\x02" + bytes(8)
    with pytest.raises(DecodeError):
        mtype.decode(body, 3)


def test_overlong_uvarint_is_a_decode_error() -> None:
    mtype = registry()["MetadataRequest"]
    with pytest.raises(DecodeError):
        mtype.decode(b"\x80\x80\x80\x80\x80\x80\x01", 12)


def test_invalid_utf8_is_a_decode_error() -> None:
    mtype = registry()["FindCoordinatorRequest"]
    with pytest.raises(DecodeError):
        mtype.decode(struct.pack(">h", 2) + b"\xff\xfe" + b"\x00", 1)


def test_unknown_version_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        registry()["ProduceRequest"].decode(b"", 999)
