"""NodeChannels against a real loopback peer that accepts and then misbehaves."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from kafka_ext.client.probe import api_versions_request
from kafka_ext.network.node_client import NodeChannels
from kafka_ext.protocol.api_keys import NODE_SOFTWARE_NAME, ApiKey


async def test_a_connect_that_fails_after_its_caller_timed_out_reports_nothing_unretrieved(
        ) -> None:
    """A request that gives up while its connection is still being opened (the peer accepted
    but has not answered ApiVersions) leaves the connect running; when that connect then
    fails, nobody awaits it, and it must not end as 'Task exception was never retrieved'."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # never answers

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    channels = NodeChannels(lambda _: ("127.0.0.1", port), "kafka-ext-test-1")
    try:
        with pytest.raises(TimeoutError):
            await channels.request(2, ApiKey.API_VERSIONS, 3,
                                   api_versions_request(NODE_SOFTWARE_NAME), 0.2)
        for writer in accepted:
            writer.close()  # the peer goes away: the orphaned connect fails
        for _ in range(50):
            if not channels._connecting:
                break
            await asyncio.sleep(0.01)
        assert not channels._connecting
        gc.collect()
        await asyncio.sleep(0)
        assert unhandled == []
    finally:
        await channels.close()
        server.close()
        await server.wait_closed()
