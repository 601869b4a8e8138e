// An ext-apps example server's own `createServer` served over Streamable HTTP on 127.0.0.1 and a
// free port, stateless, as the example's own entry point serves it (which listens on every
// interface): node apps-http.mjs PACKAGE. Prints {"port": N} once listening.
import http from "node:http";
import { NodeStreamableHTTPServerTransport } from "@modelcontextprotocol/node";

const { createServer } = await import(process.argv[2]);

const server = http.createServer(async (req, res) => {
  if (new URL(req.url, "http://127.0.0.1").pathname !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  const body = text ? JSON.parse(text) : undefined;
  const mcp = createServer();
  const transport = new NodeStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close().catch(() => {});
    mcp.close().catch(() => {});
  });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, body);
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
