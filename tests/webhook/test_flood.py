"""A flood of 2,000 hostile connections (bench/connection_flood.py) against the webhook process,
one and two workers: the API server's kept-alive connection is answered within 100 ms at p99,
the process tree stays under half its memory limit and gives the memory back afterwards.
Long: in the slow suite (.ci/run runs it)."""

from __future__ import annotations

import pytest

from bench.connection_flood import memory_limit_mib, run


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_flood_of_hostile_connections_neither_slows_the_api_server_nor_exhausts_memory(
        workers):
    figures = run(workers, hostile_count=2000, seconds=10.0)
    assert figures["failed"] == 0
    assert figures["p99_ms"] < 100
    assert figures["peak_mib"] < memory_limit_mib(workers) / 2
    grown = figures["peak_mib"] - figures["before_mib"]
    assert figures["after_mib"] - figures["before_mib"] < grown / 2, figures
