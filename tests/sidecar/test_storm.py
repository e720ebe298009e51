"""The storm harness on a short time scale: the direct run reproduces the failure, the sidecar
run removes it, plain or as injected (HTTPS with the kubeconfig it writes). (The full
measurement is bench/queue_storm.py.)"""

import pytest

from volcano_guard_sandbox.storm import RateLimitedQueue, StormSettings, floor_writes, run_storm

pytestmark = pytest.mark.slow  # three storms of 3 s each, and their settling
SHORT = StormSettings(queues=5, seconds=3.0, pod_lifetime=1.0, settle_timeout=8.0)


@pytest.fixture(scope="module")
def results():
    import asyncio

    async def both():
        return {
            "direct": await run_storm(SHORT, through_sidecar=False),
            "plain": await run_storm(SHORT, through_sidecar=True),
            "tls": await run_storm(SHORT, through_sidecar=True, tls=True),
        }

    return asyncio.run(both())


THROUGH = pytest.mark.parametrize("through", ["plain", "tls"])


def test_direct_writers_conflict_and_build_a_retry_backlog(results):
    direct = results["direct"]
    assert direct.conflicts > 100
    assert direct.max_backlog > 100


@THROUGH
def test_through_the_sidecar_there_are_no_conflicts_and_the_backlog_stays_bounded(results, through):
    sidecar = results[through]
    assert sidecar.conflicts == 0
    # In flight and freshly queued events only, never retries: at most about half a second of
    # pod events, even when a busy CI machine stalls this process for a moment (direct writers
    # pile up thousands of retries).
    assert sidecar.max_backlog <= SHORT.pods_per_minute / 60 * 0.5
    assert sidecar.final_backlog == 0


@THROUGH
def test_sidecar_writes_are_near_the_floor_and_fewer_than_direct(results, through):
    direct, sidecar = results["direct"], results[through]
    assert sidecar.upstream_writes <= 1.1 * sidecar.floor + 2 * SHORT.queues
    assert sidecar.upstream_writes < direct.upstream_writes


@THROUGH
def test_the_final_status_converges_through_the_sidecar(results, through):
    sidecar = results[through]
    assert sidecar.staleness is not None
    assert sidecar.staleness <= 2 * SHORT.flush_interval + 0.5


def test_floor_counts_one_write_per_changed_window():
    assert floor_writes({"q": [0.0, 0.1, 0.9, 1.2, 3.5]}, 1.0) == 3
    assert floor_writes({"a": [5.0], "b": [1.0, 2.5]}, 1.0) == 3


async def test_rate_limited_queue_delays_retries_per_item_and_overall():
    queue = RateLimitedQueue()
    for n in range(150):  # past the burst of 100, the 10 QPS bucket sets the delay
        queue.add_rate_limited(("q", n))
    assert len(queue) == 150
    delays = sorted(when for when, _, _ in queue._waiting)
    assert delays[-1] - delays[0] > 4.0  # 50 over the burst at 10/s
