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

# The checkout this package runs from: the demo replays its examples/, the guarded sandbox
# registers its deploy/base.
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
