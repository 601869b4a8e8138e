// The official TypeScript SDK client driven through the gateway: node client.mjs URL
// Prints one JSON object with what it saw; the Rust interop test asserts on it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.argv[2];
const client = new Client({ name: "ts-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const out = { serverInfo: client.getServerVersion(), capabilities: client.getServerCapabilities() };

const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);
out.tools = tools;

out.greetHttp = await client.callTool({ name: "ts__greet", arguments: { name: "gateway" } });
out.greetStdio = await client.callTool({ name: "tsstdio__greet", arguments: { name: "stdio" } });
out.demoAdd = await client.callTool({ name: "demo__add", arguments: { a: 20, b: 22 } });
const progress = [];
out.count = await client.callTool({ name: "ts__count", arguments: { n: 3 } }, undefined, {
  onprogress: (p) => progress.push(p.progress),
});
out.progress = progress;
out.boom = await client.callTool({ name: "tsstdio__boom", arguments: {} });
try {
  // A tool the server does not list reaches it; the SDK server answers an unknown one with a
  // tool error (isError), as it does directly.
  out.unknown = await client.callTool({ name: "ts__nope", arguments: {} });
} catch (e) {
  out.unknown = { code: e.code, message: e.message };
}
try {
  // A name no upstream's prefix claims is the gateway's to refuse.
  await client.callTool({ name: "nobody__nope", arguments: {} });
  out.unclaimed = "no error";
} catch (e) {
  out.unclaimed = { code: e.code, message: e.message };
}
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
