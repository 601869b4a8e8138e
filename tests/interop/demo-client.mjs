// The official TypeScript SDK client against `taskgate demo`: node demo-client.mjs URL.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const client = new Client({ name: "ts-demo-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
await client.connect(transport);
const out = { serverInfo: client.getServerVersion() };
out.tools = (await client.listTools()).tools.map((t) => t.name);
out.add = await client.callTool({ name: "demo__add", arguments: { a: 2, b: 3 } });
out.echo = await client.callTool({ name: "local__echo", arguments: { text: "from the SDK" } });
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
