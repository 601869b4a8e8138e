// The TypeScript SDK v2 client (@modelcontextprotocol/client, pinned to 2026-07-28) with its own
// OAuth support, machine to machine:
//   node oauth-client-v2.mjs URL CLIENT_ID CLIENT_SECRET
// From a bare 401 it finds the protected resource metadata and the authorization server, gets a
// token with client credentials, then lists tools and calls one. Prints one JSON object.
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, clientId, clientSecret] = process.argv.slice(2);
const provider = new ClientCredentialsProvider({ clientId, clientSecret, scope: 'mcp' });
const out = { statuses: [] };
const fetchSeen = async (input, init) => {
  const response = await fetch(input, init);
  out.statuses.push(`${init?.method ?? 'GET'} ${new URL(String(input)).pathname} ${response.status}`);
  return response;
};
const connect = async () => {
  const client = new Client({ name: 'ts-oauth-client-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: fetchSeen }));
  return client;
};
let client;
try {
  client = await connect();
} catch (e) {
  out.firstConnect = String(e);
  client = await connect();
}
out.version = client.getNegotiatedProtocolVersion();
out.tools = (await client.listTools()).tools.map((t) => t.name);
out.echo = (await client.callTool({ name: 'demo__echo', arguments: { text: 'with a token, 2026' } })).content;
await client.close();
console.log(JSON.stringify(out));
