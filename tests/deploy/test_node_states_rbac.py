"""Only the publisher can write the node-state params (issue 45, item 5): of every account
deploy/ makes, only the reconciler's may write ConfigMaps, and only the config and the pool of
names the publisher writes; so a hidden, deleted or forged param takes a cluster administrator."""

from __future__ import annotations

from typing import Any

from tests.deploy.test_deploy import render
from volcano_guard.webhook.node_states import NAMES

WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}


def configmap_writes(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """account -> the ConfigMap names it may write ("*": any)."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    writable: dict[str, set[str]] = {}
    for binding in (d for d in docs if d["kind"].endswith("RoleBinding")):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if not ({"configmaps", "*"} & set(rule["resources"]) and WRITES & set(rule["verbs"])):
                continue
            if not {"", "*"} & set(rule["apiGroups"]):
                continue
            for subject in binding["subjects"]:
                names = set(rule.get("resourceNames") or ["*"])
                writable.setdefault(subject["name"], set()).update(names)
    return writable


def test_only_the_reconciler_may_write_configmaps_and_only_its_own():
    docs = render("deploy/base") + render("deploy/audit")
    assert configmap_writes(docs) == {
        "volcano-guard-reconciler": {"volcano-guard-config", *NAMES},
    }
