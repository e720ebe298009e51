"""What the image builds, built here without a container engine.

The Dockerfile's build stage is read, not restated: its COPY lines are carried out into an empty
folder, the wheel is built there as `pip wheel` builds it in the image, and the wheel is checked
against the repository's package (every file of volcano_guard/ is in it, nothing else is). The
wheel is then installed as the image installs it, into a clean virtualenv with no extra and the
repository nowhere on the path; every module of the package is imported and every command that
deploy/ starts is run with --help (the install takes 18 s: those tests are in the slow suite).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from bench.install_footprint import build_wheel, distributions, install, sandbox_extra
from tests.conftest import REPO
from volcano_guard.webhook.config import Config
from volcano_guard.webhook.policies.sidecar_injection import sidecar_container

DOCKERFILE = REPO / "Dockerfile"
PACKAGE = "volcano_guard"
HARNESS = "volcano_guard_sandbox"  # sandbox/: a distribution of its own, never in the image


def build_stage_copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY line of the first stage, in order."""
    copies: list[tuple[list[str], str]] = []
    stages = 0
    for line in dockerfile.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            stages += 1
        elif words[0].upper() == "COPY" and stages == 1:
            assert not any(word.startswith("--") for word in words[1:]), line
            copies.append((words[1:-1], words[-1]))
    return copies


