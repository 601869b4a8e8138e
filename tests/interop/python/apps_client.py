"""The Python SDK (mcp 2.3.0, pinned in requirements.txt) as an MCP Apps host against URL, in
auto mode (2026-07-28 where the server speaks it): declares the MCP Apps extension, lists the
tools, reads the UI resource each tool names and calls each tool with no arguments. Prints one
JSON summary shaped like apps-client.mjs's: the revision, and per tool its `_meta`, the resource
contents and whether the call succeeded."""

import json
import sys

import anyio
from mcp import Client
from mcp.client import advertise
from mcp.shared.exceptions import MCPError

url = sys.argv[1]


async def main():
    ui = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
    summary = {"tools": []}
    async with Client(url, mode="auto", extensions=[ui], read_timeout_seconds=30) as client:
        summary["version"] = client.protocol_version
        tools = sorted((await client.list_tools()).tools, key=lambda t: t.name)
        for tool in tools:
            meta = tool.meta or {}
            seen = {"name": tool.name, "meta": meta}
            uri = (meta.get("ui") or {}).get("resourceUri")
            if uri:
                read = await client.read_resource(uri)
                seen["read"] = [
                    {"uri": str(c.uri), "mimeType": c.mime_type, "text": c.text, "meta": c.meta} for c in read.contents
                ]
            try:
                result = await client.call_tool(tool.name, {})
                seen["call"] = {"isError": bool(result.is_error)}
            except MCPError as error:
                seen["call"] = {"code": error.error.code, "message": error.error.message}
            summary["tools"].append(seen)
    print(json.dumps(summary))


anyio.run(main)
