"""The Python SDK (mcp 2.3.0, pinned in requirements.txt) as a 2026-07-28 server: an upstream
peer the interop tests put behind the gateway and compare with talking to it directly.

    modern_server.py http             serves streamable HTTP on 127.0.0.1, a free port
    modern_server.py stdio HOST:PORT  serves stdio; reports its events to HOST:PORT over TCP

The tools are the demo's and the TypeScript reference's: echo, progress, ask (an elicitation,
through MRTR at 2026-07-28), chatter (progress, then a gate that opens only when the call is
cancelled); `summarize` and `roots`, which ask the client for a sampling and for its roots
(through MRTR too); and its own: `grow` adds a tool named by its argument and publishes
tools/list_changed, `touch` publishes an update of the resource memo://note (both to
`subscriptions/listen` streams), `log` logs one message at each of four levels (the request's
logLevel filters them).

Events go out one JSON object a line: on stdout for HTTP (first {"port": N}), on the TCP
connection for stdio (stdout is the protocol there): {"event": E} with E "started" when a
chatter call reaches its gate, "cancelled" when one is cancelled, "listening" (with "uris",
its resource filter) when a `subscriptions/listen` stream subscribes."""

import json
import socket
import sys
import warnings
from typing import Annotated

import anyio
import mcp_types as types
import uvicorn
from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, ElicitationResult, ListRoots, MCPServer, Resolve, Sample
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.server.transport_security import TransportSecuritySettings

# Logging is deprecated in 2026-07-28 (SEP-2577) and the SDK warns of each use; this server
# logs only to show that the level reaches it.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28")

transport = sys.argv[1]
report_to = None
if transport == "stdio":
    host, port = sys.argv[2].rsplit(":", 1)
    report_to = socket.create_connection((host, int(port)))

def report(event):
    line = json.dumps(event) + "\n"
    if report_to is None:
        sys.stdout.write(line)
        sys.stdout.flush()
    else:
        report_to.sendall(line.encode())


bus = InMemorySubscriptionBus()
mcp = MCPServer("python-reference", version="2.3.0", subscriptions=bus, log_level="WARNING")
# subscriptions/listen is served by the SDK's own ListenHandler on the server's bus, wrapped to
# report each stream's resource filter as it subscribes.
sdk_listen = ListenHandler(bus)


async def listen(ctx, params):
    uris = sorted(params.notifications.resource_subscriptions or []) if params.notifications else []
    # No await between this report and the SDK handler's subscribing: an event the test causes
    # after reading it reaches the stream.
    report({"event": "listening", "uris": uris})
    return await sdk_listen(ctx, params)


mcp._lowlevel_server.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, listen)


async def set_level(_ctx, _params):
    # The level a 2025-11-25 client sets; a 2026-07-28 request carries its own in `_meta`.
    return types.EmptyResult()


# The SDK declares the `logging` capability (server/utilities/logging: a server that emits log
# messages MUST) when a logging/setLevel handler is registered, which only its low-level server
# takes.
mcp._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)


@mcp.resource("memo://note", description="A note whose updates `touch` announces")
def note() -> str:
    return "a note"


@mcp.tool(description="Echoes its text")
def echo(text: str) -> str:
    return text


@mcp.tool(description="Reports each value as progress")
async def progress(values: list[float], ctx: Context) -> str:
    for value in values:
        await ctx.report_progress(value, 100)
    return f"reported {len(values)} values"


class Answer(BaseModel):
    answer: str


def question_of(question: str = "Proceed?") -> Elicit[Answer]:
    return Elicit(question, Answer)


@mcp.tool(description="Asks the user a question")
async def ask(answer: Annotated[ElicitationResult[Answer], Resolve(question_of)], question: str = "Proceed?") -> str:
    if answer.action == "accept":
        return f"answer: {answer.data.answer}"
    return f"the user chose {answer.action}"


def sampling_of(topic: str = "MCP") -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"Summarize {topic}"))
    return Sample([message], max_tokens=64)


@mcp.tool(description="Asks the client's model for a summary")
async def summarize(sampled: Annotated[types.CreateMessageResult, Resolve(sampling_of)], topic: str = "MCP") -> str:
    return f"summary: {sampled.content.text}"


def roots_of() -> ListRoots:
    return ListRoots()


@mcp.tool(description="Lists the client's roots")
async def roots(listed: Annotated[types.ListRootsResult, Resolve(roots_of)]) -> str:
    return "roots: " + ", ".join(str(root.uri) for root in listed.roots)


@mcp.tool(description="Reports progress, then waits at a gate")
async def chatter(ctx: Context, count: int = 1, bytes: int = 1, gate: str = "") -> str:
    for i in range(count):
        await ctx.report_progress(i + 1, 100, "x" * bytes)
    report({"event": "started"})
    try:
        await anyio.sleep_forever()
    finally:
        report({"event": "cancelled"})
    return "cancelled"


@mcp.tool(description="Adds a tool, and says so to subscriptions/listen streams")
async def grow(name: str, ctx: Context) -> str:
    def grown(text: str) -> str:
        return text

    mcp.add_tool(grown, name=name, description="A tool added at run time")
    await ctx.notify_tools_changed()
    return f"added {name}"


@mcp.tool(description="Announces an update of memo://note")
async def touch(ctx: Context) -> str:
    await ctx.notify_resource_updated("memo://note")
    return "touched"


@mcp.tool(description="Logs one message at each level; the request's logLevel filters them")
async def log(ctx: Context) -> str:
    levels = ["debug", "info", "warning", "error"]
    for level in levels:
        await ctx.log(level, f"a {level} message")
    return "logged"


async def serve_http():
    app = mcp.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    report({"port": listener.getsockname()[1]})
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[listener])


if transport == "http":
    anyio.run(serve_http)
else:
    mcp.run("stdio")
