// The TypeScript SDK 1.32 client (@modelcontextprotocol/sdk, 2025-11-25) as the interop scripts
// use it: connected to URL over Streamable HTTP, declaring form elicitation, answering every
// question "Ada" and noting it in `asked`.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

export async function connectAnswering(url) {
  const client = new Client(
    { name: 'taskgate-interop-v1', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } } },
  );
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    return { action: 'accept', content: { answer: 'Ada' } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport, asked };
}
