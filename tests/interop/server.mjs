// An MCP server built with the official TypeScript SDK: the upstream peer users run.
//   node server.mjs          Streamable HTTP on 127.0.0.1, a free port; prints {"port": N}
//   node server.mjs --stdio  stdio
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { serveHttp } from "./http-harness.mjs";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

// Handlers that observed their request being aborted (notifications/cancelled), per process.
let aborts = 0;

function buildServer() {
  const server = new McpServer({ name: "ts-peer", version: "1.0.0" });
  server.registerTool(
    "greet",
    { description: "Greets someone", inputSchema: { name: z.string() } },
    async ({ name }) => ({ content: [{ type: "text", text: `Hello, ${name}!` }] }),
  );
  server.registerTool(
    "count",
    { description: "Counts to n, reporting progress", inputSchema: { n: z.number().int() } },
    async ({ n }, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= n; i++) {
        if (token !== undefined) {
          await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: i, total: n } });
        }
      }
      return { content: [{ type: "text", text: `counted to ${n}` }], structuredContent: { n } };
    },
  );
  server.registerTool(
    "hang",
    { description: "Reports progress once, then waits until the request is aborted", inputSchema: {} },
    async (_args, extra) => {
      const token = extra._meta?.progressToken;
      if (token !== undefined) {
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: 1 } });
      }
      await new Promise((resolve) => {
        if (extra.signal.aborted) return resolve();
        extra.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      aborts += 1;
      return { content: [{ type: "text", text: "aborted" }] };
    },
  );
  server.registerTool(
    "aborts",
    { description: "How many hang calls this process saw aborted", inputSchema: {} },
    async () => ({ content: [{ type: "text", text: String(aborts) }] }),
  );
  server.registerTool(
    "boom",
    { description: "Fails as a tool error", inputSchema: {} },
    async () => ({ content: [{ type: "text", text: "boom" }], isError: true }),
  );
  return server;
}

if (process.argv.includes("--stdio")) {
  await buildServer().connect(new StdioServerTransport());
} else {
  serveHttp(buildServer);
}
