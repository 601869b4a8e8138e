// The TypeScript SDK client (1.32) calling the conformance fixture `test_reconnection`, whose
// server closes the call's stream before the response (basic/transports, SEP-1699): the client
// waits the `retry` it was sent and resumes with GET and Last-Event-ID.
// node reconnect-client.mjs URL; prints one JSON object: the result's text, or the error.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const client = new Client({ name: 'reconnect-client', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(process.argv[2])));
const out = {};
try {
  const result = await client.callTool({ name: 'test_reconnection', arguments: {} }, undefined, { timeout: 15000 });
  out.text = result.content[0].text;
} catch (e) {
  out.error = e.message;
}
await client.close();
console.log(JSON.stringify(out));
