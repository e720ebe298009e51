"""The steps of adding a policy (volcano_guard/webhook/policies/__init__.py) hold: followed in a
copy of the repository for a toy policy that refuses pods named "toy", the copy reads the toy's
config section (a bad key named by its full path), evaluate() denies by it, `manifests`
registers its scope, and the suite's config, policy, interface, registration and reference
checks pass over the copy."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.copies import run_on_copy

STEPS = (REPO / "volcano_guard" / "webhook" / "policies" / "__init__.py").read_text()
# What the copy holds: the package, the tests and what they read.
COPIED = ("volcano_guard", "tests", "docs", "deploy", "examples", "pyproject.toml")
# The suite's checks that every policy must pass, run over the copy: each config key's errors
# and each policy's off setting, its interface and registration, what it does with kinds it
# does not name, the registrations a config renders and what they send, the reference's keys.
CHECKS = (
    "tests/webhook/test_config.py",
    "tests/webhook/test_policy_units.py",
    "tests/webhook/test_policies.py::test_a_policy_has_nothing_to_say_about_kinds_it_does_not_name",
    "tests/webhook/test_registrations.py",
    "tests/docs/test_reference.py::test_every_config_key_is_in_the_reference",
)
# The tests that list today's policies by name, which a new policy joins (step 6).
BY_NAME = (
    "tests/webhook/test_registrations.py::test_policies_turned_off_drop_their_registrations",
)

# Step 1: the policy's module.
TOY = '''"""Policy toy: a pod named "toy" is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from volcano_guard.base.jsonbody import object_at
from volcano_guard.webhook.cel import all_of, kind_is, operation_is
from volcano_guard.webhook.policies.base import (
    NOTHING_FOUND,
    VALIDATE,
    Policy,
    PolicyContext,
    Scope,
    Verdict,
    pods_rule,
)
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode, Section
from volcano_guard.webhook.workloads import POD

if TYPE_CHECKING:
    from volcano_guard.webhook.config import Config

__all__ = ["POLICY", "ToyConfig"]


class ToyConfig(Section, frozen=True):
    mode: Mode = "enforce"


def validate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    pod = request.created(*POD)
    if pod is None:
        return None
    if object_at(pod, "metadata").get("name") != "toy":
        return NOTHING_FOUND
    return Verdict(violations=(f"{request.describe()} is named toy",))


def scopes(config: Config) -> tuple[Scope, ...]:
    named_toy = "has(object.metadata.name) && object.metadata.name == 'toy'"
    condition = all_of(kind_is(*POD), operation_is("CREATE"), named_toy)
    return (Scope(VALIDATE, (pods_rule("CREATE"),), condition),)


