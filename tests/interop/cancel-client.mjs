// The official TypeScript SDK client's AbortSignal (which sends notifications/cancelled) and
// onprogress, through the gateway: node cancel-client.mjs URL. Prints one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const url = process.argv[2];
const client = new Client({ name: "ts-cancel-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
await client.listTools();
const out = {};

// Abort a call once it has started (its first progress arrives).
const abort = new AbortController();
try {
  await client.callTool({ name: "ts__hang", arguments: {} }, undefined, {
    signal: abort.signal,
    onprogress: () => abort.abort("user pressed stop"),
  });
  out.aborted = "completed instead";
} catch (e) {
  out.aborted = { name: e.name, message: String(e.message ?? e) };
}
// The upstream handler observes its abort; poll the upstream's own count (bounded).
for (let i = 0; i < 200; i++) {
  const r = await client.callTool({ name: "ts__aborts", arguments: {} });
  out.aborts = Number(r.content[0].text);
  if (out.aborts >= 1) break;
}

// onprogress for a task: the gateway wraps demo__slow and relays its progress.
const progress = [];
for await (const msg of client.experimental.tasks.callToolStream(
  { name: "demo__slow", arguments: { ms: 150, steps: 3 } },
  CallToolResultSchema,
  { onprogress: (p) => progress.push(p.progress) },
)) {
  if (msg.type === "taskCreated") out.taskId = msg.task.taskId;
  if (msg.type === "result") out.taskResult = msg.result;
  if (msg.type === "error") out.taskError = String(msg.error);
}
out.taskProgress = progress;

await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
