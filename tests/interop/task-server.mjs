// An MCP server built with the official TypeScript SDK that runs tasks natively
// (server.experimental.tasks.registerToolTask).
//   node task-server.mjs          Streamable HTTP on 127.0.0.1, a free port; prints {"port": N}
//   node task-server.mjs --stdio  stdio; exits when its stdin closes
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { serveHttp } from "./http-harness.mjs";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from "@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js";
import { z } from "zod";

const taskStore = new InMemoryTaskStore();

// Completes `task` with `text` after `ms` milliseconds.
function completeAfter(store, task, ms, text) {
  setTimeout(async () => {
    try {
      await store.storeTaskResult(task.taskId, "completed", { content: [{ type: "text", text }] });
    } catch (e) {
      console.error("not stored:", e.message);
    }
  }, ms);
}

// A task tool's tasks/get and tasks/result: what the store holds.
const readsFromTheStore = {
  async getTask(_args, { taskId, taskStore }) {
    return await taskStore.getTask(taskId);
  },
  async getTaskResult(_args, { taskId, taskStore }) {
    return await taskStore.getTaskResult(taskId);
  },
};

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
        completeAfter(taskStore, task, ms, `waited ${ms} ms`);
        return { task };
      },
      ...readsFromTheStore,
    },
  );
  // Reports progress as soon as the task starts, as a notification of the server's own (no
  // related request: the SDK sends it on the standalone GET stream, and drops it when none is
  // open, having no event store), then completes after ms.
  server.experimental.tasks.registerToolTask(
    "progress_task",
    {
      description: "Reports progress 1..steps as the task starts, then completes after ms",
      inputSchema: { steps: z.number().int(), ms: z.number().int() },
      execution: { taskSupport: "required" },
    },
    {
      async createTask({ steps, ms }, { taskStore, taskRequestedTtl, _meta }) {
        const task = await taskStore.createTask({ ttl: taskRequestedTtl });
        const progressToken = _meta?.progressToken;
        for (let progress = 1; progress <= steps && progressToken !== undefined; progress++) {
          await server.server.notification({ method: "notifications/progress", params: { progressToken, progress, total: steps } });
        }
        completeAfter(taskStore, task, ms, `reported ${steps}`);
        return { task };
      },
      ...readsFromTheStore,
    },
  );
  return server;
}

if (process.argv.includes("--stdio")) {
  await buildServer().connect(new StdioServerTransport());
  // The client went away (its end of the pipe closed): so does this server and its tasks.
  process.stdin.on("end", () => process.exit(0));
} else {
  serveHttp(buildServer);
}
