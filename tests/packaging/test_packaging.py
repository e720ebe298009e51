"""What a user's site-packages gets: one import package, volcano_guard, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO


def build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(REPO)],
                   check=True, capture_output=True, cwd=out)
    (wheel,) = out.glob("volcano_guard-*.whl")
    return wheel


def test_wheel_installs_one_top_level_package_with_every_layer(tmp_path):
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        names = wheel.namelist()
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top_level == {"volcano_guard"}
    for module in ("base/jsonbody.py", "webhook/server.py", "webhook/policies/node_name.py",
                   "sidecar/proxy.py", "certs/generate.py", "sandbox/store.py", "cli.py"):
        assert f"volcano_guard/{module}" in names
    assert not any(name.startswith("volcano_guard/tests/") for name in names)
