// An MCP server built with the official TypeScript SDK that runs tasks natively
// (server.experimental.tasks.registerToolTask). Streamable HTTP on 127.0.0.1, a free port;
// prints {"port": N}.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from "@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js";
import { z } from "zod";

const taskStore = new InMemoryTaskStore();

function buildServer() {
  const server = new McpServer(
    { name: "ts-task-peer", version: "1.0.0" },
    {
      capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore,
      taskMessageQueue: new InMemoryTaskMessageQueue(),
    },
  );
  server.experimental.tasks.registerToolTask(
    "delay",
    { description: "Waits ms milliseconds as a task", inputSchema: { ms: z.number().int() }, execution: { taskSupport: "required" } },
    {
      async createTask({ ms }, { taskStore, taskRequestedTtl }) {
        const task = await taskStore.createTask({ ttl: taskRequestedTtl });
        setTimeout(async () => {
          try {
            await taskStore.storeTaskResult(task.taskId, "completed", { content: [{ type: "text", text: `waited ${ms} ms` }] });
          } catch (e) {
            console.error("not stored:", e.message);
          }
        }, ms);
        return { task };
      },
      async getTask(_args, { taskId, taskStore }) {
        return await taskStore.getTask(taskId);
      },
      async getTaskResult(_args, { taskId, taskStore }) {
        return await taskStore.getTaskResult(taskId);
      },
    },
  );
  return server;
}

const transports = new Map();
const readBody = (req) =>
  new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
const httpServer = http.createServer(async (req, res) => {
  try {
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
});
httpServer.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: httpServer.address().port })));
