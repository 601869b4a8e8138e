// @modelcontextprotocol/server-everything (pinned in package.json) over Streamable HTTP on
// 127.0.0.1 and a free port (its own launcher listens on every interface at a fixed port);
// prints {"port": N}. The server itself is the package's own createServer().
import { createServer } from "@modelcontextprotocol/server-everything/dist/server/index.js";
import { serveHttp } from "./http-harness.mjs";

serveHttp(() => createServer().server);
