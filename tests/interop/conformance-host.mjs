// A host for the conformance suite's client scenarios: the TypeScript SDK v2 client
// (@modelcontextprotocol/client), at the revision the suite runs (MCP_CONFORMANCE_PROTOCOL_VERSION:
// 2025-11-25 through initialize, 2026-07-28 pinned), against URL (the last argument). It does
// what a host does with a server it has not seen: lists the tools and calls each (with the
// arguments the scenario names in MCP_CONFORMANCE_CONTEXT's `toolCalls`, or with arguments made
// from the tool's input schema), lists and reads the resources, lists and gets the prompts, and
// answers an elicitation with the schema's non-default fields (its defaults filled by the SDK).
// A failing request is reported on stderr and the host goes on; the suite judges what it saw.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv.at(-1);
const revision = process.env.MCP_CONFORMANCE_PROTOCOL_VERSION ?? '2025-11-25';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? '{}');
const mode = revision === '2026-07-28' ? { pin: '2026-07-28' } : 'legacy';

// A value for each property of a JSON schema: the n-th number is n + 2 (so `a` and `b` are 2
// and 3), strings are "x", booleans true; properties with a default are left to it.
const valueFor = (schema, n) => {
  const type = Array.isArray(schema?.type) ? schema.type[0] : schema?.type;
  if (schema?.enum) return schema.enum[0];
  if (type === 'number' || type === 'integer') return n + 2;
  if (type === 'boolean') return true;
  if (type === 'array') return [];
  if (type === 'object') return {};
  return 'x';
};
const argumentsFor = (schema, withDefaults) =>
  Object.fromEntries(
    Object.entries(schema?.properties ?? {})
      .filter(([, property]) => withDefaults || property.default === undefined)
      .map(([name, property], n) => [name, valueFor(property, n)]),
  );

const client = new Client(
  { name: 'taskgate-conformance-host', version: '1.0.0' },
  {
    versionNegotiation: { mode },
    capabilities: { elicitation: { form: { applyDefaults: true } } },
  },
);
client.setRequestHandler('elicitation/create', async (request) => ({
  action: 'accept',
  content: argumentsFor(request.params.requestedSchema, false),
}));

const attempt = async (what, call) => {
  try {
    return await call();
  } catch (e) {
    console.error(`${what}: ${e.code ?? ''} ${e.message}`);
    return undefined;
  }
};

await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const listed = (await attempt('tools/list', () => client.listTools()))?.tools ?? [];
const calls = context.toolCalls ?? listed.map((tool) => ({ name: tool.name, arguments: argumentsFor(tool.inputSchema, true) }));
for (const call of calls) {
  await attempt(`tools/call ${call.name}`, () => client.callTool(call));
}
const capabilities = client.getServerCapabilities() ?? {};
if (capabilities.resources) {
  const resources = (await attempt('resources/list', () => client.listResources()))?.resources ?? [];
  for (const resource of resources) {
    await attempt(`resources/read ${resource.uri}`, () => client.readResource({ uri: resource.uri }));
  }
}
if (capabilities.prompts) {
  const prompts = (await attempt('prompts/list', () => client.listPrompts()))?.prompts ?? [];
  for (const prompt of prompts) {
    const args = Object.fromEntries((prompt.arguments ?? []).map((a) => [a.name, 'x']));
    await attempt(`prompts/get ${prompt.name}`, () => client.getPrompt({ name: prompt.name, arguments: args }));
  }
}
await client.close();
