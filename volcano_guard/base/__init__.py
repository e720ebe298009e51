"""The building blocks every part shares: JSON bodies and patches, quantities, Status, the
kubeconfig, the informer, metrics, TLS and connection limits. Imports nothing above it."""
