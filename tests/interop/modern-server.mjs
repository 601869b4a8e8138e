// A 2026-07-28 server built with the TypeScript SDK v2 (@modelcontextprotocol/server, pinned):
// the reference the interop tests compare the gateway with. The same tools as the demo upstream's
// (echo, progress, ask through MRTR, chatter waiting at a gate that never opens), served by the
// SDK's own createMcpHandler on node:http. Prints {"port": N} first, then {"started": N} each
// time a chatter call reaches its gate, {"cancelled": N} each time a call is aborted by its client, and
// {"regionHeader": V} for each request carrying Mcp-Param-Region.
import http from 'node:http';
import { Readable } from 'node:stream';
import { Server, createMcpHandler, inputRequired } from '@modelcontextprotocol/server';

let cancelled = 0;
let started = 0;
const text = (t) => ({ content: [{ type: 'text', text: t }], isError: false });
const object = (properties, required = []) => ({ type: 'object', properties, required });
const tools = [
  { name: 'echo', description: 'Echoes its text', inputSchema: object({ text: { type: 'string' } }, ['text']) },
  {
    name: 'progress',
    description: 'Reports each value as progress',
    inputSchema: object({ values: { type: 'array', items: { type: 'number' } } }),
  },
  { name: 'ask', description: 'Asks the user a question', inputSchema: object({ question: { type: 'string' } }) },
  {
    name: 'region',
    description: 'Echoes its region, which clients mirror into the Mcp-Param-Region header',
    inputSchema: object({ region: { type: 'string', 'x-mcp-header': 'Region' } }),
  },
  {
    name: 'chatter',
    description: 'Reports progress, then waits at a gate',
    inputSchema: object({ count: { type: 'number' }, bytes: { type: 'number' }, gate: { type: 'string' } }),
  },
];

function factory() {
  const server = new Server({ name: 'modern-reference', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler('tools/list', async () => ({ tools }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const args = request.params.arguments ?? {};
    const token = request.params._meta?.progressToken;
    const progress = (value, message) =>
      token === undefined
        ? Promise.resolve()
        : ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: value, total: 100, ...(message ? { message } : {}) } });
    switch (request.params.name) {
      case 'region':
        return text(String(args.region ?? ''));
      case 'echo':
        return text(String(args.text ?? ''));
      case 'progress': {
        const values = args.values ?? [];
        for (const value of values) await progress(value);
        return text(`reported ${values.length} values`);
      }
      case 'ask': {
        const answer = ctx.mcpReq.inputResponses?.answer;
        if (answer?.action === 'accept') return text(`answer: ${answer.content?.answer}`);
        if (answer) return text(`the user chose ${answer.action}`);
        return inputRequired({
          inputRequests: {
            answer: inputRequired.elicit({
              message: String(args.question ?? 'Proceed?'),
              requestedSchema: object({ answer: { type: 'string' } }, ['answer']),
            }),
          },
        });
      }
      case 'chatter': {
        for (let i = 0; i < (args.count ?? 1); i++) await progress(i + 1, 'x'.repeat(args.bytes ?? 1));
        started += 1;
        console.log(JSON.stringify({ started }));
        // The gate never opens: the call ends when its client aborts it.
        await new Promise((resolve) => ctx.mcpReq.signal.addEventListener('abort', resolve, { once: true }));
        cancelled += 1;
        console.log(JSON.stringify({ cancelled }));
        return text('cancelled');
      }
      default:
        throw new Error(`unknown tool ${request.params.name}`);
    }
  });
  return server;
}

const handler = createMcpHandler(factory, { legacy: 'reject', keepAliveMs: 1000 });

// node:http to the handler's web-standard fetch face; a closed connection aborts the request.
const httpServer = http.createServer(async (req, res) => {
  // What a client mirrored from a tool's x-mcp-header parameter, as it arrived.
  if (req.headers['mcp-param-region'] !== undefined) {
    console.log(JSON.stringify({ regionHeader: req.headers['mcp-param-region'] }));
  }
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  const body = req.method === 'POST' ? Readable.toWeb(req) : undefined;
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
    body,
    duplex: 'half',
    signal: abort.signal,
  });
  try {
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) return res.end();
    for await (const chunk of response.body) res.write(chunk);
    res.end();
  } catch (error) {
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});
httpServer.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: httpServer.address().port })));
