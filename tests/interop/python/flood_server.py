"""A hostile MCP server (2025-11-25) that answers a call to its tool `flood` with an endless
flood of notifications and never a result: log messages (`notifications/message`, 1 KB each,
written as fast as the transport takes them) or progress. Over stdio (`--stdio`) or Streamable
HTTP (`--http`: it prints `listening on PORT` and serves http://127.0.0.1:PORT/mcp, each call's
flood on its POST's SSE stream).

Only the standard library: it is a fake peer for the gateway's deadline tests, not an SDK server.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "2025-11-25"
TOOL = {"name": "flood", "description": "Floods the call with notifications; never answers.",
        "inputSchema": {"type": "object", "properties": {"kind": {"type": "string"}}}}


def answer(message):
    """The response to a request, or None (notifications, and the flood's call)."""
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": VERSION, "capabilities": {"tools": {}, "logging": {}},
                  "serverInfo": {"name": "flood", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method in ("ping", "logging/setLevel"):
        result = {}
    elif method == "tools/call":
        return "flood"
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def notes(call):
    """The flood: endless notifications about `call`."""
    kind = call.get("params", {}).get("arguments", {}).get("kind", "log")
    token = call.get("params", {}).get("_meta", {}).get("progressToken")
    text = "x" * 1000
    n = 0
    while True:
        n += 1
        if kind == "progress" and token is not None:
            yield {"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": n, "message": text}}
        else:
            yield {"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "logger": "flood", "data": {"n": n, "text": text}}}


def stdio():
    out_lock = threading.Lock()

    def write(message):
        with out_lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def flood(call):
        try:
            for note in notes(call):
                write(note)
        except (BrokenPipeError, ValueError):
            pass

    for line in sys.stdin:
        message = json.loads(line)
        reply = answer(message)
        if reply == "flood":
            threading.Thread(target=flood, args=(message,), daemon=True).start()
        elif reply is not None:
            write(reply)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message = json.loads(body)
        reply = answer(message)
        if reply is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif reply == "flood":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for note in notes(message):
                    self.wfile.write(b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
        else:
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if message.get("method") == "initialize":
                self.send_header("Mcp-Session-Id", "flood-session")
            self.end_headers()
            self.wfile.write(data)


def http():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    http() if "--http" in sys.argv else stdio()
