"""volcano-guard: keeps the Volcano batch scheduler healthy at scale.

Layers, imports running downward only (import-linter checks them, see pyproject.toml):
  cli                              the commands
  audit                            what already exists in the cluster
  webhook | sidecar                the two servers, independent of each other
  certs                            TLS material: generation, injection, rotation, reload
  base                             building blocks

The sandbox API server, the storm replay and the demo are the harness, volcano_guard_sandbox
(sandbox/ in the repository), which nothing here imports.
"""

__version__ = "0.1.0"