POLICY = Policy(
    name="toy", mode=lambda config: config.policies.toy.mode, off="policies.toy.mode: off",
    validate=validate, kinds=frozenset({POD}), scopes=scopes,
)
'''

# What a user sees of the toy in the copy: its section read, its deny and its registration.
SEEN = """
import contextlib, io, uuid
from pathlib import Path
import yaml
from volcano_guard.cli import main
from volcano_guard.webhook.config import ConfigError, parse_config
from volcano_guard.webhook.evaluation import evaluate
from volcano_guard.webhook.policies.base import PolicyContext
from volcano_guard.webhook.review import AdmissionRequest, GroupVersionKind, GroupVersionResource

config = parse_config("policies: {toy: {mode: enforce}}")
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "toy", "namespace": "team-a"},
       "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1",
       "memory": "1Gi"}}}]}}
request = AdmissionRequest(uid=str(uuid.uuid4()), kind=GroupVersionKind("", "v1", "Pod"),
    resource=GroupVersionResource("", "v1", "pods"), operation="CREATE", namespace="team-a",
    name="toy", object=pod)
decision = evaluate("validate", request, PolicyContext(config)).decision
print("denied:", decision.allowed is False, decision.message)
try:
    parse_config("policies: {toy: {mode: block}}")
except ConfigError as exc:
    print("config error:", exc)
shipped = yaml.safe_load(Path("deploy/base/config.yaml").read_text())["data"]["config.yaml"]
Path("shipped-config.yaml").write_text(shipped)
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert main(["manifests", "--config", "shipped-config.yaml"]) == 0
print("registered:", "object.metadata.name == 'toy'" in printed.getvalue())
"""


def insert_after(path: Path, anchor: str, text: str) -> None:
    """text on the lines after the one line that is anchor."""
    source = path.read_text()
    assert source.count(f"\n{anchor}\n") == 1, f"{path} has no line {anchor!r}"
    path.write_text(source.replace(f"\n{anchor}\n", f"\n{anchor}\n{text}\n", 1))


def end_of_class(path: Path, name: str, text: str) -> None:
    """text as the last lines of the class name's body."""
    source = path.read_text()
    start = source.index(f"\nclass {name}(")
    end = source.index("\n\n\n", start)
    path.write_text(f"{source[:end]}\n{text}{source[end:]}")


def follow_the_steps(root: Path) -> None:
    webhook = root / "volcano_guard" / "webhook"
    (webhook / "policies" / "toy.py").write_text(TOY)  # 1
    config = webhook / "config.py"  # 2
    insert_after(
        config,
        "from __future__ import annotations",
        "from volcano_guard.webhook.policies.toy import ToyConfig",
    )
    end_of_class(
        config, "PoliciesConfig", "    toy: ToyConfig = msgspec.field(default_factory=ToyConfig)"
    )
    evaluation = webhook / "evaluation.py"  # 3
    insert_after(
        evaluation,
        "from __future__ import annotations",
        "from volcano_guard.webhook.policies import toy",
    )
    insert_after(evaluation, "POLICIES: tuple[Policy, ...] = (", "    toy.POLICY,")
    reference = root / "docs" / "reference.md"  # 4
    text = reference.read_text()
    first_audit_row = re.search(r"^\| `audit\.", text, re.M)
    assert first_audit_row, "docs/reference.md has no audit rows to put the policy's before"
    row = "| `policies.toy.mode` | `enforce` | refuse pods named toy |\n"
    text = text[: first_audit_row.start()] + row + text[first_audit_row.start() :]
    section = '### Policy `toy`\n\nRefuses pods named "toy".\n\n'
    reference.write_text(
        text.replace("## Labels and annotations", section + "## Labels and annotations", 1)
    )
    # 5: the toy reads no cluster data (no RBAC) and has no in-server check. 6: CHECKS.


@pytest.fixture
def copy(tmp_path) -> Path:
    for name in COPIED:
        origin = REPO / name
        if origin.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", ".hypothesis")
            shutil.copytree(origin, tmp_path / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy(origin, tmp_path / name)
    return tmp_path


def test_the_steps_name_every_file_they_change():
    for named in ("policies/<name>.py", "webhook/config.py", "PoliciesConfig", "evaluation.py"):
        assert named in STEPS
    for named in (
        "POLICIES",
        "docs/reference.md",
        "rbac.yaml",
        "IN_SERVER_CHECKS",
        "reconciler.yaml",
        "__all__",
    ):
        assert named in STEPS


@pytest.mark.slow  # a copy of the repository and the suite's checks over it: 18 s of CPU
def test_a_toy_policy_added_by_the_steps_is_configured_run_registered_and_checked(copy):
    follow_the_steps(copy)
    seen = run_on_copy(copy, sys.executable, "-c", SEEN)
    assert seen.returncode == 0, seen.stderr[-3000:]
    assert 'denied: True Pod "team-a/toy" is named toy' in seen.stdout
    assert "config error: policies.toy.mode: " in seen.stdout
    assert "registered: True" in seen.stdout
    deselected = [f"--deselect={test}" for test in BY_NAME]
    pytest_args = ("-v", "-p", "no:cacheprovider", "-n", "0", *deselected, *CHECKS)
    checks = run_on_copy(copy, sys.executable, "-m", "pytest", *pytest_args)
    assert checks.returncode == 0, checks.stdout[-5000:]
    # They checked the toy: its interface, its off setting, the kinds it does not name.
    assert (
        "test_policy_units.py::test_a_policy_lists_only_names_it_has[toy] PASSED" in checks.stdout
    )
    assert "test_the_setting_each_policy_names_to_turn_it_off_does[toy] PASSED" in checks.stdout
