"""Renders, lints and validates the Helm chart, with Helm 4 as a library (helm-python-sdk) and
the Kubernetes schemas of kubernetes-validate: no helm binary, no cluster.

    chart.py CHART OUT [VALUES.yaml ...] [--set-json JSON]

Writes the rendered manifests to OUT (one YAML stream), the configuration the chart rendered
(taskgate.toml) beside it as OUT.toml and a PrometheusRule's rules as OUT.rules.yml (for
`promtool check rules`); prints one line per manifest kind and name. Exits 1 with
the reason when rendering, linting or validation fails.
"""

import json
import sys

import helm_python as helm
import kubernetes_validate
import yaml

KUBERNETES = "1.33.0"


def main() -> int:
    chart_dir, out, *rest = sys.argv[1:]
    values_files = [a for a in rest if not a.startswith("--set-json=")]
    extra = [json.loads(a.split("=", 1)[1]) for a in rest if a.startswith("--set-json=")]
    chart = helm.Chart.load(chart_dir)
    values: dict = {}
    for path in values_files:
        with open(path) as f:
            values = merge(values, yaml.safe_load(f) or {})
    for more in extra:
        values = merge(values, more)
    lint = helm.lint(chart_dir, values=values)
    messages = lint.get("messages") or [] if isinstance(lint, dict) else lint
    errors = [m for m in messages if str(m.get("severity", "")).lower() in ("error", "4")]
    if errors:
        print(f"lint: {errors}", file=sys.stderr)
        return 1
    try:
        rendered = chart.render(values, name="taskgate", namespace="default", is_install=True)
    except helm.HelmError as e:
        print(f"render: {e}", file=sys.stderr)
        return 1
    documents = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                documents.append(document)
    config = None
    for document in documents:
        kind, name = document["kind"], document["metadata"]["name"]
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            # The Prometheus Operator's kinds: not in Kubernetes' schemas (the rules are checked
            # by promtool).
            print(f"{kind} {name} (a custom resource)")
            if kind == "PrometheusRule":
                with open(out + ".rules.yml", "w") as f:
                    yaml.safe_dump(document["spec"], f, sort_keys=False)
            continue
        try:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            print(f"validate {kind} {name}: {e.message} at {list(e.path)}", file=sys.stderr)
            return 1
        print(f"{kind} {name}")
        if kind == "ConfigMap" and "taskgate.toml" in document.get("data", {}):
            config = document["data"]["taskgate.toml"]
    with open(out, "w") as f:
        yaml.safe_dump_all(documents, f, sort_keys=False)
    if config is not None:
        with open(out + ".toml", "w") as f:
            f.write(config)
    return 0


def merge(base: dict, more: dict) -> dict:
    out = dict(base)
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


if __name__ == "__main__":
    sys.exit(main())
