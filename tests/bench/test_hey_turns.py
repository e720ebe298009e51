"""bench/hey.py: its closed loops in turns (while one server's hey runs, the others' send
nothing, and what it reports matches what the servers saw) and its counted runs (more requests
than one hey run can report, all counted). Needs `hey` (Debian package; .ci/run
installs it): skipped, saying so, without it."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from bench import hey as hey_module
from bench.hey import find_hey, run_hey, run_hey_in_turns
from tests.threaded import on_thread

Arrivals = list[tuple[float, str]]  # (time.time(), server name), in order


@asynccontextmanager
async def recording_servers(names: list[str], arrivals: Arrivals) -> AsyncIterator[dict[str, str]]:
    """A plain-HTTP server per name that notes when each request arrives; yields their URLs."""
    runners, urls = [], {}
    for name in names:

        async def handle(request: web.Request, name: str = name) -> web.Response:
            arrivals.append((time.time(), name))
            await request.read()
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


@pytest.fixture(scope="module")
def hey() -> str:
    path = find_hey(install=False)
    if path is None:
        pytest.skip("hey is not installed (apt-get install hey; .ci/run does)")
    return path


def switches(arrivals: Arrivals) -> int:
    return sum(1 for (_, a), (_, b) in itertools.pairwise(arrivals) if a != b)


@pytest.mark.slow  # a load run of the bench harness
def test_servers_take_turns_and_each_answer_is_counted(hey: str, tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"a": 1}')
    arrivals: Arrivals = []
    rounds, seconds, turn = 2, 0.6, 0.2
    with on_thread(lambda: recording_servers(["a", "b"], arrivals)) as urls:
        results = run_hey_in_turns(hey, urls, body, rounds, seconds, turn=turn, concurrency=4)
    turns = 2 * rounds * round(seconds / turn)
    # Each turn starts one run of arrivals from one server: with both loads at once they would
    # interleave thousands of times.
    assert sum(1 for _, name in arrivals if name == "a") > 100
    assert switches(arrivals) < 2 * turns
    for name, per_round in results.items():
        assert len(per_round) == rounds
        received = sum(1 for _, server in arrivals if server == name)
        answered = sum(result["total"] for result in per_round)
        # What hey counts is what the server saw, but for requests cut off by the final stop.
        assert received - 4 <= answered <= received
        for result in per_round:
            assert result["ok"] == result["total"] > 0
            # Its rate counts its own turns only (`seconds` of them), not the round's others:
            # counting those too would halve it. A loaded machine stretches turns a little.
            assert result["rps"] > result["total"] / seconds * 0.65
            assert 0 < result["p50"] <= result["p99"] <= result["p999"]


def test_a_load_generator_that_cannot_run_is_reported_not_waited_for(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text("{}")
    with pytest.raises(RuntimeError, match="exit status 127"):
        run_hey_in_turns(
            str(tmp_path / "no-such-hey"),
            {"a": "http://127.0.0.1:1/"},
            body,
            rounds=1,
            seconds=0.2,
            turn=0.1,
        )


def test_more_requests_than_one_hey_run_reports_are_sent_in_runs_and_all_counted(
    hey: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hey reports at most HEY_MAX_RESULTS answers; a smaller limit stands in for it here.
    monkeypatch.setattr(hey_module, "_REQUESTS_A_RUN", 100)
    counts: list[int] = []
    answers = hey_module._answers

    def counted(command: list[str]) -> hey_module._Answers:
        counts.append(int(command[command.index("-n") + 1]))
        return answers(command)

    monkeypatch.setattr(hey_module, "_answers", counted)
    body = tmp_path / "body.json"
    body.write_text("{}")
    arrivals: Arrivals = []
    with on_thread(lambda: recording_servers(["a"], arrivals)) as urls:
        result = run_hey(hey, urls["a"], body, 0, 4, None, requests=350)
    assert counts == [100, 100, 100, 48]  # runs of a multiple of the 4 workers
    assert len(arrivals) == 348
    assert result["total"] == result["ok"] == 348
    assert result["lost"] == 0
