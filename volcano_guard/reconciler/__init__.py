"""The reconciler: keeps what the API server enforces in step with the guard's config, inside
the cluster.

The config (the ConfigMap `volcano-guard-config`) is the one source. One replica at a time (a
Lease) reads it every few seconds and makes the cluster match: both webhook configurations,
the in-server policies and their bindings (what the cluster serves of them), the CA and serving
certificate with every caBundle, and the node states the in-server nodeName checks read. An
object someone else edits or deletes is put back and counted; a config that does not parse is
refused with one line (log, Event, metric) and the last good one stays in force.
"""
