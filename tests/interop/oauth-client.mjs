// The official TypeScript SDK client (1.32) with its own OAuth support, machine to machine:
//   node oauth-client.mjs URL CLIENT_ID CLIENT_SECRET
// It starts from a bare 401, finds the protected resource metadata, then the authorization
// server, obtains a token with client credentials (naming the resource, RFC 8707), and goes
// on: tools, a call, a task and its result. Prints one JSON object with what it saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { CallToolResultSchema, CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, clientId, clientSecret] = process.argv.slice(2);
const provider = new ClientCredentialsProvider({ clientId, clientSecret, scope: "mcp" });
const out = { statuses: [] };
// Every HTTP status the client met, to show it started from a 401.
const fetchSeen = async (input, init) => {
  const response = await fetch(input, init);
  out.statuses.push(`${init?.method ?? "GET"} ${new URL(String(input)).pathname} ${response.status}`);
  return response;
};
const client = new Client({ name: "ts-oauth-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: fetchSeen });
try {
  await client.connect(transport);
} catch (e) {
  // The SDK finishes the authorization after the first 401, then the caller connects again.
  out.firstConnect = String(e);
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: fetchSeen }));
}
out.serverInfo = client.getServerVersion();
out.tools = (await client.listTools()).tools.map((t) => t.name);
out.echo = await client.callTool({ name: "demo__echo", arguments: { text: "with a token" } });
const created = await client.request(
  { method: "tools/call", params: { name: "demo__echo", arguments: { text: "as a task" }, task: { ttl: 60000 } } },
  CreateTaskResultSchema,
);
out.taskResult = await client.request({ method: "tasks/result", params: { taskId: created.task.taskId } }, CallToolResultSchema);
out.tokenType = provider.tokens()?.token_type;
await client.close();
console.log(JSON.stringify(out));
