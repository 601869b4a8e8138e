#!/usr/bin/env python3
"""Check needs.json against the fixtures in servers/ and print catalog totals.

Every tool id in needs.json must be `<short-name>/<tool name>` for a fixture
servers/<short-name>.json listing that tool. Tool bytes are each fixture's
`tools` array serialized as compact JSON (separators "," and ":", UTF-8).
Standard library only; exits non-zero on any error.
"""

import collections
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_NEEDS_PER_SERVER = 4


def main():
    errors = []
    tools = {}
    total_bytes = 0
    servers = sorted(glob.glob(os.path.join(HERE, "servers", "*.json")))
    for path in servers:
        short = os.path.basename(path)[:-len(".json")]
        with open(path, encoding="utf-8") as f:
            fixture = json.load(f)
        if set(fixture) != {"server", "registry", "version", "tools"}:
            errors.append(f"{short}: unexpected keys {sorted(fixture)}")
        if fixture.get("registry") not in ("npm", "pypi"):
            errors.append(f"{short}: bad registry {fixture.get('registry')!r}")
        names = [t["name"] for t in fixture["tools"]]
        if len(names) != len(set(names)):
            errors.append(f"{short}: duplicate tool names")
        for name in names:
            tools[f"{short}/{name}"] = short
        total_bytes += len(json.dumps(fixture["tools"], separators=(",", ":"),
                                      ensure_ascii=False).encode("utf-8"))

    with open(os.path.join(HERE, "needs.json"), encoding="utf-8") as f:
        needs = json.load(f)
    per_server = collections.Counter()
    used = set()
    seen_text = set()
    for i, entry in enumerate(needs):
        text = entry.get("need", "")
        if not text or text in seen_text:
            errors.append(f"need #{i}: empty or duplicate text {text!r}")
        seen_text.add(text)
        ids = entry.get("tools") or []
        if not ids:
            errors.append(f"need #{i} ({text!r}): no tools")
        for tool_id in ids:
            if tool_id not in tools:
                errors.append(f"need #{i} ({text!r}): unknown tool id {tool_id!r}")
        used.update(ids)
        for short in {tools[t] for t in ids if t in tools}:
            per_server[short] += 1
    for path in servers:
        short = os.path.basename(path)[:-len(".json")]
        if per_server[short] < MIN_NEEDS_PER_SERVER:
            errors.append(f"{short}: only {per_server[short]} needs")

    if "-v" in sys.argv:
        for path in servers:
            short = os.path.basename(path)[:-len(".json")]
            n_tools = sum(1 for s in tools.values() if s == short)
            print(f"  {short:20} tools {n_tools:3}  needs {per_server[short]:3}")
        unused = sorted(set(tools) - used)
        print(f"  tools named by no need: {len(unused)} {unused}")
    for e in errors:
        print("ERROR", e)
    print(f"servers: {len(servers)}")
    print(f"tools: {len(tools)}")
    print(f"tools bytes (compact JSON): {total_bytes}")
    print(f"needs: {len(needs)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
