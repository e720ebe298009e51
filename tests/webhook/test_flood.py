"""Floods of hostile connections (bench/connection_flood.py) against the webhook process, one
process and two workers: 2,000 and 10,000 connections that never send a ClientHello, stay idle
after the handshake, or send their headers a byte every 3 s, held or re-opened as fast as they
are closed. A client that opens a new connection for each of its 500 reviews, as the API server
does once its kept-alive ones are gone, is never refused and is answered at p99 within a second,
a fifth of the API server's webhook timeout (the p99 itself is the benchmark's figure,
BENCHMARKS.md: 17 to 720 ms by case on shared cores); the process tree stays under half its
memory limit and gives the memory back afterwards.
Long: in the slow suite (.ci/run runs it)."""

from __future__ import annotations

import pytest

from bench.connection_flood import memory_limit_mib, open_files_for, run


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    ("hostile", "reopen"), [(2000, False), (10000, False), (2000, True), (10000, True)]
)
def test_a_flood_of_hostile_connections_keeps_out_no_review_and_no_memory_runs_away(
    workers, hostile, reopen
):
    try:
        open_files_for(hostile)
    except ValueError as exc:
        pytest.skip(str(exc))
    figures = run(workers, hostile, reopen)
    assert figures["failed"] == 0
    assert figures["refused"] == 0
    assert figures["peak_mib"] < memory_limit_mib(workers) / 2
    grown = figures["peak_mib"] - figures["before_mib"]
    assert figures["after_mib"] - figures["before_mib"] < grown / 2, figures
    # Starved, reviews would wait for the timeout; shared cores put single ones past 100 ms.
    assert figures["p99_ms"] < 1000, figures
