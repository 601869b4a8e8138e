"""The Python SDK (mcp 2.3.0, pinned in requirements.txt) as a 2026-07-28 client, pinned to
2026-07-28 or in auto mode, against URL: tools, progress, elicitation answered through MRTR by its
callback, a cancelled call, and a subscriptions/listen acknowledgment. Prints one JSON summary,
shaped like modern-client.mjs's so the tests compare the two and the direct and gateway runs."""

import json
import sys

import anyio
import mcp_types as types
from mcp import Client

url, mode = sys.argv[1], sys.argv[2]
asked: list[str] = []


async def elicit(_context, params):
    asked.append(params.message)
    return types.ElicitResult(action="accept", content={"answer": "Ada"})


async def sample(_context, params):
    asked.append(params.messages[0].content.text)
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="a protocol"), model="interop-model"
    )


async def list_roots(_context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])


def texts(result):
    return [{"type": c.type, "text": c.text} for c in result.content]


async def main():
    summary = {}
    client_info = types.Implementation(name="taskgate-interop-python", version="2.3.0")
    async with Client(
        url,
        mode="2026-07-28" if mode == "pin" else "auto",
        client_info=client_info,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=list_roots,
        read_timeout_seconds=30,
    ) as client:
        summary["version"] = client.protocol_version
        tools = (await client.list_tools()).tools
        names = sorted(t.name for t in tools)
        summary["tools"] = names

        def named(suffix):
            return next(n for n in names if n == suffix or n.endswith(f"__{suffix}"))

        summary["echo"] = texts(await client.call_tool(named("echo"), {"text": "hi"}))
        values = []

        async def on_progress(progress, _total, _message):
            values.append(progress)

        reported = await client.call_tool(named("progress"), {"values": [1, 2, 3]}, progress_callback=on_progress)
        summary["progress"] = {"values": values, "content": texts(reported)}
        summary["ask"] = texts(await client.call_tool(named("ask"), {"question": "Name?"}))
        # A server with the sampling and roots tools (the Python reference) is asked for them too.
        if any(n.endswith("summarize") for n in names):
            summary["summarize"] = texts(await client.call_tool(named("summarize"), {"topic": "MCP"}))
            summary["roots"] = texts(await client.call_tool(named("roots"), {}))
        summary["asked"] = asked
        # chatter reports progress, then waits at a gate that never opens: the first progress says
        # the call is in flight upstream, and the caller cancels it then.
        started = anyio.Event()

        async def first_progress(_progress, _total, _message):
            started.set()

        outcome = "completed"
        async with anyio.create_task_group() as group:

            async def chatter():
                await client.call_tool(named("chatter"), {"count": 1, "bytes": 1, "gate": "never"}, progress_callback=first_progress)

            group.start_soon(chatter)
            await started.wait()
            group.cancel_scope.cancel()
            outcome = "cancelled"
        summary["aborted"] = outcome
        async with client.listen(tools_list_changed=True) as subscription:
            summary["listen"] = {"toolsListChanged": bool(subscription.honored.tools_list_changed)}
    print(json.dumps(summary))


anyio.run(main)
