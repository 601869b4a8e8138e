// The TypeScript SDK v2 client (@modelcontextprotocol/client, 2026-07-28), pinned to
// 2026-07-28 or in auto mode, against URL: tools, progress, elicitation (answered through
// MRTR by its handler), and an AbortSignal cancellation (when the server has the demo's chatter
// tool). A refused call is summarized by its error code. Prints one JSON summary.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, modeArg] = process.argv.slice(2);
const mode = modeArg === 'auto' ? 'auto' : { pin: '2026-07-28' };
const client = new Client(
  { name: 'taskgate-interop-v2', version: '1.0.0' },
  { versionNegotiation: { mode }, capabilities: { elicitation: { form: {} } } },
);
const asked = [];
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params.message);
  return { action: 'accept', content: { answer: 'Ada' } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const summary = { version: client.getNegotiatedProtocolVersion() };
const { tools } = await client.listTools();
const named = (suffix) => tools.find((t) => t.name === suffix || t.name.endsWith(`__${suffix}`)).name;
summary.tools = tools.map((t) => t.name).sort();
summary.echo = (await client.callTool({ name: named('echo'), arguments: { text: 'hi' } })).content;
const progress = [];
const reported = await client.callTool(
  { name: named('progress'), arguments: { values: [1, 2, 3] } },
  { onprogress: (p) => progress.push(p.progress) },
);
summary.progress = { values: progress, content: reported.content };
const attempt = async (call) => {
  try {
    return (await call()).content;
  } catch (e) {
    return { error: e.code ?? e.name };
  }
};
summary.ask = await attempt(() => client.callTool({ name: named('ask'), arguments: { question: 'Name?' } }));
summary.asked = asked;
if (!tools.some((t) => t.name.endsWith('chatter'))) {
  await client.close();
  console.log(JSON.stringify(summary));
  process.exit(0);
}
const abort = new AbortController();
// chatter reports progress, then waits at a gate the test never opens: the first progress
// says the call is in flight upstream, and the client aborts it then.
const waiting = client
  .callTool(
    { name: named('chatter'), arguments: { count: 1, bytes: 1, gate: 'never' } },
    { signal: abort.signal, onprogress: () => abort.abort('the user stopped it') },
  )
  .then(() => 'completed', (e) => `rejected: ${e.name}`);
summary.aborted = await waiting;
await client.close();
console.log(JSON.stringify(summary));
