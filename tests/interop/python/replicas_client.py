"""The official Python SDK client (mcp 1.29, 2025-11-25) through a load balancer that sends each
request to the next gateway replica: replicas_client.py URL TOKEN.

The whole of what a host does (tools, progress, cancellation, a task, elicitation and sampling
answered by the client, resources and a subscription, logging, a tool-list change), each
step's failure recorded; prints one JSON object.
"""

import json
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

URL, TOKEN = sys.argv[1], sys.argv[2]
seen = {"elicitations": 0, "samplings": 0, "updates": [], "logs": 0, "listChanged": 0}


async def elicit(context, params):
    seen["elicitations"] += 1
    return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com", "answer": "yes"})


async def sample(context, params):
    seen["samplings"] += 1
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled by the client"), model="test-model"
    )


async def log(params):
    seen["logs"] += 1


async def handle(message):
    if isinstance(message, types.ServerNotification):
        root = message.root
        if isinstance(root, types.ResourceUpdatedNotification):
            seen["updates"].append(str(root.params.uri))
        elif isinstance(root, types.ToolListChangedNotification):
            seen["listChanged"] += 1


def text(result):
    return result.content[0].text if result.content else None


async def main():
    out = {"errors": []}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with streamablehttp_client(URL, headers=headers) as (read, write, session_id):
        async with ClientSession(
            read,
            write,
            sampling_callback=sample,
            elicitation_callback=elicit,
            logging_callback=log,
            message_handler=handle,
        ) as session:
            await session.initialize()
            out["sessionId"] = session_id()

            async def until(what):
                # Waits for what the client receives on its own, pinging meanwhile (each ping
                # a real request through the balancer); bounded.
                for _ in range(2000):
                    if what():
                        return True
                    await session.send_ping()
                return what()

            async def step(name, work):
                try:
                    out[name] = await work()
                except Exception as e:  # noqa: BLE001: each step's failure is recorded
                    out["errors"].append({"step": name, "error": repr(e)})

            async def tools():
                return len((await session.list_tools()).tools)

            async def sums():
                return [text(await session.call_tool("demo__add", {"a": i, "b": 1})) for i in range(6)]

            async def progress():
                values = []

                async def on_progress(p, total, message):
                    values.append(p)

                await session.call_tool("demo__progress", {"values": [1, 2, 3]}, progress_callback=on_progress)
                return values

            async def cancelled():
                # The SDK cancels a request by the notification with its id (the next it sends).
                request_id = session._request_id
                started = anyio.Event()

                async def on_progress(p, total, message):
                    started.set()

                async with anyio.create_task_group() as group:

                    async def call():
                        await session.call_tool(
                            "demo__slow", {"ms": 60000, "steps": 600}, progress_callback=on_progress
                        )

                    group.start_soon(call)
                    await started.wait()
                    await session.send_notification(
                        types.ClientNotification(
                            types.CancelledNotification(
                                params=types.CancelledNotificationParams(requestId=request_id, reason="stop")
                            )
                        )
                    )
                    group.cancel_scope.cancel()
                return True

            async def task():
                created = await session.experimental.call_tool_as_task("demo__slow", {"ms": 60, "steps": 2})
                task_id = created.task.taskId
                result = await session.experimental.get_task_result(task_id, types.CallToolResult)
                status = (await session.experimental.get_task(task_id)).status
                return {"result": text(result), "status": status}

            async def elicited():
                return [text(await session.call_tool("demo__test_elicitation", {"message": "who?"})) for _ in range(3)]

            async def elicited_unrelated():
                before = seen["elicitations"]
                for _ in range(6):
                    await session.call_tool("demo__ask", {"wait": False, "stream": "get", "question": "later?"})
                return await until(lambda: seen["elicitations"] >= before + 6)

            async def sampled():
                return [text(await session.call_tool("demo__test_sampling", {"prompt": "hi"})) for _ in range(3)]

            async def resources():
                listed = (await session.list_resources()).resources
                counter = next(r for r in listed if "counter" in str(r.uri))
                read = await session.read_resource(counter.uri)
                await session.subscribe_resource(counter.uri)
                for _ in range(3):
                    await session.call_tool("demo__touch", {})
                updated = await until(lambda: len(seen["updates"]) >= 1)
                return {
                    "listed": len(listed),
                    "read": len(read.contents),
                    "updated": updated,
                    "uri": seen["updates"][:1] == [str(counter.uri)],
                }

            async def logging():
                await session.set_logging_level("debug")
                await session.call_tool("demo__test_tool_with_logging", {})
                return await until(lambda: seen["logs"] >= 1)

            async def list_changed():
                await session.call_tool("demo__toggle_extra", {})
                return await until(lambda: seen["listChanged"] >= 1)

            await step("tools", tools)
            await step("sums", sums)
            await step("progress", progress)
            await step("cancelled", cancelled)
            await step("task", task)
            await step("elicited", elicited)
            await step("elicitedUnrelated", elicited_unrelated)
            await step("sampled", sampled)
            await step("resources", resources)
            await step("logging", logging)
            await step("listChanged", list_changed)
            out["sessionAfter"] = session_id()
            out["seen"] = seen
    print(json.dumps(out))


anyio.run(main)
