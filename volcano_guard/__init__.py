"""volcano-guard: keeps the Volcano batch scheduler healthy at scale.

Layers, imports running downward only (import-linter checks them, see pyproject.toml):
  cli, demo, storm                 the commands
  webhook | sidecar | sandbox      the three servers, independent of each other
  certs                            TLS material: generation, injection, rotation, reload
  base                             building blocks
"""

__version__ = "0.1.0"
