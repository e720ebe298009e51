"""What a production install carries: its size on disk and the webhook's memory at start.

    .venv/bin/python -m bench.install_footprint [--baseline-rev REV]

Each install is built and installed as the image builds it: the wheel from a checkout
(`pip wheel --no-deps`), then `pip install` of that wheel into a fresh virtualenv, dependencies
from the package index. Installs: this tree with no extra (what the image holds), this tree
with the sandbox extra (what a developer holds), and REV with no extra, the baseline. For each
it prints site-packages' size, the number of distributions, whether the sandbox distribution
is among them, and the resident memory of `volcano-guard webhook` started
from that virtualenv with the default config, ready (its caches synced) against a sandbox API
server holding 100 nodes and 20 pods. Then the ratios against the baseline.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.admission_load import ROOT, start, start_sandbox, worktree
from volcano_guard.certs.generate import generate
from volcano_guard_sandbox.processes import free_port, memory_kib


def sandbox_extra() -> set[str]:
    """The distributions the sandbox extra adds, as pyproject.toml names them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()
        for requirement in project["optional-dependencies"]["sandbox"]
    }


@dataclass
class Footprint:
    name: str
    site_packages_mib: float
    distributions: int
    sandbox_extra: bool
    webhook_rss_mib: float


def build_wheel(source: Path, out: Path, name: str = "volcano_guard") -> Path:
    """The wheel `pip wheel .` builds from source, of the distribution whose wheel name is name
    (CalledProcessError, with pip's words, if none)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob(f"{name}-*.whl")
    return wheel


def install(wheel: Path, venv: Path, sandbox: Path | None = None) -> Path:
    """A fresh virtualenv holding wheel and, given the sandbox distribution's wheel, the
    sandbox extra; its bin/ folder."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The extra names volcano-guard-sandbox, which pip takes from the wheel given beside it.
    targets = [f"volcano-guard[sandbox] @ {wheel.as_uri()}", str(sandbox)] if sandbox else [wheel]
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", *targets],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return venv / "bin"


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python*/site-packages")
    return found


def size_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def distributions(bin_dir: Path) -> set[str]:
    listed = subprocess.run(
        [str(bin_dir / "pip"), "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {entry["name"].lower() for entry in json.loads(listed)}


def webhook_rss_mib(stack: ExitStack, bin_dir: Path, certs, kubeconfig: Path) -> float:
    """The webhook's RSS once /readyz answers 200 (every cache synced), from bin_dir."""
    port, metrics_port = free_port(), free_port()
    process = start(
        stack,
        [
            str(bin_dir / "volcano-guard"),
            "webhook",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--tls-cert",
            str(certs.cert_file),
            "--tls-key",
            str(certs.key_file),
            "--kubeconfig",
            str(kubeconfig),
        ],
        metrics_port,
        cwd=bin_dir,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2):
                break
        except OSError:
            time.sleep(0.2)
    else:
        raise SystemExit("the webhook did not become ready within 30 s")
    time.sleep(1.0)  # let start-up garbage settle
    return memory_kib(process.pid) / 1024


def measure(stack: ExitStack, name: str, bin_dir: Path, certs, kubeconfig: Path) -> Footprint:
    installed = distributions(bin_dir)
    return Footprint(
        name,
        size_mib(site_packages(bin_dir.parent)),
        len(installed),
        sandbox_extra() <= installed,
        webhook_rss_mib(stack, bin_dir, certs, kubeconfig),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline-rev",
        default="HEAD~1",
        metavar="REV",
        help="the revision to compare with (default %(default)s)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        certs = generate("volcano-guard", "volcano-guard", tmp / "certs", days=1)
        _, kubeconfig = start_sandbox(stack, tmp_name)
        here = build_wheel(ROOT, tmp / "wheel-here")
        harness = build_wheel(ROOT / "sandbox", tmp / "wheel-sandbox", "volcano_guard_sandbox")
        baseline = build_wheel(worktree(stack, args.baseline_rev, tmp), tmp / "wheel-baseline")
        rows = [
            measure(stack, "this tree", install(here, tmp / "venv-here"), certs, kubeconfig),
            measure(
                stack,
                "this tree [sandbox]",
                install(here, tmp / "venv-sandbox", harness),
                certs,
                kubeconfig,
            ),
            measure(
                stack,
                f"{args.baseline_rev}",
                install(baseline, tmp / "venv-baseline"),
                certs,
                kubeconfig,
            ),
        ]
    print(
        f"{'install':<22}{'site-packages MiB':>18}{'distributions':>15}"
        f"{'sandbox':>14}{'webhook RSS MiB':>17}"
    )
    for row in rows:
        print(
            f"{row.name:<22}{row.site_packages_mib:>18.1f}{row.distributions:>15}"
            f"{'yes' if row.sandbox_extra else 'no':>14}{row.webhook_rss_mib:>17.1f}"
        )
    here_row, baseline_row = rows[0], rows[2]
    print(
        f"this tree / {args.baseline_rev}: site-packages "
        f"{here_row.site_packages_mib / baseline_row.site_packages_mib:.3f}, webhook RSS "
        f"{here_row.webhook_rss_mib / baseline_row.webhook_rss_mib:.3f}"
    )


if __name__ == "__main__":
    main()
