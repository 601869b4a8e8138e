// An MCP server that is itself an OAuth resource server (MCP authorization), built with the
// official TypeScript SDK: every request must carry a JWT access token (RFC 9068) of ISSUER whose
// audience is this server's own URL, checked with the issuer's published keys (jose); otherwise
// 401 with a challenge naming its protected resource metadata (RFC 9728).
//
//   node resource-server.mjs ISSUER     prints {"port": N}; the MCP endpoint is /mcp
//
// Tool `whoami` answers the subject (`sub`), actor (`act.sub`) and scope of the token its
// request carried. `GET /seen` lists every token it accepted or refused: the SHA-256 of the token, its
// subject and actor, and the MCP session it came in.
import { createHash } from 'node:crypto';
import * as jose from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { serveHttp } from './http-harness.mjs';

const issuer = process.argv[2];
const keys = jose.createRemoteJWKSet(new URL(`${issuer}/jwks`));
const seen = [];
let base;

function buildServer() {
  const server = new McpServer({ name: 'resource-server', version: '1.0.0' });
  server.registerTool('whoami', { description: 'The subject and actor of the access token of this request', inputSchema: {} }, async (_args, extra) => {
    const { sub, act, scope } = extra.authInfo.extra;
    const me = { sub, act: act ?? null, scope: scope ?? null };
    return { content: [{ type: 'text', text: JSON.stringify(me) }], structuredContent: me };
  });
  return server;
}

const json = (res, body) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));

async function route(req, res) {
  if (req.method === 'GET' && req.url === '/seen') {
    json(res, seen);
    return true;
  }
  if (req.method === 'GET' && req.url === '/.well-known/oauth-protected-resource/mcp') {
    json(res, { resource: `${base}/mcp`, authorization_servers: [issuer], bearer_methods_supported: ['header'] });
    return true;
  }
  return false;
}

async function authorize(req, res) {
  const session = req.headers['mcp-session-id'] ?? null;
  const token = (req.headers.authorization ?? '').replace(/^Bearer /i, '');
  const hash = createHash('sha256').update(token).digest('hex');
  try {
    const { payload: claims } = await jose.jwtVerify(token, keys, { issuer, audience: `${base}/mcp`, typ: 'at+jwt' });
    seen.push({ hash, accepted: true, session, sub: claims.sub, act: claims.act?.sub ?? null });
    req.auth = { token, clientId: claims.client_id, scopes: (claims.scope ?? '').split(' '), extra: { sub: claims.sub, act: claims.act?.sub, scope: claims.scope } };
    return true;
  } catch (e) {
    seen.push({ hash, accepted: false, session, why: e.code ?? e.message });
    const metadata = `${base}/.well-known/oauth-protected-resource/mcp`;
    res.writeHead(401, { 'www-authenticate': `Bearer resource_metadata="${metadata}", error="invalid_token"` }).end();
    return false;
  }
}

serveHttp(buildServer, { route, authorize, onListen: (port) => { base = `http://127.0.0.1:${port}`; } });
