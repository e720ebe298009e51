"""The mistakes operators make, for every command: each ends in one line on stderr (or a short
block), the documented exit code and no traceback. Commands that fail before serving run in
this process; the servers' "address in use" runs them as real processes."""

import argparse
import os
import socket
import subprocess
import sys

import pytest

from volcano_guard.base.kubeconfig import write_kubeconfig
from volcano_guard.certs.generate import generate
from volcano_guard.cli import build_parser, main
from volcano_guard_sandbox.processes import free_port

# Policies that read nothing from a cluster: the webhook then needs none.
NO_CLUSTER_CONFIG = """policies:
  nodeName:
    mode: off
    bindingGuard: {mode: off}
  podGroups:
    stampGenerationId: false
    deleteGuard: {mode: off}
  queues: {mode: off}
"""


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """The workspace the table's {w} stands for."""
    root = tmp_path_factory.mktemp("mistakes")
    generate("volcano-guard", "volcano-guard", root / "certs", days=30)
    generate("other", "volcano-guard", root / "other", days=30)
    (root / "mixed").mkdir()  # a certificate with another pair's key
    for name, source in (("tls.crt", "certs"), ("ca.crt", "certs"), ("tls.key", "other")):
        (root / "mixed" / name).write_bytes((root / source / name).read_bytes())
    (root / "bad.yaml").write_text("kind: Pod\nmetadata:\n\tname: tabbed\n")
    (root / "multi.yaml").write_text("kind: Pod\n---\n- a list\n")
    (root / "off.yaml").write_text(NO_CLUSTER_CONFIG)
    (root / "home").mkdir()
    write_kubeconfig(root / "refused.kubeconfig", f"http://127.0.0.1:{free_port()}")
    return root


@pytest.fixture
def no_kubeconfig(w, monkeypatch):
    monkeypatch.setenv("HOME", str(w / "home"))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)


TLS = "--tls-cert {w}/certs/tls.crt --tls-key {w}/certs/tls.key"
REFUSED = "--kubeconfig {w}/refused.kubeconfig"

