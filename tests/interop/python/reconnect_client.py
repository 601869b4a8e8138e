"""The official Python SDK client (mcp 1.29, 2025-11-25) calling the conformance fixture
`test_reconnection`, whose server closes the call's stream before the response (basic/transports,
SEP-1699): the client resumes with GET and Last-Event-ID. reconnect_client.py URL; prints one JSON
object: the result's text, or the error.
"""

import json
import sys
from datetime import timedelta

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url):
    out = {}
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=15)) as session:
            await session.initialize()
            try:
                result = await session.call_tool("test_reconnection", {})
                out["text"] = result.content[0].text
            except Exception as e:  # noqa: BLE001 - the error is the test's finding
                out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out))


anyio.run(main, sys.argv[1])
