"""The chart's generated files, from the guard's own sources (one source each):

- values.schema.json: `config` is the config's own JSON schema (msgspec.json.schema(Config)),
  so a value the guard would refuse is refused by Helm before anything is installed;
- templates/webhooks.yaml: what `volcano-guard manifests` prints for the chart's default config,
  the namespace and labels left to Helm;
- the README's values table, from values.yaml and the config's schema;
- crds/ and files/: copies of deploy/'s PolicyReport CRDs and Grafana dashboard.

`make chart` writes them; tests/deploy/test_helm_chart.py checks the committed files equal them.
"""

from __future__ import annotations

import copy
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import yaml

from volcano_guard.webhook.admission_policies import admission_policies
from volcano_guard.webhook.config import Config, config_from_dict
from volcano_guard.webhook.node_states import publishing_access
from volcano_guard.webhook.registrations import render, webhook_configurations
from volcano_guard.webhook.sections import DurationText, NodeSelector, QuantityText

CHART = Path(__file__).resolve().parent / "volcano-guard"
DEPLOY = CHART.parent.parent / "deploy"
# A namespace no install uses, replaced by the release's in the template; it sorts where
# "volcano-guard" does among the exempt namespaces, so the default render lists them as
# deploy/base does.
NAMESPACE_MARK = "volcano-guard-release-namespace"
LABELS_MARK = "chart-labels"
ANNOTATIONS_MARK = "chart-annotations"

# The str types with a grammar of their own (webhook.sections._decode checks the grammar).
_STRING_TYPES: dict[type, dict[str, Any]] = {
    QuantityText: {"type": ["string", "number"], "description": "a quantity: 100m, 128Mi"},
    DurationText: {"type": "string", "description": "a duration: 90s, 5m, 1h, 30d"},
    NodeSelector: {"type": "string", "description": "key:value, as Volcano's --node-selector"},
}
_OBJECT = {"type": "object"}
_ARRAY = {"type": "array"}
_TEXT = {"type": "string"}
_ENABLED = {"enabled": {"type": "boolean"}}


def _section(**properties: dict[str, Any]) -> dict[str, Any]:
    """A group of the chart's values: these keys and no other (a typo is refused)."""
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _schema_hook(kind: type) -> dict[str, Any]:
    if kind in _STRING_TYPES:
        return _STRING_TYPES[kind]
    raise NotImplementedError(kind)


def config_schema() -> dict[str, Any]:
    """The config's JSON schema, from its Structs (names, types, bounds, defaults)."""
    # msgspec writes each field's default with to_builtins, which refuses the str subclasses
    # (DurationText...) and takes no hook from schema(): give it one that writes them as str.
    from msgspec import _json_schema

    plain = _json_schema.to_builtins
    _json_schema.to_builtins = partial(msgspec.to_builtins, enc_hook=str)
    try:
        return msgspec.json.schema(Config, schema_hook=_schema_hook)
    finally:
        _json_schema.to_builtins = plain


def values_schema() -> dict[str, Any]:
    """values.schema.json: the config's schema under `config`, the chart's own keys typed."""
    config = config_schema()
    defs = config.pop("$defs")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "volcano-guard chart values",
        "type": "object",
        "properties": {
            "config": {
                **config,
                "description": "the guard's config file (docs/reference.md, Configuration)",
            },
            "volcano": _section(
                releaseName={"type": "string", "minLength": 1},
                namespace={"type": "string", "minLength": 1},
            ),
            "image": _section(
                repository={"type": "string", "minLength": 1},
                tag=_TEXT,
                pullPolicy={"enum": ["Always", "IfNotPresent", "Never", ""]},
            ),
            "imagePullSecrets": _ARRAY,
            "replicas": {"type": "integer", "minimum": 1},
            "priorityClassName": _TEXT,
            "resources": _OBJECT,
            "nodeSelector": _OBJECT,
            "tolerations": _ARRAY,
            "affinity": _OBJECT,
            "podAnnotations": _OBJECT,
            "certs": _section(schedule=_TEXT, resources=_OBJECT),
            "audit": _section(
                **_ENABLED, replicas={"type": "integer", "minimum": 1}, resources=_OBJECT
            ),
            "monitoring": _section(**_ENABLED, labels=_OBJECT),
            "networkPolicy": _section(**_ENABLED, prometheusNamespace=_TEXT),
            "certManager": _section(**_ENABLED),
        },
        "additionalProperties": False,
        "$defs": defs,
    }


# The config keys no registration or in-server policy depends on (a test shows it): NOTES.txt
# leaves them out of its comparison, so changing one warns of nothing.
UNREGISTERED_KEYS = ("audit", "maxRequestBytes", "maxConnections")


