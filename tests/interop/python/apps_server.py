"""The Python SDK (mcp 2.3.0, pinned in requirements.txt) as an MCP Apps server over stdio: the
upstream peer of the gateway's MCP Apps tests.

    apps_server.py NAME    serves stdio as NAME; its UI resource is ui://clock/app.html whatever
                           the NAME (two such servers offer the same URI), its HTML names NAME

`clock` is a UI-bound tool named after the SDK's own example; its UI resource carries the
`_meta.ui` an app's host reads (csp, permissions, domain, prefersBorder). `refresh` is an
app-only tool (`visibility: ["app"]`) bound to the same resource. `host` answers with the MCP
Apps settings the client declared to this server (`null` when it declared none): what a server
that registers app tools only for such clients reads."""

import json
import sys

from mcp.server.apps import Apps, ResourceCsp, ResourcePermissions
from mcp.server.mcpserver import Context, MCPServer

name = sys.argv[1]
uri = "ui://clock/app.html"
html = f"<!doctype html><html><body><h1>{name}</h1><script>/* the {name} app */</script></body></html>"

apps = Apps()


@apps.tool(resource_uri=uri, description="The current time, shown by the app")
def clock() -> str:
    return f"{name}: 12:00"


@apps.tool(resource_uri=uri, visibility=["app"], description="Refreshes the app's view")
def refresh() -> str:
    return f"{name}: refreshed"


def host(ctx: Context) -> str:
    capabilities = ctx.client_capabilities
    extensions = capabilities.extensions if capabilities else None
    return json.dumps((extensions or {}).get("io.modelcontextprotocol/ui"))


apps.add_html_resource(
    uri,
    html,
    csp=ResourceCsp(connect_domains=["https://api.example.test"]),
    permissions=ResourcePermissions(clipboard_write={}),
    domain=f"{name}.apps.example.test",
    prefers_border=True,
)

server = MCPServer(name, version="2.3.0", extensions=[apps])
server.add_tool(host, description="The MCP Apps settings the client declared")
server.run("stdio")