MISTAKES = [
    # (command line, exit code, what stderr must say)
    (f"webhook {TLS} --config {{w}}/off.yaml --listen nonsense", 2, "'nonsense' is not HOST:PORT"),
    (
        "webhook --tls-cert {w}/nope.crt --tls-key {w}/certs/tls.key",
        2,
        "--tls-cert {w}/nope.crt: no such file",
    ),
    (
        "webhook --tls-cert {w}/certs/tls.key --tls-key {w}/certs/tls.crt",
        2,
        "are the certificate and the key swapped?",
    ),
    (
        "webhook --tls-cert {w}/other/tls.crt --tls-key {w}/certs/tls.key",
        2,
        "--tls-key {w}/certs/tls.key is not the key of --tls-cert {w}/other/tls.crt",
    ),
    (f"webhook {TLS} --kubeconfig {{w}}/bad.yaml", 2, "kubeconfig {w}/bad.yaml line 3: not YAML"),
    (f"webhook {TLS}", 2, "read the cluster; to run without one, set policies.nodeName.mode: off"),
    (f"webhook {TLS} --workers abc", 2, "argument --workers: 'abc' is not a whole number"),
    (f"webhook {TLS} --config {{w}}/nope.yaml", 2, "config file {w}/nope.yaml: no such file"),
    (f"webhook {TLS} --config {{w}}/bad.yaml", 2, "config file {w}/bad.yaml line 3: not YAML"),
    (f"webhook {TLS} --client-ca {{w}}/nope.crt", 2, "--client-ca {w}/nope.crt: no such file"),
    (
        f"webhook {TLS} --client-ca {{w}}/certs/tls.key",
        2,
        "--client-ca {w}/certs/tls.key: holds a private key",
    ),
    (f"reconcile --namespace Bad_NS {REFUSED}", 2, "a lowercase RFC 1123 label"),
    (f"reconcile --certificates vault {REFUSED}", 2, "invalid choice: 'vault'"),
    (f"reconcile --once --namespace n {REFUSED}", 2, "connection refused"),
    (f"reconcile --uninstall --namespace n {REFUSED}", 1, "connection refused"),
    ("manifests --kubernetes-version 1.x", 2, "'1.x' is not a Kubernetes version"),
    ("manifests --kubernetes-version 1.036", 2, "'1.036' is not a Kubernetes version"),
    ("manifests --kubernetes-version 2.0", 2, "'2.0' is not a Kubernetes version"),
    ("manifests --kubernetes-version 1.27", 2, "1.27 is older than the guard supports (1.28"),
    ("certs generate --service 'bad name' --namespace n --out {w}/g", 2, "a DNS-1035 label"),
    (
        "certs generate --service s --namespace n --out {w}/g --days abc",
        2,
        "argument --days: 'abc' is not a whole number",
    ),
    ("certs generate --service s --namespace n --out /proc/nope/g", 1, "no such file"),
    ("certs rotate --dir {w}/nope", 1, "{w}/nope/ca.crt: no such file"),
    ("certs rotate --dir {w}/certs --renew-before soon", 2, "'soon' is not a duration"),
    ("certs inject --ca {w}/nope.crt --mutating m", 2, "{w}/nope.crt: cannot read it"),
    ("certs inject --ca {w}/certs/tls.key --mutating m", 2, "holds a private key"),
    (
        f"certs inject --ca {{w}}/certs/ca.crt --mutating m {REFUSED}",
        2,
        "cannot be reached: connection refused; no caBundle was changed",
    ),
    (f"certs ensure --namespace Bad_NS --mutating m {REFUSED}", 2, "a lowercase RFC 1123 label"),
    (
        f"certs ensure --namespace n --mutating m --ca-valid forever {REFUSED}",
        2,
        "'forever' is not a duration",
    ),
    (f"certs ensure --namespace n --mutating m {REFUSED}", 2, "connection refused"),
    (
        f"certs secret --dir {{w}}/nope --name s --namespace n {REFUSED}",
        1,
        "{w}/nope/tls.crt: no such file",
    ),
    (
        f"certs secret --dir {{w}}/certs --name Bad_Name --namespace n {REFUSED}",
        2,
        "a lowercase RFC 1123 subdomain",
    ),
    (f"certs secret --dir {{w}}/certs --name s --namespace n {REFUSED}", 2, "connection refused"),
    ("certs client --out /proc/nope/c", 1, "no such file"),
    ("check -f {w}/nope.yaml", 2, "{w}/nope.yaml: no such file or directory"),
    ("check -f {w}/bad.yaml", 2, "{w}/bad.yaml line 3: not YAML or JSON"),
    ("check -f {w}/multi.yaml", 2, "{w}/multi.yaml:1: expected a Kubernetes object"),
    ("check -f {w}/certs --nodes {w}/nope.yaml", 2, "{w}/nope.yaml: no such file"),
    ("check -f {w}/certs --config {w}/bad.yaml", 2, "config file {w}/bad.yaml line 3"),
    ("audit --kubeconfig {w}/bad.yaml", 2, "kubeconfig {w}/bad.yaml line 3: not YAML"),
    ("audit --kubeconfig {w}/nope", 2, "--kubeconfig {w}/nope: no such file"),
    (f"audit {REFUSED} --context prod", 2, "no context 'prod' (contexts: volcano-guard)"),
    (f"audit {REFUSED}", 2, "cannot read the cluster: listing nodes: the API server"),
    ("audit", 2, "no cluster to talk to: there is no {w}/home/.kube/config"),
    (f"audit {REFUSED} --output xml", 2, "argument --output: invalid choice: 'xml'"),
    (f"audit {REFUSED} --namespace Bad_NS", 2, "a lowercase RFC 1123 label"),
    (f"audit {REFUSED} --watch --lease-duration 0", 2, "0 is not a positive integer"),
    ("manifests --namespace 'bad ns'", 2, "a lowercase RFC 1123 label"),
    ("manifests --config {w}/nope.yaml", 2, "config file {w}/nope.yaml: no such file"),
    ("demo --examples {w}/nope", 2, "--examples {w}/nope: no such file or directory"),
    ("demo --examples {w}/bad.yaml", 2, "{w}/bad.yaml line 3: not YAML"),
    ("demo --examples {w}/multi.yaml", 2, "{w}/multi.yaml: not one AdmissionReview"),
    ("sandbox --load {w}/nope.yaml", 2, "--load {w}/nope.yaml: no such file"),
    ("sandbox --load {w}/bad.yaml", 2, "--load {w}/bad.yaml line 3: not YAML"),
    (
        "sandbox --load {w}/multi.yaml",
        2,
        "--load {w}/multi.yaml: document 1 is not a Kubernetes object",
    ),
    ("certs client --out {w}/c --name ''", 2, "argument --name: '' must be 1 to 64 characters"),
    (
        f"certs secret --dir {{w}}/mixed --name s --namespace n {REFUSED}",
        1,
        "{w}/mixed/tls.key is not the key of {w}/mixed/tls.crt; the Secret was not changed",
    ),
    (
        "sandbox --tls-cert {w}/nope.crt --tls-key {w}/certs/tls.key",
        2,
        "--tls-cert {w}/nope.crt: no such file",
    ),
    ("sandbox --tls-cert {w}/certs/tls.crt", 2, "--tls-cert and --tls-key go together"),
    ("sandbox --token-auth-file {w}/nope.csv", 2, "--token-auth-file {w}/nope.csv: no such file"),
    (
        "sidecar --upstream https://127.0.0.1:1 --ca-file {w}/nope.crt",
        2,
        "--ca-file {w}/nope.crt: no such file",
    ),
    (
        "sidecar --upstream https://127.0.0.1:1 --token-file {w}/nope",
        2,
        "--token-file {w}/nope: no such file",
    ),
    (
        "sidecar --upstream https://127.0.0.1:1 --ca-file {w}/bad.yaml",
        2,
        "the CA bundle {w}/bad.yaml does not load",
    ),
    ("sidecar --upstream http://127.0.0.1:1 --max-pending abc", 2, "'abc' is not a whole number"),
    ("sidecar --upstream http://127.0.0.1:1 --flush-interval soon", 2, "'soon' is not a number"),
    ("sidecar", 2, "pass --kubeconfig (and --context) or --upstream URL"),
    (
        f"sidecar --upstream http://127.0.0.1:1 {REFUSED}",
        2,
        "--upstream and --kubeconfig/--context are alternatives",
    ),
    (
        "certs inject --ca {w}/certs/ca.crt --mutating m --context prod",
        2,
        "volcano-guard certs inject: --context prod: there is no",
    ),
    ("nonsense", 2, "invalid choice: 'nonsense'"),
    ("check -f {w}/certs stray", 2, "volcano-guard check: unrecognized arguments: stray"),
]


