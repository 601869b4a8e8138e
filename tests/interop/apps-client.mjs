// The official TypeScript SDK client (1.32) as an MCP Apps host would use it, against the
// ext-apps example servers from npm, directly or through the gateway:
//   node apps-client.mjs stdio:PACKAGE      spawns the example server PACKAGE (its bin) with --stdio
//   node apps-client.mjs URL [plain]        talks Streamable HTTP to URL
// It declares the MCP Apps extension (`plain`: declares nothing), lists the tools, reads the UI
// resource each tool names (`_meta.ui.resourceUri`), calls each tool with no arguments, and
// prints one JSON object of what it saw, so the Rust test can compare a direct run with a run
// through the gateway: the resource contents byte for byte, the tools' `_meta`, the calls'
// outcomes (results whose values change with time, like a clock, are reported by shape).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const [target, mode] = process.argv.slice(2);
const UI = "io.modelcontextprotocol/ui";

function transportFor(target) {
  if (target.startsWith("stdio:")) {
    const name = target.slice("stdio:".length);
    const dir = fileURLToPath(new URL(`./node_modules/${name}/`, import.meta.url));
    const bin = Object.values(JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).bin)[0];
    const script = join(dir, bin);
    return new StdioClientTransport({ command: process.execPath, args: [script, "--stdio"], stderr: "ignore" });
  }
  return new StreamableHTTPClientTransport(new URL(target));
}

const capabilities = mode === "plain" ? {} : { extensions: { [UI]: { mimeTypes: ["text/html;profile=mcp-app"] } } };
const client = new Client({ name: "apps-interop", version: "1.0.0" }, { capabilities });
await client.connect(transportFor(target));

// A value's shape: its keys and types, not its contents.
function shape(value) {
  if (Array.isArray(value)) return value.map(shape);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, shape(value[k])]));
  }
  return typeof value;
}

const report = { server: client.getServerCapabilities()?.extensions?.[UI] ?? null, tools: [] };
const { tools } = await client.listTools();
for (const tool of tools.sort((a, b) => a.name.localeCompare(b.name))) {
  const seen = { name: tool.name, meta: tool._meta ?? null };
  const uri = tool._meta?.ui?.resourceUri;
  if (uri) {
    const read = await client.readResource({ uri });
    seen.read = read.contents.map((c) => ({ uri: c.uri, mimeType: c.mimeType, text: c.text, meta: c._meta ?? null }));
  }
  try {
    const result = await client.callTool({ name: tool.name, arguments: {} });
    seen.call = { isError: result.isError ?? false, shape: shape(result) };
  } catch (error) {
    seen.call = { code: error.code, message: error.message };
  }
  report.tools.push(seen);
}
process.stdout.write(JSON.stringify(report) + "\n");
await client.close();
