"""volcano-guard-sandbox: the harness volcano-guard is tried and tested with, apart from what
ships (the image installs none of it, and no module of volcano_guard imports it).

Layers, imports running downward only (import-linter checks them, see pyproject.toml):
  commands                          `volcano-guard sandbox` and `volcano-guard demo`
  demo                              the guard against the sandbox, no cluster needed
  guarded_sandbox | storm           the guard registered in a sandbox; the Queue status storm
  apiserver                         the stand-in for kube-apiserver
  processes                         child processes: free ports, readiness, CPU and memory
"""

from pathlib import Path


def _checkout() -> Path:
    """The volcano-guard checkout whose examples/ the demo replays and whose deploy/base the
    guarded sandbox registers: the one this package sits in (make installs it editable), else
    the working directory, for a `pip install . ./sandbox` run from a checkout."""
    here = Path(__file__).resolve().parents[2]
    for root in (here, Path.cwd()):
        if (root / "examples").is_dir() and (root / "deploy" / "base").is_dir():
            return root
    return here


REPO_ROOT = _checkout()
