// A dual-era server (basic/versioning "Backward Compatibility"): 2026-07-28 requests are served
// by the TypeScript SDK v2's createMcpHandler, 2025-11-25 sessions (`initialize`) by the SDK 1.32's
// sessionful Streamable HTTP transport on the same endpoint, as servers in transition do.
// Tools: echo, and ask, which asks the user: through MRTR (inputRequired) at 2026-07-28, with a
// real elicitation/create on the call's stream in a 2025-11-25 session.
//
// With LEGACY_SIDE=stateless, the v2 SDK's own dual serving instead: 2025-11-25 requests answered
// statelessly, each by a fresh instance (no sessions).
//
// Prints {"port": N} first, then {"era": "2025-11-25" | "2026-07-28", "call": NAME} for each tool
// call and {"era": "2025-11-25", "initialized": true} for each 2025-11-25 session.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { Server as LegacyServer } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ElicitResultSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Server, createMcpHandler, inputRequired } from '@modelcontextprotocol/server';

const stateless = process.env.LEGACY_SIDE === 'stateless';
const report = (event) => console.log(JSON.stringify(event));
const text = (t) => ({ content: [{ type: 'text', text: t }], isError: false });
const object = (properties, required = []) => ({ type: 'object', properties, required });
const tools = [
  { name: 'echo', description: 'Echoes its text', inputSchema: object({ text: { type: 'string' } }, ['text']) },
  { name: 'ask', description: 'Asks the user a question', inputSchema: object({ question: { type: 'string' } }) },
];
const askSchema = object({ answer: { type: 'string' } }, ['answer']);

function modern() {
  const server = new Server({ name: 'dual', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler('tools/list', async () => ({ tools }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const args = request.params.arguments ?? {};
    if (request.params.name === 'echo') return text(String(args.text ?? ''));
    const answer = ctx.mcpReq.inputResponses?.answer;
    if (answer?.action === 'accept') return text(`answer: ${answer.content?.answer}`);
    if (answer) return text(`the user chose ${answer.action}`);
    return inputRequired({
      inputRequests: { answer: inputRequired.elicit({ message: String(args.question ?? 'Proceed?'), requestedSchema: askSchema }) },
    });
  });
  return server;
}

function legacy() {
  const server = new LegacyServer({ name: 'dual', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const args = request.params.arguments ?? {};
    if (request.params.name === 'echo') return text(String(args.text ?? ''));
    const params = { mode: 'form', message: String(args.question ?? 'Proceed?'), requestedSchema: askSchema };
    const answer = await extra.sendRequest({ method: 'elicitation/create', params }, ElicitResultSchema);
    if (answer.action === 'accept') return text(`answer: ${answer.content?.answer}`);
    return text(`the user chose ${answer.action}`);
  });
  return server;
}

const handler = createMcpHandler(modern, { legacy: stateless ? 'stateless' : 'reject', keepAliveMs: 1000 });
const sessions = new Map();

async function bodyOf(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

// A request of a 2025-11-25 session: no per-request `_meta` claim and no 2026-07-28 header.
function isLegacy(req, parsed) {
  if (req.method !== 'POST') return req.headers['mcp-session-id'] !== undefined;
  if (req.headers['mcp-protocol-version'] === '2026-07-28') return false;
  const one = Array.isArray(parsed) ? parsed[0] : parsed;
  return !one?.params?._meta?.['io.modelcontextprotocol/protocolVersion'];
}

async function serveModern(req, res, body) {
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
    body: req.method === 'POST' ? Readable.toWeb(Readable.from([body])) : undefined,
    duplex: 'half',
    signal: abort.signal,
  });
  const response = await handler.fetch(request);
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) return res.end();
  for await (const chunk of response.body) res.write(chunk);
  res.end();
}

async function serveLegacy(req, res, parsed) {
  const id = req.headers['mcp-session-id'];
  let transport = id === undefined ? undefined : sessions.get(id);
  if (transport === undefined && id === undefined && parsed?.method === 'initialize') {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
        report({ era: '2025-11-25', initialized: true });
      },
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await legacy().connect(transport);
  }
  if (transport === undefined) {
    res.writeHead(404, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
  }
  await transport.handleRequest(req, res, parsed);
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const body = req.method === 'POST' ? await bodyOf(req) : Buffer.alloc(0);
    let parsed;
    try {
      parsed = body.length ? JSON.parse(body.toString('utf8')) : undefined;
    } catch {
      parsed = undefined;
    }
    const legacyRequest = isLegacy(req, parsed);
    if (parsed?.method === 'tools/call') {
      report({ era: legacyRequest ? '2025-11-25' : '2026-07-28', call: parsed.params?.name });
    }
    if (!stateless && legacyRequest) await serveLegacy(req, res, parsed);
    else await serveModern(req, res, body);
  } catch (error) {
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});
httpServer.listen(0, '127.0.0.1', () => report({ port: httpServer.address().port }));