def _argv(line, w):
    import shlex

    return [part.replace("{w}", str(w)) for part in shlex.split(line)]


@pytest.mark.parametrize(("line", "code", "says"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_and_the_right_exit_code(line, code, says, w, no_kubeconfig, capsys):
    try:
        exit_code = main(_argv(line, w))
    except SystemExit as exited:  # argparse, and commands that exit at once
        exit_code = exited.code
    err = capsys.readouterr().err
    assert exit_code == code, err
    assert says.replace("{w}", str(w)) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def runnable_commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, list[str]]:
    """Every command that runs (`certs` by its actions), with its required flags given `x`,
    a value each of their types accepts."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= runnable_commands(sub, f"{path} {name}".strip())
    if not found and path:
        found[path] = [
            part
            for action in parser._actions
            if action.required
            for part in (action.option_strings[0], "x")
        ]
    return found


COMMANDS = runnable_commands(build_parser())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_flag_is_named_by_the_command_it_was_given_to(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), *COMMANDS[command], "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"volcano-guard {command}: unrecognized arguments: --bogus "
        f"(see volcano-guard {command} --help)"
    ]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_flag_is_named_before_the_flags_it_leaves_missing(command, capsys):
    """A misspelt required flag (--servce) is what makes the right one missing: the misspelling
    is what to say."""
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"volcano-guard {command}: unrecognized arguments: --bogus "
        f"(see volcano-guard {command} --help)"
    ]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("check -f x --out json", "volcano-guard check: unrecognized arguments: --out json"),
        ("--bogus", "volcano-guard: unrecognized arguments: --bogus"),
    ],
)
def test_a_flag_is_taken_only_as_it_is_spelt(line, said, capsys):
    with pytest.raises(SystemExit) as exited:
        main(line.split())
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(said)


@pytest.fixture(scope="module")
def held_port():
    """A port another process listens on."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield holder.getsockname()[1]


SERVERS = [
    f"webhook {TLS} --config {{w}}/off.yaml --listen 127.0.0.1:{{port}} "
    "--metrics-listen 127.0.0.1:0",
    f"webhook {TLS} --config {{w}}/off.yaml --listen 127.0.0.1:0 "
    "--metrics-listen 127.0.0.1:{port}",
    f"webhook {TLS} --config {{w}}/off.yaml --workers 2 --listen 127.0.0.1:{{port}} "
    "--metrics-listen 127.0.0.1:0",
    f"webhook {TLS} --config {{w}}/off.yaml --workers 2 --listen 127.0.0.1:0 "
    "--metrics-listen 127.0.0.1:{port}",
    "sidecar --upstream http://127.0.0.1:1 --listen 127.0.0.1:{port} --metrics-listen 127.0.0.1:0",
    "sidecar --upstream http://127.0.0.1:1 --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:{port}",
    "sandbox --listen 127.0.0.1:{port}",
    f"audit {REFUSED} --watch --metrics-listen 127.0.0.1:{{port}}",
]


def _in_use(line, w, port):
    """line's argv with the held port in, and the one line it must end with on stderr."""
    argv = [part.replace("{port}", str(port)) for part in _argv(line, w)]
    flag = next(
        part for part in reversed(argv[: argv.index(f"127.0.0.1:{port}")]) if part.startswith("--")
    )
    says = (
        f"volcano-guard {argv[0]}: {flag} 127.0.0.1:{port}: the address is already in "
        "use (another process listens there)"
    )
    return argv, says


def _run_cli(argv, w):
    return subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(w / "home")},
    )


