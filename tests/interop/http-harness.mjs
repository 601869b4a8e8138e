// The Streamable HTTP harness the TypeScript SDK peers share: one transport per session, on
// 127.0.0.1 and a free port; prints {"port": N} once listening.
import http from "node:http";
import https from "node:https";
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

// SLOW_GET_MS (tests only): each GET (a client's standalone stream) is taken up this many
// milliseconds late, as a slow network or a busy server would: what the server sends on that
// stream meanwhile has no stream to go to.
const slowGetMs = Number(process.env.SLOW_GET_MS ?? 0);
// TLS_CERT and TLS_KEY (PEM files): serve HTTPS instead of HTTP.
const tls = process.env.TLS_CERT && process.env.TLS_KEY
  ? { cert: readFileSync(process.env.TLS_CERT), key: readFileSync(process.env.TLS_KEY) }
  : undefined;

// Options: `route(req, res)` answers a request outside MCP and returns true (e.g. a metadata
// document); `authorize(req, res)` returns false once it has refused a request, else lets it
// through (setting `req.auth` for the SDK's handlers); `onListen(port)` runs once listening.
export function serveHttp(buildServer, { route, authorize, onListen } = {}) {
  const transports = new Map();
  const readBody = (req) =>
    new Promise((resolve, reject) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
      req.on("error", reject);
    });
  const handler = async (req, res) => {
    try {
      if (req.method === "GET" && slowGetMs > 0) {
        await new Promise((resolve) => setTimeout(resolve, slowGetMs));
      }
      if (route && (await route(req, res))) return;
      if (authorize && !(await authorize(req, res))) return;
      const sid = req.headers["mcp-session-id"];
      let transport = sid ? transports.get(sid) : undefined;
      const body = req.method === "POST" ? JSON.parse(await readBody(req)) : undefined;
      if (!transport) {
        if (req.method === "POST" && body?.method === "initialize") {
          transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (id) => transports.set(id, transport),
          });
          transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
          await buildServer().connect(transport);
        } else {
          res.writeHead(sid ? 404 : 400).end();
          return;
        }
      }
      await transport.handleRequest(req, res, body);
    } catch (e) {
      console.error("server error", e);
      if (!res.headersSent) res.writeHead(500).end();
    }
  };
  const httpServer = tls ? https.createServer(tls, handler) : http.createServer(handler);
  httpServer.listen(0, "127.0.0.1", () => {
    onListen?.(httpServer.address().port);
    console.log(JSON.stringify({ port: httpServer.address().port }));
  });
}
