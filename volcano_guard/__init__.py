"""volcano-guard: the CLI and the building blocks webhook/ and sidecar/ share."""

__version__ = "0.1.0"
