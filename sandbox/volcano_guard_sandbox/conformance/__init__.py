"""The sandbox's CEL held to upstream's own test tables: golang reads Go test files as text,
cases knows each file's tables, runner classes every case, and sandbox_cel is the one place
the runner meets the sandbox's CEL. `volcano-guard-sandbox conformance UPSTREAM_DIR` runs it."""
