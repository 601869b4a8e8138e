// The official TypeScript SDK client (v1) through a load balancer that sends each request to
// the next gateway replica: node replicas-client.mjs URL TOKEN MODE.
//
// MODE "flows": the whole of what a host does (tools, progress, cancellation, a task,
// elicitation and sampling answered by the client, resources and a subscription, logging, a
// tool-list change), each step's failure recorded; prints one JSON object.
// MODE "steady": connects, prints {"ready": sessionId}, then serves commands read line by line
// on stdin: "calls" (a few plain calls), "slow N" (N long calls at once, each answered or
// failed), "end"; prints one JSON line per command.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import * as readline from "node:readline";

const [url, token, mode] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client(
  { name: "ts-replicas-client", version: "1.0.0" },
  { capabilities: { elicitation: {}, sampling: {} } },
);
const seen = { elicitations: 0, samplings: 0, updates: [], logs: 0, listChanged: 0 };
client.setRequestHandler(ElicitRequestSchema, async () => {
  seen.elicitations++;
  return { action: "accept", content: { username: "ada", email: "ada@example.com", answer: "yes" } };
});
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  seen.samplings++;
  return { role: "assistant", content: { type: "text", text: "sampled by the client" }, model: "test-model" };
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => seen.updates.push(n.params.uri));
client.setNotificationHandler(LoggingMessageNotificationSchema, () => seen.logs++);
client.setNotificationHandler(ToolListChangedNotificationSchema, () => seen.listChanged++);
await client.connect(transport);
const sessionId = transport.sessionId;

const text = (r) => r.content?.[0]?.text;
// Waits for something the client receives on its own (a notification), sending pings
// meanwhile (each one a real request through the balancer); bounded.
async function until(what) {
  for (let i = 0; i < 2000 && !what(); i++) await client.ping();
  return what();
}

if (mode === "steady") {
  console.log(JSON.stringify({ ready: sessionId }));
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [command, arg] = line.trim().split(" ");
    if (command === "calls") {
      const out = { sessionId: transport.sessionId, ok: 0, errors: [] };
      for (let i = 0; i < 6; i++) {
        try {
          const r = await client.callTool({ name: "demo__add", arguments: { a: i, b: 1 } });
          if (text(r) === String(i + 1)) out.ok++;
          else out.errors.push(`wrong sum: ${JSON.stringify(r)}`);
        } catch (e) {
          out.errors.push(String(e));
        }
      }
      console.log(JSON.stringify(out));
    } else if (command === "slow") {
      const calls = [];
      for (let i = 0; i < Number(arg); i++) {
        calls.push(
          client
            .callTool({ name: "demo__wait", arguments: { gate: "steady" } }, CallToolResultSchema, { timeout: 120000 })
            .then(() => "answered", (e) => `failed: ${e}`),
        );
      }
      console.log(JSON.stringify({ started: Number(arg) }));
      console.log(JSON.stringify({ sessionId: transport.sessionId, outcomes: await Promise.all(calls) }));
    } else if (command === "end") {
      await transport.terminateSession();
      await client.close();
      console.log(JSON.stringify({ ended: sessionId }));
      process.exit(0);
    }
  }
}

const out = { sessionId, errors: [] };
async function step(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out.errors.push({ step: name, error: String(e?.message ?? e) });
  }
}

await step("tools", async () => (await client.listTools()).tools.length);
await step("sums", async () => {
  const sums = [];
  for (let i = 0; i < 6; i++) sums.push(text(await client.callTool({ name: "demo__add", arguments: { a: i, b: 1 } })));
  return sums;
});
await step("progress", async () => {
  const values = [];
  await client.callTool({ name: "demo__progress", arguments: { values: [1, 2, 3] } }, CallToolResultSchema, {
    onprogress: (p) => values.push(p.progress),
  });
  return values;
});
await step("cancelled", async () => {
  const abort = new AbortController();
  try {
    await client.callTool({ name: "demo__slow", arguments: { ms: 60000, steps: 600 } }, CallToolResultSchema, {
      signal: abort.signal,
      onprogress: () => abort.abort("stop"),
    });
    return "completed instead";
  } catch (e) {
    return abort.signal.aborted;
  }
});
await step("task", async () => {
  const events = [];
  let result;
  for await (const msg of client.experimental.tasks.callToolStream(
    { name: "demo__slow", arguments: { ms: 60, steps: 2 } },
    CallToolResultSchema,
  )) {
    events.push(msg.type);
    if (msg.type === "result") result = text(msg.result);
    if (msg.type === "error") throw msg.error;
  }
  return { events, result };
});
await step("elicited", async () => {
  const answers = [];
  for (let i = 0; i < 3; i++) {
    answers.push(text(await client.callTool({ name: "demo__test_elicitation", arguments: { message: "who?" } })));
  }
  return answers;
});
await step("elicitedUnrelated", async () => {
  // Questions the upstream asks on its own stream, after its call has returned: they reach the
  // client's GET stream wherever it is open, and the answers go back to the asking replica.
  const before = seen.elicitations;
  for (let i = 0; i < 6; i++) {
    await client.callTool({ name: "demo__ask", arguments: { wait: false, stream: "get", question: "later?" } });
  }
  return await until(() => seen.elicitations >= before + 6);
});
await step("sampled", async () => {
  const answers = [];
  for (let i = 0; i < 3; i++) {
    answers.push(text(await client.callTool({ name: "demo__test_sampling", arguments: { prompt: "hi" } })));
  }
  return answers;
});
await step("resources", async () => {
  const listed = (await client.listResources()).resources;
  const counter = listed.find((r) => r.uri.includes("counter"));
  const read = await client.readResource({ uri: counter.uri });
  await client.subscribeResource({ uri: counter.uri });
  for (let i = 0; i < 3; i++) await client.callTool({ name: "demo__touch", arguments: {} });
  const updated = await until(() => seen.updates.length >= 1);
  return { listed: listed.length, read: read.contents.length, updated, uri: seen.updates[0] === counter.uri };
});
await step("logging", async () => {
  await client.setLoggingLevel("debug");
  await client.callTool({ name: "demo__test_tool_with_logging", arguments: {} });
  return await until(() => seen.logs >= 1);
});
await step("listChanged", async () => {
  await client.callTool({ name: "demo__toggle_extra", arguments: {} });
  return await until(() => seen.listChanged >= 1);
});
out.sessionAfter = transport.sessionId;
out.seen = seen;
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