@pytest.mark.parametrize("line", SERVERS, ids=SERVERS)
def test_a_server_whose_address_is_in_use_says_which_and_exits_2(line, w, held_port):
    argv, says = _in_use(line, w, held_port)
    result = _run_cli(argv, w)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [says]


# Each listening command as it starts in a cluster: the webhook with the default config (whose
# policies read the cluster, so informer threads are made) and audit --watch, both against an
# API server that refuses. Threads that ran before the bind failed went on logging while the
# interpreter shut down, and aborted it (SIGABRT, exit -6): 9 webhook starts of 30.
STARTS = [
    f"webhook {TLS} {REFUSED} --listen 127.0.0.1:{{port}} --metrics-listen 127.0.0.1:0",
    f"webhook {TLS} {REFUSED} --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:{{port}}",
    "sidecar --upstream http://127.0.0.1:1 --listen 127.0.0.1:{port} --metrics-listen 127.0.0.1:0",
    "sidecar --upstream http://127.0.0.1:1 --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:{port}",
    "sandbox --listen 127.0.0.1:{port}",
    f"audit {REFUSED} --watch --metrics-listen 127.0.0.1:{{port}}",
]
REPEATS = 20


# Slow: each start imports the whole command (the webhook's kubernetes client alone is over a
# second of CPU): the 120 starts, 20 at a time, took 2.5 minutes on a loaded 2-core machine.
@pytest.mark.slow
@pytest.mark.parametrize("line", STARTS, ids=STARTS)
def test_an_address_in_use_ends_every_start_with_its_line_and_2_never_an_abort(line, w, held_port):
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    argv, says = _in_use(line, w, held_port)
    with ThreadPoolExecutor(REPEATS) as pool:
        results = list(pool.map(lambda _: _run_cli(argv, w), range(REPEATS)))
    wrong = [r for r in results if (r.returncode, r.stderr.strip()) != (2, says)]
    if wrong:
        codes = Counter(r.returncode for r in results)  # an abort is -6
        worst = min(wrong, key=lambda r: r.returncode)
        pytest.fail(
            f"{len(wrong)} of {REPEATS} starts went wrong (exit codes {dict(codes)}); one that "
            f"exited {worst.returncode} said:\n{worst.stderr[-3000:]}"
        )


@pytest.fixture
def silent_server():
    """Accepts connections and never answers a byte."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"  # the backlog accepts for us


@pytest.mark.slow
def test_one_shot_commands_give_up_on_a_silent_server_within_30_seconds(w, silent_server):
    import time
    from concurrent.futures import ThreadPoolExecutor

    write_kubeconfig(w / "silent.kubeconfig", silent_server)
    cluster = ["--kubeconfig", str(w / "silent.kubeconfig")]
    commands = [
        ["audit"],
        ["certs", "inject", "--ca", str(w / "certs" / "ca.crt"), "--mutating", "m"],
        ["certs", "ensure", "--namespace", "n", "--mutating", "m"],
        ["certs", "secret", "--dir", str(w / "certs"), "--name", "s", "--namespace", "n"],
    ]

    def run(command):
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "volcano_guard.cli", *command, *cluster],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HOME": str(w / "home")},
        )
        return result, time.monotonic() - started

    with ThreadPoolExecutor(len(commands)) as pool:
        for (result, took), command in zip(pool.map(run, commands), commands, strict=True):
            assert result.returncode == 2, (command, result.stderr)
            assert took < 30, (command, took)
            [line] = result.stderr.strip().splitlines()
            assert f"the API server {silent_server} did not answer within 20s" in line


def test_a_reader_that_leaves_early_stops_the_command_quietly(tmp_path):
    """`volcano-guard check ... | head -1`: the reader closes the pipe while check still writes,
    which ends the command without a traceback (as SIGPIPE would end a Go program)."""
    pods = "".join(
        f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, namespace: a}}\n"
        "spec: {schedulerName: volcano, containers: [{name: c, image: i}]}\n"
        for n in range(3000)
    )
    (tmp_path / "pods.yaml").write_text(pods)  # far more output than a pipe buffers
    check = subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", "check", "-f", str(tmp_path / "pods.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert check.stdout is not None and check.stderr is not None
    assert check.stdout.readline()
    check.stdout.close()  # the reader leaves
    assert check.wait(timeout=60) == 141
    assert check.stderr.read() == b""
