"""Turns the chart's rendered manifests into what `podman kube play` runs on one machine:

    play.py RENDERED OUT PORTS REDIS_URL

- podman plays one pod per Deployment whatever its replicas: the Deployment is written once per
  replica (`<name>-0`, `-1`, ...), each with replicas 1;
- the pods share the host's network, where only loopback is used: each copy listens on its own
  loopback ports (PORTS, comma-separated: the MCP port then the operators' of each copy), set through
  TASKGATE_LISTEN and TASKGATE_ADMIN_LISTEN, its probes follow, and its container declares no
  ports (podman maps ports only on a bridge);
- the variables the chart fills from Secrets (the Redis profile's URL) are given their values:
  podman 4.3 reads a `secretKeyRef` only from its own secret store, in a form of its own.

Everything else (the ConfigMap, the security context, the probes' paths, the volumes) is played
as rendered.
"""

import copy
import sys

import yaml


def main() -> int:
    rendered, out, ports, redis_url = sys.argv[1:]
    ports = [int(p) for p in ports.split(",")]
    replicas = len(ports) // 2
    with open(rendered) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    played = []
    for document in documents:
        if document["kind"] == "ConfigMap":
            played.append(document)
        elif document["kind"] == "Deployment":
            for i in range(replicas):
                played.append(replica(document, i, ports[2 * i], ports[2 * i + 1], redis_url))
        # Services, the PodDisruptionBudget and the monitoring kinds have no meaning to podman.
    with open(out, "w") as f:
        yaml.safe_dump_all(played, f, sort_keys=False)
    return 0


def replica(deployment: dict, i: int, mcp: int, admin: int, redis_url: str) -> dict:
    d = copy.deepcopy(deployment)
    d["metadata"]["name"] = f"{d['metadata']['name']}-{i}"
    d["spec"]["replicas"] = 1
    pod = d["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container.pop("ports", None)
    env = container.setdefault("env", [])
    for variable in env:
        if variable.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "taskgate-redis":
            variable.pop("valueFrom")
            variable["value"] = redis_url
    env += [
        {"name": "TASKGATE_LISTEN", "value": f"127.0.0.1:{mcp}"},
        {"name": "TASKGATE_ADMIN_LISTEN", "value": f"127.0.0.1:{admin}"},
    ]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in container:
            container[probe]["httpGet"]["port"] = admin
            container[probe]["httpGet"]["host"] = "127.0.0.1"
    return d


if __name__ == "__main__":
    sys.exit(main())
