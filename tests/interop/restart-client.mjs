// The official TypeScript SDK client's tasks API across a gateway restart, in two runs:
//   node restart-client.mjs URL KEY create   → starts two tasks with callToolStream: one it
//     follows to its result, one native task it leaves running; prints their ids.
//   node restart-client.mjs URL KEY results ID1 ID2 → a new connection of the same principal
//     (after the gateway restarted) gets both results with getTaskResult and lists its tasks.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, key, phase, ...ids] = process.argv.slice(2);
const client = new Client({ name: "ts-restart-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
await client.connect(transport);
await client.listTools(); // teaches the client which tools are tasks
const out = {};

if (phase === "create") {
  // Followed to its result before the restart.
  for await (const msg of client.experimental.tasks.callToolStream({ name: "native__slow", arguments: { ms: 5 } })) {
    if (msg.type === "taskCreated") out.done = msg.task.taskId;
    if (msg.type === "result") out.doneResult = msg.result;
  }
  // Left running: the stream is abandoned once the task exists.
  for await (const msg of client.experimental.tasks.callToolStream({ name: "native__wait", arguments: { gate: "ts-restart" } })) {
    if (msg.type === "taskCreated") {
      out.running = msg.task.taskId;
      break;
    }
  }
} else {
  const [done, running] = ids;
  out.done = await client.experimental.tasks.getTaskResult(done, CallToolResultSchema);
  out.running = await client.experimental.tasks.getTaskResult(running, CallToolResultSchema);
  out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => ({ taskId: t.taskId, status: t.status }));
}
console.log(JSON.stringify(out));
process.exit(0);
