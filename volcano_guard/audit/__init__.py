"""The audit: what the enabled policies, and Volcano's own accounting, find in what already
exists in the cluster."""
