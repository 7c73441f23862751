"""One asyncio connection to one broker: ApiVersions v3 first, then pipelined requests.

Mirrors Kafka's `KafkaChannel` as `NetworkClient` drives it: every request gets the next
correlation id, any number may be in flight, and the broker answers them in order, so each
response must match the oldest outstanding id. The first request names our client
(`api_keys.CLIENT_SOFTWARE_NAME`, KIP-511), which is what shows the connection the proposals'
APIs (docs/protocol.md, "Audiences"). A request that times out closes the connection, as Kafka
does: the answers after it could no longer be trusted to line up.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from kafka_ext.client.probe import CLIENT_SOFTWARE_VERSION
from kafka_ext.protocol.api_keys import CLIENT_SOFTWARE_NAME, ApiKey
from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.framing import SIZE, decode_response, encode_request
from kafka_ext.protocol.messages import registry

log = logging.getLogger(__name__)

API_VERSIONS_VERSION = 3  # the first version that carries ClientSoftwareName (KIP-511)
# The largest response frame we buffer; checked before reading the body (a lying size costs
# nothing). Fetch answers are bounded by the consumer's fetch_max_bytes, far below this.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 30_000


class BrokerConnectionError(KafkaError):
    """The connection failed or was closed with requests outstanding; retriable."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


@dataclass(slots=True)
class _InFlight:
    """A sent request waiting for its answer; the deque of these is in send order."""

    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Any]


class BrokerConnection:
    """A connection to `host:port`, open after `connect()` until `close()` or a failure.

    Not thread-safe: one event loop owns it. Requests may be issued concurrently by many
    tasks; the write order of their frames is their order on the wire.
    """

    def __init__(self, host: str, port: int, *, client_id: str = "kafka-ext-client",
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS, node_id: int = -1) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        # (lowest, highest) version of each API the broker offered us.
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._next_correlation_id = 0
        self._closed_error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection(node {self.node_id} at {self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed_error is not None or self._writer is None

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    async def connect(self) -> None:
        """Open the socket and learn the broker's API versions, naming our client."""
        timeout_s = self.request_timeout_ms / 1000
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), timeout_s)
        except (OSError, TimeoutError) as exc:
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        request = registry()["ApiVersionsRequest"].cls(
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=CLIENT_SOFTWARE_VERSION)
        answer = await self.request(ApiKey.API_VERSIONS, request, version=API_VERSIONS_VERSION)
        if answer.error_code != ErrorCode.NONE:
            error = KafkaError(ErrorCode(answer.error_code), "ApiVersions refused")
            await self.close(error)
            raise error
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    def version_for(self, api_key: int, highest: int, lowest: int = 0) -> int:
        """The newest version of `api_key` both sides speak, at most `highest`.

        Raises KafkaError(UNSUPPORTED_VERSION) when the broker does not offer the API (an
        extension API on a stock Kafka broker, for example) or no version in [lowest, highest].
        """
        offered = self.api_versions.get(api_key)
        if offered is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"{self} does not offer API {_api_name(api_key)}")
        version = min(highest, offered[1])
        if version < max(lowest, offered[0]):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"{self} offers {_api_name(api_key)} v{offered[0]}-{offered[1]}, "
                             f"we need v{lowest}-{highest}")
        return version

    def supports(self, api_key: int) -> bool:
        return api_key in self.api_versions

    async def request(self, api_key: int, body: Any, *, version: int,
                      timeout_ms: int | None = None, expect_response: bool = True) -> Any:
        """Send one request and return the decoded response body.

        `expect_response=False` is for Produce with acks=0, which the broker never answers.
        Raises BrokerConnectionError when the connection fails and KafkaError(REQUEST_TIMED_OUT)
        after `timeout_ms` (default: the connection's request timeout), closing the connection.
        """
        if self._closed_error is not None:
            raise self._closed_error
        if self._writer is None:
            raise BrokerConnectionError(f"{self} is not connected")
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._in_flight.append(_InFlight(correlation_id, api_key, version, future))
        self._writer.write(frame)  # synchronous: frames leave in the order of the deque
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            error = BrokerConnectionError(f"{self}: write failed: {exc}")
            await self.close(error)
            raise error from exc
        if future is None:
            return None
        timeout_s = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            timed_out = KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                   f"{self}: no answer to {_api_name(api_key)} in {timeout_s:.1f}s")
            await self.close(timed_out)
            raise timed_out from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = SIZE.unpack(await self._reader.readexactly(SIZE.size))
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise BrokerConnectionError(f"{self}: response frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                self._complete(frame)
        except asyncio.CancelledError:
            raise
        except asyncio.IncompleteReadError:
            self._fail_all(BrokerConnectionError(f"{self}: closed by the broker"))
        except OSError as exc:
            self._fail_all(BrokerConnectionError(f"{self}: {exc}"))
        except KafkaError as exc:
            self._fail_all(exc)

    def _complete(self, frame: bytes) -> None:
        """Hand a response frame to the oldest request, which it must answer."""
        if not self._in_flight:
            raise BrokerConnectionError(f"{self}: a response nobody asked for")
        waiting = self._in_flight.popleft()
        try:
            correlation_id, body = decode_response(frame, waiting.api_key, waiting.version)
        except DecodeError as exc:
            if not waiting.future.done():
                waiting.future.set_exception(exc)
            raise BrokerConnectionError(f"{self}: undecodable response: {exc}") from exc
        if correlation_id != waiting.correlation_id:
            raise BrokerConnectionError(
                f"{self}: answer to request {correlation_id}, expected {waiting.correlation_id}")
        if not waiting.future.done():  # a caller that timed out has closed us already
            waiting.future.set_result(body)

    def _fail_all(self, error: KafkaError) -> None:
        if self._closed_error is None:
            self._closed_error = error
            log.debug("%s failed: %s", self, error)
        while self._in_flight:
            waiting = self._in_flight.popleft()
            if not waiting.future.done():
                waiting.future.set_exception(error)
                waiting.future.exception()  # mark retrieved: a shielded waiter may be gone
        if self._writer is not None:
            self._writer.close()

    async def close(self, error: KafkaError | None = None) -> None:
        """Close the socket; outstanding requests fail with `error` (default: closed by us)."""
        self._fail_all(error or BrokerConnectionError(f"{self}: closed"))
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
            try:
                await self._read_task
            except asyncio.CancelledError:
                pass
            self._read_task = None
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except OSError:
                pass


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
