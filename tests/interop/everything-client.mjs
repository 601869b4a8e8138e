// The official TypeScript SDK client (1.32) against @modelcontextprotocol/server-everything,
// directly or through the gateway:
//   node everything-client.mjs stdio        spawns server-everything over stdio
//   node everything-client.mjs URL          talks Streamable HTTP to URL
// It declares roots, sampling and elicitation, answers them, exercises resources, templates,
// subscriptions, prompts, completion, logging and the tools that ask the client, and prints one
// JSON object of what it saw (without timestamps or session ids), so that the Rust test can
// compare the direct run with the run through the gateway.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { fileURLToPath } from "node:url";

const target = process.argv[2];
const everything = fileURLToPath(
  new URL("./node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url),
);
const transport =
  target === "stdio"
    ? new StdioClientTransport({ command: process.execPath, args: [everything, "stdio"], stderr: "ignore" })
    : new StreamableHTTPClientTransport(new URL(target));

const client = new Client(
  { name: "everything-interop", version: "1.0.0" },
  { capabilities: { roots: { listChanged: true }, sampling: {}, elicitation: { form: {} } } },
);
const asked = { roots: 0, sampling: 0, elicitation: 0 };
client.setRequestHandler(ListRootsRequestSchema, async () => {
  asked.roots++;
  return { roots: [{ uri: "file:///interop/project", name: "project" }] };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.sampling++;
  const prompt = request.params.messages[0]?.content?.text;
  return { role: "assistant", content: { type: "text", text: `sampled: ${prompt}` }, model: "interop", stopReason: "endTurn" };
});
client.setRequestHandler(ElicitRequestSchema, async () => {
  asked.elicitation++;
  return { action: "accept", content: { name: "Ada Lovelace", check: true, email: "ada@example.com", integer: 7 } };
});

// Notifications, awaited with a bound (a failure, never a synchronisation by sleeping).
const logs = [];
const updated = [];
const waiters = [];
const settle = () => {
  for (const w of [...waiters]) {
    if (w.test()) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(true);
    }
  }
};
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  logs.push(n.params);
  settle();
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updated.push(n.params.uri);
  settle();
});
const until = (test, what) =>
  new Promise((resolve, reject) => {
    if (test()) return resolve(true);
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 15000);
    waiters.push({ test, resolve: (v) => (clearTimeout(timer), resolve(v)) });
  });

async function all(method, key) {
  const items = [];
  let cursor;
  do {
    const page = await client[method](cursor ? { cursor } : {});
    items.push(...page[key]);
    cursor = page.nextCursor;
  } while (cursor);
  return items;
}
const text = (result) => result.content?.map((c) => c.text ?? `[${c.type}]`).join("\n");
const withoutSession = (s) => s.replace(/ ?-? ?SessionId [^ ]+/g, "").replace(/ from session \S+/g, "").trim();

await client.connect(transport);
const out = {};
const caps = client.getServerCapabilities();
out.capabilities = Object.keys(caps).filter((k) => k !== "tasks" && k !== "experimental").sort();

out.tools = (await all("listTools", "tools")).map((t) => t.name).sort();

const resources = await all("listResources", "resources");
out.resources = resources.map((r) => r.uri).sort();
out.templates = (await all("listResourceTemplates", "resourceTemplates")).map((t) => t.uriTemplate).sort();
const first = out.resources.find((u) => u.startsWith("demo://resource/static/document/"));
const read = await client.readResource({ uri: first });
out.read = { uri: read.contents[0].uri, mimeType: read.contents[0].mimeType, bytes: (read.contents[0].text ?? read.contents[0].blob).length };
const dynamic = await client.readResource({ uri: "demo://resource/dynamic/text/3" });
out.templateRead = { uri: dynamic.contents[0].uri, startsWith: dynamic.contents[0].text.split(":")[0] };

await client.setLoggingLevel("debug");
await client.subscribeResource({ uri: first });
await until(() => logs.some((l) => String(l.data).startsWith(`Received Subscribe Resource request for URI: ${first}`)), "the subscribe log");
await client.callTool({ name: "toggle-subscriber-updates", arguments: {} });
await until(() => updated.includes(first), "notifications/resources/updated");
out.subscription = { subscribeLogged: true, updated: first };
await client.callTool({ name: "toggle-subscriber-updates", arguments: {} });
await client.unsubscribeResource({ uri: first });

const before = logs.length;
await client.callTool({ name: "toggle-simulated-logging", arguments: {} });
const levels = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
await until(() => logs.slice(before).some((l) => levels.includes(l.level) && /level message|level-message/i.test(l.data)), "a simulated log message");
await client.callTool({ name: "toggle-simulated-logging", arguments: {} });
out.logging = { simulatedArrived: true, subscribeMessage: withoutSession(String(logs.find((l) => String(l.data).startsWith("Received Subscribe")).data)) };

out.prompts = (await all("listPrompts", "prompts")).map((p) => p.name).sort();
out.simplePrompt = (await client.getPrompt({ name: "simple-prompt" })).messages;
out.argsPrompt = (await client.getPrompt({ name: "args-prompt", arguments: { city: "Paris", state: "Texas" } })).messages;
out.completeDepartment = (await client.complete({ ref: { type: "ref/prompt", name: "completable-prompt" }, argument: { name: "department", value: "E" } })).completion.values;
out.completeWithContext = (
  await client.complete({
    ref: { type: "ref/prompt", name: "completable-prompt" },
    argument: { name: "name", value: "" },
    context: { arguments: { department: "Sales" } },
  })
).completion.values;
out.completeTemplate = (
  await client.complete({ ref: { type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" }, argument: { name: "resourceId", value: "7" } })
).completion.values;

out.elicitation = text(await client.callTool({ name: "trigger-elicitation-request", arguments: {} }));
out.sampling = text(await client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "Say hi", maxTokens: 10 } }));
out.roots = text(await client.callTool({ name: "get-roots-list", arguments: {} }));
out.asked = { sampling: asked.sampling, elicitation: asked.elicitation, rootsAsked: asked.roots > 0 };

await client.close();
console.log(JSON.stringify(out));
process.exit(0);