def build_context(dockerfile: str, into: Path) -> Path:
    """into/ holding what the build stage copies (its WORKDIR), from the repository."""
    for sources, destination in build_stage_copies(dockerfile):
        for source in sources:
            origin = REPO / source
            target = into / destination / (origin.name if destination.endswith("/") else "")
            if origin.is_dir():
                shutil.copytree(origin, target, symlinks=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    return into


def package_files(root: Path) -> set[str]:
    """The files of the package under root, as the wheel names them."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / PACKAGE).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def wheel_metadata(wheel: Path) -> tuple[list[str], str]:
    """The wheel's METADATA: its header lines, and the description after them."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        headers, _, description = archive.read(metadata).decode().partition("\n\n")
    return headers.splitlines(), description


def wheel_problems(wheel: Path) -> list[str]:
    """What the wheel lacks of the repository's package, or holds beside it."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name for name in archive.namelist() if ".dist-info/" not in name}
    _, description = wheel_metadata(wheel)
    readme = (REPO / "README.md").read_text()
    problems = [] if description.strip() == readme.strip() else ["README.md is not its description"]
    expected = package_files(REPO)
    problems += [f"{name} is not in the wheel" for name in sorted(expected - names)]
    problems += [
        f"{name} is in the wheel but not in the repository" for name in sorted(names - expected)
    ]
    return problems


def image_build_problems(
    dockerfile: str, tmp_path: Path, leave_out: str | None = None
) -> list[str]:
    """Build the wheel as the image's build stage does (leave_out: a folder of the build
    context to delete first) and say what is wrong with it."""
    context = build_context(dockerfile, tmp_path / "context")
    if leave_out:
        shutil.rmtree(context / leave_out)
    try:
        wheel = build_wheel(context, tmp_path / "wheel")
    except subprocess.CalledProcessError as exc:
        return [f"the wheel does not build: {exc.stderr[-2000:]}"]
    return wheel_problems(wheel)


def deployed_commands() -> list[list[str]]:
    """The volcano-guard command lines deploy/ starts, and the sidecar the webhook injects."""
    commands = []
    for manifest in sorted((REPO / "deploy").rglob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text()):
            spec = (document or {}).get("spec", {})
            pod = (
                spec.get("template", {}).get("spec")
                or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
                or {}
            )
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                commands += container_commands(container)
    defaults = Config().policies.sidecarInjection
    options = {
        "flush": f"{defaults.flushInterval:g}",
        "ack": defaults.ack,
        "drain": defaults.drainTimeout,
    }
    injected = sidecar_container(defaults, options, native=True)
    return commands + container_commands(injected)


# What the kubelet puts in a fieldRef variable of a pod of deploy/ (its namespace, its name).
FIELD_VALUES = {"metadata.namespace": "volcano-guard", "metadata.name": "volcano-guard-0"}


def expanded(container: dict, text: str) -> str:
    """text with $(VAR) references to the container's env expanded, as the kubelet does."""
    env = {
        entry["name"]: entry.get("value")
        or FIELD_VALUES.get(entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"), "")
        for entry in container.get("env", [])
    }
    return re.sub(
        r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda match: env.get(match[1], match[0]), text
    )


def container_commands(container: dict) -> list[list[str]]:
    if "command" not in container:  # the image's entrypoint, volcano-guard, gets the args
        return [[expanded(container, arg) for arg in container.get("args", [])]]
    line = [
        expanded(container, part) for part in [*container["command"], *container.get("args", [])]
    ]
    if line[:1] == ["volcano-guard"]:
        return [line[1:]]
    # A shell script (`sh -c`): each volcano-guard invocation in it, up to the shell's next word.
    script = " ".join(line)
    return [shlex.split(found) for found in re.findall(r"volcano-guard ([^&;|\n]*)", script)]


@pytest.fixture(scope="module")
def image_wheel(tmp_path_factory) -> Path:
    """The wheel the image's build stage builds, built once for the tests that read it."""
    root = tmp_path_factory.mktemp("image")
    return build_wheel(build_context(DOCKERFILE.read_text(), root / "context"), root / "wheel")


def test_the_build_stage_copies_every_file_of_the_package_and_nothing_else(image_wheel):
    assert wheel_problems(image_wheel) == []


@pytest.mark.parametrize(
    "copied",
    [
        pytest.param(source, marks=() if source == "volcano_guard" else pytest.mark.slow)
        for sources, _ in build_stage_copies(DOCKERFILE.read_text())
        for source in sources
    ],
)
def test_a_build_stage_without_one_of_its_copies_is_caught(tmp_path, copied):
    dockerfile = DOCKERFILE.read_text()
    line = next(
        line
        for line in dockerfile.splitlines()
        if line.startswith("COPY") and copied in line.split()[1:-1]
    )
    _, *sources, destination = line.split()
    kept = [source for source in sources if source != copied]
    broken = dockerfile.replace(line, f"COPY {' '.join(kept)} {destination}" if kept else "")
    assert image_build_problems(broken, tmp_path) != []


SUBPACKAGES = sorted(
    path.parent.relative_to(REPO).as_posix() for path in (REPO / PACKAGE).glob("*/**/__init__.py")
)
# One wheel build each (1.6 s): the default suite leaves out the deepest subpackage, the one a
# package list by hand would most likely miss; the slow suite each of the others.
DEEPEST = max(SUBPACKAGES, key=lambda name: name.count("/"))


@pytest.mark.parametrize(
    "subpackage",
    [pytest.param(name, marks=() if name == DEEPEST else pytest.mark.slow) for name in SUBPACKAGES],
)
def test_a_build_without_one_subpackage_is_caught(tmp_path, subpackage):
    problems = image_build_problems(DOCKERFILE.read_text(), tmp_path, leave_out=subpackage)
    left_out = {name for name in package_files(REPO) if name.startswith(f"{subpackage}/")}
    assert {f"{name} is not in the wheel" for name in left_out} <= set(problems)


def test_the_wheel_declares_its_license_as_an_spdx_expression(image_wheel):
    """A license table makes every build print setuptools' deprecation warning."""
    headers, _ = wheel_metadata(image_wheel)
    assert "License-Expression: Apache-2.0" in headers


def test_every_deployed_command_is_found():
    found = {" ".join(command[:2]) for command in deployed_commands()}
    assert {
        "webhook --config",
        "audit --watch",
        "reconcile --metrics-listen",
        "sidecar --listen",
    } <= found


IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
import volcano_guard
results = {"file": volcano_guard.__file__, "failed": {}, "imported": []}
for module in pkgutil.walk_packages(volcano_guard.__path__, "volcano_guard."):
    try:
        importlib.import_module(module.name)
        results["imported"].append(module.name)
    except ModuleNotFoundError as exc:
        results["failed"][module.name] = exc.name
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def installed(image_wheel, tmp_path_factory) -> Path:
    """A clean virtualenv with the wheel the image builds, installed as the image installs it
    (dependencies from the package index, no extra); its bin/ folder."""
    try:
        return install(image_wheel, tmp_path_factory.mktemp("venv") / "venv")
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"pip could not install the wheel: {exc.stderr[-2000:]}")


