// The TypeScript SDK 1.32 client (@modelcontextprotocol/sdk, 2025-11-25) against URL: tools,
// progress, an elicitation answered by its handler, a task through the experimental tasks API,
// and an AbortSignal cancellation (notifications/cancelled). Tools are found by suffix, so the
// same script runs through the gateway in front of any upstream with the demo's tools.
// Prints one JSON summary.
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { connectAnswering } from './v1-connect.mjs';

const [url] = process.argv.slice(2);
const { client, transport, asked } = await connectAnswering(url);
const summary = { version: transport.protocolVersion };
const { tools } = await client.listTools();
const named = (suffix) => tools.find((t) => t.name === suffix || t.name.endsWith(`__${suffix}`)).name;
summary.echo = (await client.callTool({ name: named('echo'), arguments: { text: 'hi' } })).content;
const progress = [];
const reported = await client.callTool({ name: named('progress'), arguments: { values: [1, 2, 3] } }, undefined, {
  onprogress: (p) => progress.push(p.progress),
});
summary.progress = { values: progress, content: reported.content };
summary.ask = (await client.callTool({ name: named('ask'), arguments: { question: 'Name?' } })).content;
summary.asked = asked;
const task = { events: [] };
for await (const msg of client.experimental.tasks.callToolStream(
  { name: named('echo'), arguments: { text: 'in a task' } },
  CallToolResultSchema,
)) {
  task.events.push(msg.type);
  if (msg.type === 'result') task.result = msg.result.content;
  if (msg.type === 'error') task.error = String(msg.error);
}
summary.task = task;
const abort = new AbortController();
summary.aborted = await client
  .callTool({ name: named('chatter'), arguments: { count: 1, bytes: 1, gate: 'never' } }, undefined, {
    signal: abort.signal,
    onprogress: () => abort.abort('the user stopped it'),
  })
  .then(() => 'completed', (e) => `rejected: ${e.name}`);
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(summary));
