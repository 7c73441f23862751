"""Sends one mutant to a live broker and judges what comes back (Kafka's bad-input contract).

The bytes are first cut into frames the way the broker's framing will cut them (`plan`, pure).
For each whole frame our codec tells what the broker may do: a request that does not decode,
or names an API or version the broker does not serve, must close the connection; one that
decodes must be answered, with its correlation id and a response that decodes for its API
and version, or the connection closed; an acks=0 produce may go unanswered; a long-polling
Fetch, JoinGroup or SyncGroup may hold its answer. Answers come in request order. Anything
else (no answer and no close by the deadline, a foreign correlation id, an answer that does
not decode, bytes nobody asked for) is a failure. When every frame was answered and nothing
is left half-sent, an ApiVersions probe on the same connection must be answered too.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.framing import decode_request_header, decode_response, encode_request
from kafka_ext.protocol.messages import registry

# How long a broker may take to answer (or close) before the request counts as hung.
ANSWER_TIMEOUT_S = 10.0
# A Fetch that waits longer than this, and JoinGroup/SyncGroup, may long-poll: their answers
# are awaited only this briefly, then the connection is dropped.
AWAITED_FETCH_WAIT_MS = 1000
LONG_POLL_GRACE_S = 0.3
# With part of a frame still unsent, the broker must wait quietly; listened to this long.
PENDING_LISTEN_S = 0.05
DEFAULT_MAX_REQUEST_BYTES = 104857600
PROBE_CORRELATION_ID = 0x7E57AB1E
_SIZE = struct.Struct(">i")
_LONG_POLL_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})


@dataclass(frozen=True, slots=True)
class Expected:
    """What the broker may do with one whole frame."""

    correlation_id: int
    api_key: int
    api_version: int
    must: str  # "answer", "close", "silent-ok" (acks=0), "slow-ok" (long poll), "any"
    decode_as: tuple[int, int] | None  # how to decode its answer (None: don't)
    wait_s: float  # how long its answer may take


@dataclass(frozen=True, slots=True)
class Plan:
    frames: tuple[Expected, ...]
    ends_closed: bool  # the broker must close after the last planned frame
    pending: bool  # bytes of an unfinished frame follow: the broker must wait for the rest


def expect_frame(body: bytes, ranges: dict[int, tuple[int, int]]) -> Expected:
    """What the broker may do with one whole frame body (size prefix excluded)."""
    if len(body) < 8:
        return Expected(-1, -1, -1, "close", None, ANSWER_TIMEOUT_S)
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", body)
    served = ranges.get(api_key)
    if served is None:
        # Kafka's share-group keys (76/77 are ours) are answered in Kafka's format, others closed.
        return Expected(correlation_id, api_key, api_version, "any", None, ANSWER_TIMEOUT_S)
    if not served[0] <= api_version <= served[1]:
        if api_key == ApiKey.API_VERSIONS:  # KIP-511: answered at v0 with the ranges
            return Expected(correlation_id, api_key, api_version, "answer", (api_key, 0),
                            ANSWER_TIMEOUT_S)
        return Expected(correlation_id, api_key, api_version, "close", None, ANSWER_TIMEOUT_S)
    mtype = registry().requests[api_key]
    try:
        _, pos = decode_request_header(body)
        request, _ = mtype.decode(body, api_version, pos)
    except DecodeError:
        if api_key == ApiKey.API_VERSIONS:  # Kafka answers a garbled ApiVersions with an error
            return Expected(correlation_id, api_key, api_version, "any", None, ANSWER_TIMEOUT_S)
        return Expected(correlation_id, api_key, api_version, "close", None, ANSWER_TIMEOUT_S)
    decode_as = (api_key, api_version)
    if api_key == ApiKey.PRODUCE and request.acks == 0:
        return Expected(correlation_id, api_key, api_version, "silent-ok", decode_as,
                        ANSWER_TIMEOUT_S)
    if api_key == ApiKey.FETCH:
        if request.max_wait_ms > AWAITED_FETCH_WAIT_MS:
            return Expected(correlation_id, api_key, api_version, "slow-ok", decode_as,
                            LONG_POLL_GRACE_S)
        return Expected(correlation_id, api_key, api_version, "answer", decode_as,
                        ANSWER_TIMEOUT_S + max(request.max_wait_ms, 0) / 1000)
    if api_key in _LONG_POLL_APIS:
        return Expected(correlation_id, api_key, api_version, "slow-ok", decode_as,
                        LONG_POLL_GRACE_S)
    return Expected(correlation_id, api_key, api_version, "answer", decode_as, ANSWER_TIMEOUT_S)


def plan(data: bytes, ranges: dict[int, tuple[int, int]],
         max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Plan:
    """Cut `data` into frames as the broker will, and say what each may get."""
    frames: list[Expected] = []
    pos = 0
    while True:
        if len(data) - pos < 4:
            return Plan(tuple(frames), False, len(data) > pos)
        (size,) = _SIZE.unpack_from(data, pos)
        if not 0 <= size <= max_request_bytes:
            return Plan(tuple(frames), True, False)  # refused on its prefix alone
        if len(data) - pos - 4 < size:
            return Plan(tuple(frames), False, True)
        expected = expect_frame(data[pos + 4:pos + 4 + size], ranges)
        frames.append(expected)
        pos += 4 + size
        if expected.must == "close":
            return Plan(tuple(frames), True, False)


@dataclass(slots=True)
class Verdict:
    """What happened on the connection; `failure` is None when the broker kept the contract."""

    outcome: str  # "answered", "closed", "pending", "long-poll", "silent"
    failure: str | None = None
    answers: int = 0
    local_port: int = 0
    notes: list[str] = field(default_factory=list)


class _Closed(Exception):
    pass


async def _read_frame(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    try:
        (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))
        return await asyncio.wait_for(reader.readexactly(size), ANSWER_TIMEOUT_S)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise _Closed from exc


def _check_answer(frame: bytes, expected: Expected) -> str | None:
    """None if `frame` is a fitting answer to `expected`, else what is wrong with it."""
    if len(frame) < 4:
        return f"answer of {len(frame)} bytes"
    (correlation_id,) = struct.unpack_from(">i", frame)
    if correlation_id != expected.correlation_id:
        return (f"answer with correlation id {correlation_id}, expected "
                f"{expected.correlation_id}")
    if expected.decode_as is not None:
        try:
            decode_response(frame, *expected.decode_as)
        except DecodeError as exc:
            return (f"answer to key {expected.api_key} v{expected.api_version} does not decode "
                    f"({exc}): {frame[:200].hex()}")
    return None


def _probe_frame() -> bytes:
    body = registry()["ApiVersionsRequest"].cls(client_software_name="wire-fuzz",
                                                client_software_version="1")
    return encode_request(ApiKey.API_VERSIONS, 3, PROBE_CORRELATION_ID, "wire-fuzz", body)


_PROBE = Expected(PROBE_CORRELATION_ID, ApiKey.API_VERSIONS, 3, "answer",
                  (ApiKey.API_VERSIONS, 3), ANSWER_TIMEOUT_S)


async def judge(data: bytes, host: str, port: int, ranges: dict[int, tuple[int, int]],
                max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Verdict:
    """Send `data` on a fresh connection and check the broker's behaviour against the plan."""
    p = plan(data, ranges, max_request_bytes)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                            ANSWER_TIMEOUT_S)
    verdict = Verdict("answered", local_port=writer.get_extra_info("sockname")[1])
    try:
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), ANSWER_TIMEOUT_S)
        except ConnectionError:
            verdict.outcome = "closed"
            return verdict
        await _follow(p, reader, writer, verdict)
    finally:
        writer.transport.abort()
    return verdict


