"""Volcano's Queue status write storm: Queue status writes by Volcano's controller and
scheduler, direct and through one coalescing sidecar per writer, against the sandbox.

    .venv/bin/python -m bench.queue_storm [--seconds 30] [--queues 10 100] [--churn 1 10]

The sidecar runs twice: plain HTTP without client authentication, and as injected (it writes a
kubeconfig; each writer reaches it over HTTPS with the token and CA written there).

Prints, per run: upstream writes (and their ratio to the floor: one write per queue per flush
window in which its intent changed), 409 conflicts, the controller's retry backlog (max and at
the end), the sidecars' peak RSS, and how long after the last pod completed the server's status
matched the writers' last desired state (NO: not within --settle seconds). Then the ratios of
the sidecar runs to the direct run of the same queue count.
"""

from __future__ import annotations

import argparse
import asyncio

from volcano_guard_sandbox.storm import StormResult, StormSettings, format_results, run_storm


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="churn duration per run")
    parser.add_argument("--queues", type=int, nargs="+", default=[10, 100])
    parser.add_argument(
        "--churn",
        type=float,
        nargs="+",
        default=[1.0, 10.0],
        help="multiples of 20,000 pods/min for the sidecar runs",
    )
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    results = []
    for queues in args.queues:
        base = StormSettings(queues=queues, seconds=args.seconds, settle_timeout=args.settle)
        direct = await run_storm(base, through_sidecar=False)
        results.append(direct)
        print(format_results([direct]).splitlines()[-1], flush=True)
        for tls in (False, True):
            for multiple in args.churn:
                settings = StormSettings(
                    queues=queues,
                    seconds=args.seconds,
                    settle_timeout=args.settle,
                    pods_per_minute=20_000 * multiple,
                )
                result = await run_storm(settings, through_sidecar=True, tls=tls)
                result.mode = f"sidecar{' TLS' if tls else ''} x{multiple:g}"
                results.append(result)
                print(format_results([result]).splitlines()[-1], flush=True)
    print()
    print(format_results(results))
    print()
    for queues in args.queues:
        runs = [r for r in results if r.queues == queues]
        direct, sidecar = runs[0], runs[1]
        print(
            f"{queues} queues at 20,000 pods/min: sidecar upstream writes "
            f"{direct.upstream_writes / max(1, sidecar.upstream_writes):.1f}x fewer than "
            f"direct, {sidecar.upstream_writes / max(1, sidecar.floor):.2f}x the floor; "
            f"409s {direct.conflicts} -> {sidecar.conflicts}"
        )
        if len(runs) > 2 and runs[1].peak_rss_mib and runs[2].peak_rss_mib:
            print(
                f"  sidecar peak RSS at x{args.churn[1]:g} churn: "
                f"{runs[2].peak_rss_mib / runs[1].peak_rss_mib:.2f}x that at "
                f"x{args.churn[0]:g}"
            )
        plain, injected = runs[1], runs[1 + len(args.churn)]
        print(
            f"  TLS as injected, next to plain at x{args.churn[0]:g}: {tls_ratios(plain, injected)}"
        )


def tls_ratios(plain: StormResult, tls: StormResult) -> str:
    """The TLS run's writes, 409s, peak RSS and CPU next to the plain run's."""
    rss = (tls.peak_rss_mib or 0) / (plain.peak_rss_mib or 1)
    cpu = (tls.cpu_cores or 0) / (plain.cpu_cores or 1)
    return (
        f"upstream writes {tls.upstream_writes / max(1, plain.upstream_writes):.2f}x, "
        f"409s {plain.conflicts} -> {tls.conflicts}, peak RSS {rss:.2f}x, CPU {cpu:.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
