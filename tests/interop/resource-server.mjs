// An MCP server that is itself an OAuth resource server (MCP authorization), built with the
// official TypeScript SDK: every request must carry a JWT access token (RFC 9068) of ISSUER whose
// audience is this server's own URL, checked with the issuer's published keys (jose); otherwise
// 401 with a challenge naming its protected resource metadata (RFC 9728).
//
//   node resource-server.mjs ISSUER     prints {"port": N}; the MCP endpoint is /mcp
//
// Tool `whoami` answers the subject (`sub`) and actor (`act.sub`) of the token its request
// carried. `GET /seen` lists every token it accepted or refused: the SHA-256 of the token, its
// subject and actor, and the MCP session it came in.
import http from 'node:http';
import { createHash, randomUUID } from 'node:crypto';
import * as jose from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

const issuer = process.argv[2];
const keys = jose.createRemoteJWKSet(new URL(`${issuer}/jwks`));
const seen = [];
const transports = new Map();
let url;

function buildServer() {
  const server = new McpServer({ name: 'resource-server', version: '1.0.0' });
  server.registerTool('whoami', { description: 'The subject and actor of the access token of this request', inputSchema: {} }, async (_args, extra) => {
    const { sub, act } = extra.authInfo.extra;
    return { content: [{ type: 'text', text: JSON.stringify({ sub, act: act ?? null }) }], structuredContent: { sub, act: act ?? null } };
  });
  return server;
}

const readBody = (req) =>
  new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });

const server = http.createServer(async (req, res) => {
  try {
    const metadata = `http://127.0.0.1:${server.address().port}/.well-known/oauth-protected-resource/mcp`;
    if (req.method === 'GET' && req.url === '/seen') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(seen));
      return;
    }
    if (req.method === 'GET' && req.url === '/.well-known/oauth-protected-resource/mcp') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ resource: url, authorization_servers: [issuer], bearer_methods_supported: ['header'] }));
      return;
    }
    const sid = req.headers['mcp-session-id'];
    const token = (req.headers.authorization ?? '').replace(/^Bearer /i, '');
    const hash = createHash('sha256').update(token).digest('hex');
    let claims;
    try {
      ({ payload: claims } = await jose.jwtVerify(token, keys, { issuer, audience: url, typ: 'at+jwt' }));
    } catch (e) {
      seen.push({ hash, accepted: false, session: sid ?? null, why: e.code ?? e.message });
      res.writeHead(401, { 'www-authenticate': `Bearer resource_metadata="${metadata}", error="invalid_token"` }).end();
      return;
    }
    seen.push({ hash, accepted: true, session: sid ?? null, sub: claims.sub, act: claims.act?.sub ?? null });
    req.auth = { token, clientId: claims.client_id, scopes: (claims.scope ?? '').split(' '), extra: { sub: claims.sub, act: claims.act?.sub } };
    let transport = sid ? transports.get(sid) : undefined;
    const body = req.method === 'POST' ? JSON.parse(await readBody(req)) : undefined;
    if (!transport) {
      if (req.method === 'POST' && body?.method === 'initialize') {
        transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => transports.set(id, transport) });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await buildServer().connect(transport);
      } else {
        res.writeHead(sid ? 404 : 400).end();
        return;
      }
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    console.error('server error', e);
    if (!res.headersSent) res.writeHead(500).end();
  }
});

server.listen(0, '127.0.0.1', () => {
  url = `http://127.0.0.1:${server.address().port}/mcp`;
  console.log(JSON.stringify({ port: server.address().port }));
});
