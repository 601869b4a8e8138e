// The TypeScript SDK's client in a real browser: headless Chromium (Debian's `chromium`, driven
// by playwright-core) loads a page from an origin the gateway allows (http://127.0.0.1:PORT) and
// one from an origin it does not (http://127.0.0.2:PORT); each page's script connects to the
// gateway at argv[2] with the SDK's Streamable HTTP client (bundled for the browser by
// esbuild), lists the tools and calls `demo__echo`. Prints one JSON line:
// {"allowed": {...}, "disallowed": {...}}, each {ok, tools, text} or {ok: false, error}.
import http from "node:http";
import { build } from "esbuild";
import { launchChromium } from "./chromium.mjs";

const gateway = process.argv[2];
if (!gateway) {
  console.error("usage: node browser-client.mjs GATEWAY_URL");
  process.exit(2);
}

const bundle = await build({
  stdin: {
    contents: `
      import { Client } from "@modelcontextprotocol/sdk/client/index.js";
      import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
      window.mcp = { Client, StreamableHTTPClientTransport };`,
    resolveDir: import.meta.dirname,
  },
  bundle: true,
  format: "iife",
  platform: "browser",
  write: false,
  logLevel: "silent",
});
const sdk = bundle.outputFiles[0].text;

const page = `<!doctype html>
<title>taskgate from a browser</title>
<script src="/sdk.js"></script>
<script>
(async () => {
  try {
    const client = new mcp.Client({ name: "browser", version: "1" });
    await client.connect(new mcp.StreamableHTTPClientTransport(new URL(${JSON.stringify(gateway)})));
    const { tools } = await client.listTools();
    const result = await client.callTool({ name: "demo__echo", arguments: { text: "from a browser" } });
    window.outcome = { ok: true, tools: tools.map((t) => t.name), text: result.content[0].text };
    await client.close();
  } catch (e) {
    window.outcome = { ok: false, error: String(e) };
  }
})();
</script>`;

/** Serves the page and the bundle on `host`, on a free port; resolves to its URL. */
function serve(host) {
  const server = http.createServer((req, res) => {
    if (req.url === "/sdk.js") {
      res.writeHead(200, { "content-type": "text/javascript" });
      res.end(sdk);
    } else {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(page);
    }
  });
  return new Promise((resolve) => {
    server.listen(0, host, () => resolve({ server, port: server.address().port }));
  });
}

const allowed = await serve("127.0.0.1");
const disallowed = await serve("127.0.0.2");
const browser = await launchChromium();
const outcome = {};
try {
  for (const [name, url] of [
    ["allowed", `http://127.0.0.1:${allowed.port}/`],
    ["disallowed", `http://127.0.0.2:${disallowed.port}/`],
  ]) {
    const tab = await browser.newPage();
    await tab.goto(url);
    await tab.waitForFunction(() => window.outcome, null, { timeout: 30000 });
    outcome[name] = await tab.evaluate(() => window.outcome);
    await tab.close();
  }
} finally {
  await browser.close();
  allowed.server.close();
  disallowed.server.close();
}
console.log(JSON.stringify(outcome));