def run_installed(bin_dir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run command from the clean virtualenv, in a folder away from the repository."""
    environment = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    environment["PATH"] = f"{bin_dir}{os.pathsep}{environment.get('PATH', '')}"
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=bin_dir.parent,
        env=environment,
        timeout=60,
        check=False,
    )


@pytest.mark.slow  # a pip install of the wheel into a fresh venv: 18 s
def test_the_installed_package_imports_every_module(installed):
    ran = run_installed(installed, str(installed / "python"), "-c", IMPORT_EVERY_MODULE)
    assert ran.returncode == 0, ran.stderr
    results = json.loads(ran.stdout)
    assert Path(results["file"]).is_relative_to(installed.parent), results["file"]
    assert results["failed"] == {}, "a module of the image needs what it does not install"
    shipped = {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in package_files(REPO)
        if name.endswith(".py")
    }
    assert shipped - {PACKAGE} == set(results["imported"])


def test_the_image_wheel_holds_no_harness_module(image_wheel):
    with zipfile.ZipFile(image_wheel) as archive:
        names = archive.namelist()
    harness = {
        path.relative_to(REPO / "sandbox").as_posix()
        for path in (REPO / "sandbox" / HARNESS).rglob("*.py")
    }
    assert harness, "the harness moved: this test must follow it"
    assert not [name for name in names if name.startswith(f"{HARNESS}/") or name in harness]
    assert not [name for name in names if Path(name).stem in {"demo", "storm", "guarded_sandbox"}]


@pytest.mark.slow  # a pip install of the wheel into a fresh venv: 18 s
def test_the_default_install_leaves_the_sandbox_out(installed):
    installed_names = distributions(installed)
    assert "volcano-guard" in installed_names
    assert sandbox_extra() == {"volcano-guard-sandbox"}
    assert not {"volcano-guard-sandbox", "protobuf", "cel-expr-python"} & installed_names


@pytest.mark.slow
@pytest.mark.parametrize("command", deployed_commands(), ids=lambda c: " ".join(c[:2]))
def test_every_command_deploy_starts_runs_from_the_installed_package(installed, command):
    ran = run_installed(installed, "volcano-guard", *command, "--help")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("usage: volcano-guard"), ran.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", [["demo"], ["sandbox", "--listen", "127.0.0.1:0"]])
def test_the_developer_commands_name_the_extra_they_need(installed, command):
    ran = run_installed(installed, "volcano-guard", *command)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert "pip install . ./sandbox" in ran.stderr, ran.stderr


@pytest.fixture(scope="module")
def installed_with_sandbox(image_wheel, tmp_path_factory) -> Path:
    """A clean virtualenv with the image's wheel and the sandbox extra, the sandbox
    distribution built from sandbox/ as a user's `pip install . ./sandbox` builds it."""
    root = tmp_path_factory.mktemp("sandbox")
    harness = build_wheel(REPO / "sandbox", root / "wheel", HARNESS)
    try:
        return install(image_wheel, root / "venv", sandbox=harness)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"pip could not install the sandbox extra: {exc.stderr[-2000:]}")


@pytest.mark.slow  # two wheels into a fresh venv: 25 s
@pytest.mark.parametrize("command", ["sandbox", "demo"])
def test_the_sandbox_extra_gives_the_developer_commands(installed_with_sandbox, command):
    ran = run_installed(installed_with_sandbox, "volcano-guard", command, "--help")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"usage: volcano-guard {command}"), ran.stdout
    assert {"protobuf", "cel-expr-python"} <= distributions(installed_with_sandbox)


@pytest.mark.slow  # the sandbox extra's venv: 25 s
def test_an_installed_demo_replays_the_checkout_it_runs_in_and_says_so_elsewhere(
    installed_with_sandbox,
):
    found = "import volcano_guard_sandbox as harness; print(harness.REPO_ROOT)"
    python = str(installed_with_sandbox / "python")
    in_checkout = subprocess.run(
        [python, "-c", found], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert Path(in_checkout.stdout.strip()) == REPO
    elsewhere = run_installed(installed_with_sandbox, "volcano-guard", "demo")
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.splitlines() == [
        "volcano-guard demo: replays a volcano-guard checkout's examples/ and deploy/base: "
        "run it in one"
    ], elsewhere.stderr