async def _follow(p: Plan, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  verdict: Verdict) -> None:
    queue = list(p.frames)
    try:
        while queue:
            head = queue[0]
            if all(e.must == "silent-ok" for e in queue):
                break  # nothing is due: what follows (the probe, a close) shows the rest
            if head.must == "close":
                await _expect_close(reader, verdict, "a request that must close the connection")
                return
            wait_s = max(e.wait_s for e in queue)
            try:
                answer = await _read_frame(reader, wait_s if head.must != "slow-ok"
                                           else head.wait_s)
            except TimeoutError:
                if head.must == "slow-ok" or all(e.must in ("silent-ok", "slow-ok")
                                                 for e in queue):
                    verdict.outcome = "long-poll"
                    return
                verdict.failure = (f"hang: no answer to key {head.api_key} "
                                   f"v{head.api_version} (correlation id "
                                   f"{head.correlation_id}) within {wait_s:.1f}s")
                return
            # An acks=0 produce is never answered (Kafka's rule): the answer is for a later frame.
            while queue[0].must == "silent-ok":
                queue.pop(0)
            problem = _check_answer(answer, queue[0])
            if problem is not None:
                verdict.failure = _acks_zero_answered(answer, p) or problem
                return
            verdict.answers += 1
            queue.pop(0)
        if p.ends_closed:
            await _expect_close(reader, verdict, "a size prefix past the limit")
            return
        if p.pending:
            try:
                extra = await asyncio.wait_for(reader.read(65536), PENDING_LISTEN_S)
            except TimeoutError:
                verdict.outcome = "pending"
                return
            except ConnectionError:
                extra = b""
            if extra:
                verdict.failure = f"{len(extra)} unasked-for bytes: {extra[:64].hex()}"
            else:
                verdict.outcome = "closed"
            return
        writer.write(_probe_frame())
        await asyncio.wait_for(writer.drain(), ANSWER_TIMEOUT_S)
        try:
            answer = await _read_frame(reader, ANSWER_TIMEOUT_S)
        except TimeoutError:
            verdict.failure = "hang: the probe after the answered requests got no answer"
            return
        problem = _check_answer(answer, _PROBE)
        if problem is not None:
            verdict.failure = _acks_zero_answered(answer, p) or f"probe: {problem}"
            return
        if not verdict.answers:
            verdict.outcome = "silent"
    except (_Closed, ConnectionError):
        verdict.outcome = "closed"


def _acks_zero_answered(answer: bytes, p: Plan) -> str | None:
    """Name the failure when a misplaced answer carries an acks=0 produce's correlation id."""
    (correlation_id,) = struct.unpack_from(">i", answer) if len(answer) >= 4 else (None,)
    if any(e.must == "silent-ok" and e.correlation_id == correlation_id for e in p.frames):
        return f"an acks=0 produce (correlation id {correlation_id}) was answered"
    return None


async def _expect_close(reader: asyncio.StreamReader, verdict: Verdict, what: str) -> None:
    try:
        extra = await asyncio.wait_for(reader.read(65536), ANSWER_TIMEOUT_S)
    except TimeoutError:
        verdict.failure = f"hang: {what} left the connection open for {ANSWER_TIMEOUT_S}s"
        return
    except ConnectionError:
        extra = b""
    if extra:
        verdict.failure = f"{what} was answered: {extra[:64].hex()}"
        return
    verdict.outcome = "closed"


def advertised(api_versions_response: Any) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from a decoded ApiVersions response."""
    return {k.api_key: (k.min_version, k.max_version) for k in api_versions_response.api_keys}
