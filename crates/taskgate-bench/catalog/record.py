#!/usr/bin/env python3
"""Record the `tools/list` result of real MCP servers into catalog/servers/*.json.

Each server is started over stdio, sent `initialize`, then
`notifications/initialized`, then `tools/list` (following `nextCursor` until
it is absent), and its tools are written unchanged to
`servers/<short-name>.json` as
`{"server": ..., "registry": ..., "version": ..., "tools": [...]}`.

The packages must be installed first (see README.md): npm packages under
NPM_PREFIX, each PyPI package in its own virtualenv VENVS/<short-name>.

Usage:
    python3 record.py                 # record every server below
    python3 record.py time git        # record only these short names
    python3 record.py --print-install # print the install commands

Standard library only.
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

NPM_PREFIX = os.environ.get("CATALOG_NPM_PREFIX", "/tmp/catalog-npm")
VENVS = os.environ.get("CATALOG_VENVS", "/tmp/catalog-venvs")
SCRATCH = os.environ.get("CATALOG_SCRATCH", "/tmp/catalog-scratch")

PROTOCOL_VERSION = "2025-11-25"
TIMEOUT_S = 30.0

# name: fixture short name; bin: executable in node_modules/.bin or the venv's
# bin/; args: its arguments ({scratch} is replaced by SCRATCH); env: extra
# variables (dummy credentials are enough to list tools); pip_extra: further
# pins for the server's venv (sqlite and duckdb predate the mcp 2.x SDK, whose
# low-level Server lacks the decorators they use).
SERVERS = [
    # ---- npm ----
    {"name": "everything", "registry": "npm", "package": "@modelcontextprotocol/server-everything",
     "version": "2026.8.31", "bin": "mcp-server-everything", "args": ["stdio"], "env": {}},
    {"name": "filesystem", "registry": "npm", "package": "@modelcontextprotocol/server-filesystem",
     "version": "2026.8.31", "bin": "mcp-server-filesystem", "args": ["{scratch}/fs-root"], "env": {}},
    {"name": "memory", "registry": "npm", "package": "@modelcontextprotocol/server-memory",
     "version": "2026.8.31", "bin": "mcp-server-memory", "args": [],
     "env": {"MEMORY_FILE_PATH": "{scratch}/memory.jsonl"}},
    {"name": "sequential-thinking", "registry": "npm",
     "package": "@modelcontextprotocol/server-sequential-thinking",
     "version": "2026.8.31", "bin": "mcp-server-sequential-thinking", "args": [], "env": {}},
    {"name": "github", "registry": "npm", "package": "@modelcontextprotocol/server-github",
     "version": "2025.4.8", "bin": "mcp-server-github", "args": [],
     "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "dummy"}},
    {"name": "gitlab", "registry": "npm", "package": "@modelcontextprotocol/server-gitlab",
     "version": "2025.4.25", "bin": "mcp-server-gitlab", "args": [],
     "env": {"GITLAB_PERSONAL_ACCESS_TOKEN": "dummy", "GITLAB_API_URL": "https://gitlab.invalid/api/v4"}},
    {"name": "puppeteer", "registry": "npm", "package": "@modelcontextprotocol/server-puppeteer",
     "version": "2025.5.12", "bin": "mcp-server-puppeteer", "args": [], "env": {}},
    {"name": "brave-search", "registry": "npm", "package": "@modelcontextprotocol/server-brave-search",
     "version": "0.6.2", "bin": "mcp-server-brave-search", "args": [], "env": {"BRAVE_API_KEY": "dummy"}},
    {"name": "slack", "registry": "npm", "package": "@modelcontextprotocol/server-slack",
     "version": "2025.4.25", "bin": "mcp-server-slack", "args": [],
     "env": {"SLACK_BOT_TOKEN": "xoxb-dummy", "SLACK_TEAM_ID": "T00000000"}},
    {"name": "google-maps", "registry": "npm", "package": "@modelcontextprotocol/server-google-maps",
     "version": "0.6.2", "bin": "mcp-server-google-maps", "args": [], "env": {"GOOGLE_MAPS_API_KEY": "dummy"}},
    {"name": "postgres", "registry": "npm", "package": "@modelcontextprotocol/server-postgres",
     "version": "0.6.2", "bin": "mcp-server-postgres", "args": ["postgresql://localhost:5432/catalog"], "env": {}},
    {"name": "playwright", "registry": "npm", "package": "@playwright/mcp",
     "version": "0.0.83", "bin": "playwright-mcp", "args": ["--headless"], "env": {}},
    {"name": "notion", "registry": "npm", "package": "@notionhq/notion-mcp-server",
     "version": "2.5.2", "bin": "notion-mcp-server", "args": [], "env": {"NOTION_TOKEN": "dummy"}},
    {"name": "firecrawl", "registry": "npm", "package": "firecrawl-mcp",
     "version": "3.26.0", "bin": "firecrawl-mcp", "args": [], "env": {"FIRECRAWL_API_KEY": "fc-dummy"}},
    {"name": "context7", "registry": "npm", "package": "@upstash/context7-mcp",
     "version": "4.1.1", "bin": "context7-mcp", "args": [], "env": {}},
    {"name": "kubernetes", "registry": "npm", "package": "mcp-server-kubernetes",
     "version": "4.1.7", "bin": "mcp-server-kubernetes", "args": [], "env": {}},
    # ---- PyPI ----
    {"name": "fetch", "registry": "pypi", "package": "mcp-server-fetch",
     "version": "2026.10.24", "bin": "mcp-server-fetch", "args": [], "env": {}},
    {"name": "git", "registry": "pypi", "package": "mcp-server-git",
     "version": "2026.10.19", "bin": "mcp-server-git", "args": [], "env": {}},
    {"name": "time", "registry": "pypi", "package": "mcp-server-time",
     "version": "2026.10.19", "bin": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {}},
    {"name": "sqlite", "registry": "pypi", "package": "mcp-server-sqlite",
     "version": "2025.4.25", "bin": "mcp-server-sqlite", "args": ["--db-path", "{scratch}/catalog.sqlite"], "env": {},
     "pip_extra": ["mcp==1.30.0"]},
    {"name": "duckdb", "registry": "pypi", "package": "mcp-server-duckdb",
     "version": "1.1.0", "bin": "mcp-server-duckdb", "args": ["--db-path", "{scratch}/catalog.duckdb"], "env": {},
     "pip_extra": ["mcp==1.30.0"]},
    {"name": "aws-documentation", "registry": "pypi", "package": "awslabs.aws-documentation-mcp-server",
     "version": "1.2.3", "bin": "awslabs.aws-documentation-mcp-server", "args": [],
     "env": {"AWS_DOCUMENTATION_PARTITION": "aws", "FASTMCP_LOG_LEVEL": "ERROR"}},
    {"name": "duckduckgo", "registry": "pypi", "package": "duckduckgo-mcp-server",
     "version": "0.7.0", "bin": "duckduckgo-mcp-server", "args": [], "env": {}},
    {"name": "excel", "registry": "pypi", "package": "excel-mcp-server",
     "version": "2.2.2", "bin": "excel-mcp-server", "args": ["stdio"],
     "env": {"EXCEL_FILES_PATH": "{scratch}/excel"}},
    {"name": "arxiv", "registry": "pypi", "package": "arxiv-mcp-server",
     "version": "0.8.2", "bin": "arxiv-mcp-server", "args": ["--storage-path", "{scratch}/arxiv"], "env": {}},
]


def install_commands():
    npm = [f"{s['package']}@{s['version']}" for s in SERVERS if s["registry"] == "npm"]
    lines = [f"PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix {NPM_PREFIX} --no-audit --no-fund \\"]
    lines += [f"  {p} \\" for p in npm[:-1]] + [f"  {npm[-1]}"]
    for s in SERVERS:
        if s["registry"] == "pypi":
            venv = f"{VENVS}/{s['name']}"
            extra = "".join(" " + p for p in s.get("pip_extra", []))
            lines.append(f"python3 -m venv {venv} && {venv}/bin/pip install {s['package']}=={s['version']}{extra}")
    return "\n".join(lines)


def subst(value):
    return value.replace("{scratch}", SCRATCH)


def executable(server):
    if server["registry"] == "npm":
        return os.path.join(NPM_PREFIX, "node_modules", ".bin", server["bin"])
    return os.path.join(VENVS, server["name"], "bin", server["bin"])


def installed_version(server):
    if server["registry"] == "npm":
        path = os.path.join(NPM_PREFIX, "node_modules", *server["package"].split("/"), "package.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)["version"]
    python = os.path.join(VENVS, server["name"], "bin", "python")
    out = subprocess.run(
        [python, "-c", "import importlib.metadata,sys; print(importlib.metadata.version(sys.argv[1]))",
         server["package"]],
        capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


class Session:
    """A JSON-RPC session with one server over its stdin/stdout."""

    def __init__(self, argv, env, stderr_file):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file,
            env=env, cwd=SCRATCH, start_new_session=True)
        self.lines = queue.Queue()
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.put(raw)
        self.lines.put(None)

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def request(self, method, params, deadline):
        req_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to {method} in time")
            try:
                raw = self.lines.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"no answer to {method} in time") from None
            if raw is None:
                raise RuntimeError(f"server closed stdout before answering {method}")
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # not a JSON-RPC line (stray log output)
            if not isinstance(msg, dict):
                continue
            if "method" in msg and "id" in msg:  # a request from the server
                if msg["method"] == "ping":
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
                else:
                    self.send({"jsonrpc": "2.0", "id": msg["id"],
                               "error": {"code": -32601, "message": "Method not found"}})
                continue
            if msg.get("id") != req_id:
                continue  # a notification or an unrelated response
            if "error" in msg:
                raise RuntimeError(f"{method} failed: {msg['error']}")
            return msg["result"]

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def record(server, out_dir):
    version = installed_version(server)
    if version != server["version"]:
        raise RuntimeError(f"installed {server['package']} is {version}, pinned {server['version']}")
    os.makedirs(os.path.join(SCRATCH, "fs-root"), exist_ok=True)
    os.makedirs(os.path.join(SCRATCH, "excel"), exist_ok=True)
    os.makedirs(os.path.join(SCRATCH, "arxiv"), exist_ok=True)
    env = {
        "PATH": os.path.dirname(executable(server)) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
    }
    env.update({k: subst(v) for k, v in server["env"].items()})
    argv = [executable(server)] + [subst(a) for a in server["args"]]
    deadline = time.monotonic() + TIMEOUT_S
    with tempfile.TemporaryFile() as stderr_file:
        session = Session(argv, env, stderr_file)
        try:
            init = session.request("initialize", {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "taskgate-catalog-recorder", "version": "1.0.0"},
            }, deadline)
            session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            tools, cursor, pages = [], None, 0
            while True:
                params = {"cursor": cursor} if cursor else {}
                result = session.request("tools/list", params, deadline)
                tools.extend(result.get("tools", []))
                pages += 1
                cursor = result.get("nextCursor")
                if not cursor:
                    break
        except Exception:
            stderr_file.seek(0)
            tail = stderr_file.read().decode("utf-8", "replace")[-2000:]
            sys.stderr.write(f"--- stderr of {server['name']} ---\n{tail}\n")
            raise
        finally:
            session.close()
    fixture = {"server": server["package"], "registry": server["registry"],
               "version": server["version"], "tools": tools}
    path = os.path.join(out_dir, server["name"] + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return init.get("protocolVersion"), len(tools), pages


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="short names to record (default: all)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "servers"))
    parser.add_argument("--print-install", action="store_true", help="print the install commands and exit")
    args = parser.parse_args()
    if args.print_install:
        print(install_commands())
        return 0
    known = {s["name"] for s in SERVERS}
    unknown = set(args.names) - known
    if unknown:
        parser.error(f"unknown server(s): {', '.join(sorted(unknown))}")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(SCRATCH, exist_ok=True)
    failed = 0
    for server in SERVERS:
        if args.names and server["name"] not in args.names:
            continue
        try:
            proto, count, pages = record(server, args.out)
            print(f"ok    {server['name']:20} {server['package']}@{server['version']}: "
                  f"{count} tools, {pages} page(s), protocol {proto}")
        except Exception as e:  # keep going with the other servers
            failed += 1
            print(f"FAIL  {server['name']:20} {server['package']}@{server['version']}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
