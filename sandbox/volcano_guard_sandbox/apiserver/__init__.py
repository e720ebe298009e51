"""A faithful, in-process stand-in for kube-apiserver, for tests, the demo and benchmarks."""
