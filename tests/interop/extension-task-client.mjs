// The TypeScript SDK 1.32 client (@modelcontextprotocol/sdk, 2025-11-25) with its experimental
// tasks API, against the gateway in front of a 2026-07-28 upstream with the tasks extension (the
// rmcp server of tests/integration/rmcp_server.rs, its tools prefixed `rt__`): a task completed
// at once, a task that asks the user (the SDK's elicitation handler answers), progress on a
// plain call, and a task cancelled with tasks/cancel. node extension-task-client.mjs URL;
// prints one JSON summary.
import { CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { connectAnswering } from './v1-connect.mjs';

const [url] = process.argv.slice(2);
const { client, transport, asked } = await connectAnswering(url);
const out = { version: transport.protocolVersion, taskCapability: client.getServerCapabilities().tasks ?? null };
await client.listTools(); // teaches the client which tools run as tasks

async function stream(name, args) {
  const seen = { events: [] };
  for await (const msg of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    if (seen.events.at(-1) !== msg.type) seen.events.push(msg.type);
    if (msg.type === 'taskCreated') seen.taskId = msg.task.taskId;
    if (msg.type === 'result') seen.result = msg.result.content;
    if (msg.type === 'error') seen.error = String(msg.error);
  }
  return seen;
}

out.echo = await stream('rt__echo', { text: 'in a task' });
out.ask = await stream('rt__ask', {});
out.asked = asked;
const values = [];
const reported = await client.callTool({ name: 'rt__progress', arguments: { values: [1, 2, 3] } }, undefined, {
  onprogress: (p) => values.push(p.progress),
});
out.progress = { values, content: reported.content };
const created = await client.request(
  { method: 'tools/call', params: { name: 'rt__work', arguments: {}, task: { ttl: 60000 } } },
  CreateTaskResultSchema,
);
out.created = created.task.status;
out.cancelled = (await client.experimental.tasks.cancelTask(created.task.taskId)).status;
out.afterCancel = (await client.experimental.tasks.getTask(created.task.taskId)).status;
for (const seen of [out.echo, out.ask]) delete seen.taskId;
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
