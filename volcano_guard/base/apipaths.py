"""URL paths of the Kubernetes API."""

from __future__ import annotations


def group_version_path(group: str, version: str) -> str:
    """The path of an API group version: /api/v1 for the core group, /apis/GROUP/VERSION else."""
    return f"/apis/{group}/{version}" if group else f"/api/{version}"
