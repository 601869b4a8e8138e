// The official TypeScript SDK client's experimental tasks API driven through the gateway:
// node task-client.mjs URL. Prints one JSON object with what it saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const url = process.argv[2];
const client = new Client({ name: "ts-task-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const out = { capabilities: client.getServerCapabilities() };
await client.listTools(); // teaches the client which tools are tasks

async function stream(name, args) {
  const seen = { events: [] };
  for await (const msg of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    seen.events.push(msg.type);
    if (msg.type === "taskCreated") seen.taskId = msg.task.taskId;
    if (msg.type === "result") seen.result = msg.result;
    if (msg.type === "error") seen.error = String(msg.error);
  }
  return seen;
}

out.native = await stream("tstask__delay", { ms: 30 });
out.wrapped = await stream("ts__greet", { name: "task" });
out.getTask = await client.experimental.tasks.getTask(out.wrapped.taskId);
out.getTaskResult = await client.experimental.tasks.getTaskResult(out.wrapped.taskId, CallToolResultSchema);
out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);

const created = await client.request(
  { method: "tools/call", params: { name: "tstask__delay", arguments: { ms: 60000 }, task: { ttl: 60000 } } },
  CreateTaskResultSchema,
);
out.cancelled = await client.experimental.tasks.cancelTask(created.task.taskId);
try {
  await client.experimental.tasks.cancelTask(created.task.taskId);
  out.cancelAgain = "no error";
} catch (e) {
  out.cancelAgain = { code: e.code, message: e.message };
}
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
