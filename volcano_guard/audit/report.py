"""The audit's answer as `volcano-guard audit` prints it, and its exit code."""

from __future__ import annotations

import json
from dataclasses import asdict

from volcano_guard.audit.findings import FAIL, ClusterState, Finding

EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNREADABLE = 0, 1, 2


def exit_code(found: list[Finding]) -> int:
    """1 for any failure; warnings alone leave it 0."""
    return EXIT_FINDINGS if any(f.result == FAIL for f in found) else EXIT_CLEAN


def format_report(found: list[Finding], state: ClusterState, output: str) -> str:
    read = {
        "nodes": len(state.nodes),
        "pods": len(state.pods),
        "podGroups": len(state.podgroups),
        "workloads": len(state.workloads),
    }
    if output == "json":
        return json.dumps(
            {"read": read, "findings": [asdict(f) for f in found], "exitCode": exit_code(found)},
            indent=2,
        )
    lines = [finding.line() for finding in found]
    failures = sum(f.result == FAIL for f in found)
    lines.append(
        f"{read['nodes']:,} nodes, {read['pods']:,} pods, {read['podGroups']:,} "
        f"PodGroups and {read['workloads']:,} Volcano workloads read, "
        f"{failures:,} findings"
        + (f", {len(found) - failures:,} warnings" if len(found) > failures else "")
    )
    return "\n".join(lines)