def registered_config(values: dict[str, Any]) -> str:
    """The config the registrations are generated for, as the chart's NOTES.txt compares it:
    values.yaml's, with allowedBinders as the chart fills it from `volcano` (_helpers.tpl,
    volcano-guard.config) and without the keys no registration depends on (the sidecar's
    image and UNREGISTERED_KEYS), as Helm's toJson writes it."""
    config = copy.deepcopy(values["config"])
    node_name = config.setdefault("policies", {}).setdefault("nodeName", {})
    volcano = values["volcano"]
    binder = f"system:serviceaccount:{volcano['namespace']}:{volcano['releaseName']}-scheduler"
    node_name.setdefault("bindingGuard", {}).setdefault("allowedBinders", [binder])
    config["policies"].get("sidecarInjection", {}).pop("image", None)
    for key in UNREGISTERED_KEYS:
        config.pop(key, None)
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def registrations(config: Config) -> list[dict[str, Any]]:
    """What `volcano-guard manifests` prints for config, in the namespace to be replaced."""
    return [
        *webhook_configurations(config, NAMESPACE_MARK, "volcano-guard"),
        *admission_policies(config, NAMESPACE_MARK),
        *publishing_access(config, NAMESPACE_MARK),
    ]


def webhooks_template() -> str:
    """templates/webhooks.yaml: the registrations and in-server policies of the chart's
    default config, in the release's namespace, with the chart's labels."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    objects = registrations(config_from_dict(values["config"]))
    for obj in objects:
        obj["metadata"]["labels"] = LABELS_MARK
        if obj["kind"].endswith("WebhookConfiguration"):
            obj["metadata"]["annotations"] = ANNOTATIONS_MARK
    text = render(objects)
    if "{{" in text:  # Helm would read it as a template action
        raise SystemExit("manifests hold '{{': the webhooks template needs escaping")
    labels = '  labels:\n    {{- include "volcano-guard.labels" . | nindent 4 }}\n'
    annotations = (
        '  {{- with (include "volcano-guard.webhookAnnotations" .) }}\n'
        "  annotations:\n"
        "    {{- . | nindent 4 }}\n"
        "  {{- end }}\n"
    )
    return (
        "# Generated by `make chart` (charts/generate.py) from `volcano-guard manifests`: edit\n"
        "# the generator, not this file. The config they are for (NOTES.txt warns on another):\n"
        '{{- define "volcano-guard.registeredConfig" -}}\n'
        + registered_config(values)
        + "\n{{- end }}\n"
        + text.replace(f"  labels: {LABELS_MARK}\n", labels)
        .replace(f"  annotations: {ANNOTATIONS_MARK}\n", annotations)
        .replace(NAMESPACE_MARK, "{{ .Release.Namespace }}")
    )


TABLE_START = "<!-- values table: generated by `make chart` -->\n"
TABLE_END = "<!-- end of values table -->\n"


def _leaves(value: Any, path: str) -> list[tuple[str, Any]]:
    """(dotted path, value) of each leaf of values.yaml; an empty map or list is a leaf."""
    if isinstance(value, dict) and value:
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}")]
    return [(path.lstrip("."), value)]


def _config_keys(schema: dict[str, Any], defs: dict[str, Any], path: str) -> list[tuple[str, Any]]:
    """(dotted path, the guard's default) of every key of the config, from its schema."""
    keys = []
    for key, field in schema.get("properties", {}).items():
        ref = field.get("$ref", "")
        if ref.startswith("#/$defs/"):
            keys += _config_keys(defs[ref.removeprefix("#/$defs/")], defs, f"{path}.{key}")
        else:
            keys.append((f"{path}.{key}", field.get("default")))
    return keys


def _shown(value: Any) -> str:
    return "`" + json.dumps(value).replace("|", "\\|") + "`"


def values_table() -> str:
    """The README's table: every value of values.yaml, then every config key with its value in
    values.yaml or else the guard's default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    config = values.pop("config")
    rows = [f"| `{path}` | {_shown(value)} |" for path, value in _leaves(values, "")]
    schema = values_schema()
    defs = schema["$defs"]
    root = defs[schema["properties"]["config"]["$ref"].removeprefix("#/$defs/")]
    set_here = dict(_leaves(config, "config"))
    for key, default in _config_keys(root, defs, "config"):
        rows.append(f"| `{key}` | {_shown(set_here.get(key, default))} |")
    return TABLE_START + "| value | default |\n|---|---|\n" + "\n".join(rows) + "\n" + TABLE_END


def readme() -> str:
    """README.md with its values table as values_table() makes it."""
    text = (CHART / "README.md").read_text()
    before, _, rest = text.partition(TABLE_START)
    _, _, after = rest.partition(TABLE_END)
    return before + values_table() + after


def generated() -> dict[Path, str]:
    """Each generated file of the chart and its content."""
    return {
        CHART / "values.schema.json": json.dumps(values_schema(), indent=2) + "\n",
        CHART / "templates" / "webhooks.yaml": webhooks_template(),
        CHART / "README.md": readme(),
        # Copies: Helm reads neither file as a template ({{ }} in the dashboard stays as is).
        CHART / "crds" / "policyreport-crds.yaml": (
            DEPLOY / "policyreport-crds" / "crds.yaml"
        ).read_text(),
        CHART / "files" / "grafana-dashboard.json": (
            DEPLOY / "monitoring" / "grafana-dashboard.json"
        ).read_text(),
    }


def main() -> int:
    for path, content in generated().items():
        path.write_text(content)
        print(f"wrote {path.relative_to(CHART.parent.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
