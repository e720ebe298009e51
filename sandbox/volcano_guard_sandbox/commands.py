"""`volcano-guard sandbox` and `volcano-guard demo`, as the product's CLI hands them over: each
a function (prog, argv) -> exit code, registered as an entry point (sandbox/pyproject.toml),
that says what stops it with a CommandError. `volcano-guard-sandbox conformance`, the harness's
own command (main), is no product's: the product's CLI does not hand it over."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from volcano_guard.base.errors import CommandError
from volcano_guard.cli import EXIT_BROKEN_PIPE, Parser, run_server

if TYPE_CHECKING:
    from volcano_guard_sandbox.apiserver.versions import KubernetesVersion


def sandbox(prog: str, argv: Sequence[str]) -> int:
    args = sandbox_parser(prog).parse_args(argv)
    from volcano_guard.base.listen import parse_listen
    from volcano_guard.base.tls import server_context
    from volcano_guard_sandbox.apiserver.admission import parse_service
    from volcano_guard_sandbox.apiserver.authn import load_token_file
    from volcano_guard_sandbox.apiserver.endpoints import ServiceEndpoints, grouped
    from volcano_guard_sandbox.apiserver.runner import load_files, serve_forever
    from volcano_guard_sandbox.apiserver.server import SandboxSettings

    try:
        listen = parse_listen(args.listen)
        services = grouped([parse_service(text) for text in args.service])
        tokens = load_token_file(args.token_auth_file) if args.token_auth_file else None
        objects = load_files(args.load)
    except (ValueError, OSError) as exc:  # TokenFileError and FileProblem are ValueErrors
        raise CommandError(str(exc)) from None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise CommandError("--tls-cert and --tls-key go together")
    try:
        tls = server_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    try:
        played = replace(args.kubernetes_version, runtime_config=args.runtime_config)
    except ValueError as exc:  # a group version this release does not offer
        raise CommandError(str(exc)) from None
    settings = SandboxSettings(
        services=ServiceEndpoints(services), tokens=tokens, kubernetes_version=played
    )
    return run_server(serve_forever(listen.host, listen.port, objects, settings, tls))


def sandbox_parser(prog: str = "volcano-guard sandbox") -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description="A local stand-in for kube-apiserver for tests and demos: plain HTTP, or "
        "HTTPS with --tls-cert and --tls-key (kubectl sends bearer tokens only over HTTPS); "
        "with --token-auth-file, users by bearer token. Needs the sandbox extra.",
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:8080", help="HOST:PORT (default %(default)s)"
    )
    parser.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML/JSON objects to create at start (repeatable)",
    )
    parser.add_argument(
        "--service",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME:PORT=HOST:PORT",
        help="where a webhook configuration's clientConfig.service is served (repeatable: a "
        "Service given twice has two endpoints, each new connection reaching one at random)",
    )
    parser.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve HTTPS with this certificate (kubectl sends bearer tokens only over HTTPS)",
    )
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's key")
    parser.add_argument(
        "--kubernetes-version",
        type=_kubernetes_version,
        default="1.32",  # versions.DEFAULT (imported when the command runs, not to list flags)
        metavar="1.MINOR",
        help="the Kubernetes version played, 1.30 to 1.36: its discovery, the kinds it serves "
        "and its CEL environment (default %(default)s)",
    )
    parser.add_argument(
        "--runtime-config",
        type=_runtime_config,
        default=frozenset(),
        metavar="GROUP/VERSION=true,...",
        help="alpha or beta group versions to serve beside the default ones, as "
        "kube-apiserver's flag (e.g. admissionregistration.k8s.io/v1beta1=true at 1.34)",
    )
    parser.add_argument(
        "--token-auth-file",
        metavar="FILE",
        help="bearer tokens to users, kube-apiserver's CSV format "
        '(token,user,uid,"group1,group2"); without it every request is an '
        "administrator",
    )
    return parser


def _kubernetes_version(text: str) -> KubernetesVersion:
    from volcano_guard_sandbox.apiserver.versions import KubernetesVersion

    try:
        return KubernetesVersion.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _runtime_config(text: str) -> frozenset[str]:
    from volcano_guard_sandbox.apiserver.versions import parse_runtime_config

    try:
        return parse_runtime_config(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def demo_parser(prog: str = "volcano-guard demo") -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description="The guard against a sandbox API server, no cluster needed.",
    )
    parser.add_argument("--examples", help="directory of example AdmissionReviews")
    return parser


def demo(prog: str, argv: Sequence[str]) -> int:
    args = demo_parser(prog).parse_args(argv)
    from volcano_guard_sandbox import REPO_ROOT
    from volcano_guard_sandbox.demo import run
    from volcano_guard_sandbox.guarded_sandbox import GuardedSandboxError

    if not (REPO_ROOT / "examples").is_dir():
        raise CommandError(
            "replays a volcano-guard checkout's examples/ and deploy/base: run it in one"
        )

    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # the table says it all
    # Ctrl-C reaches the demo's children (the webhook, the sidecars, kubectl) as it reaches the
    # demo, so a step may fail on a child's death before the demo sees its own interrupt: that
    # failure is the interrupt, and ends the demo as quietly as it would (main: exit 130).
    interrupted = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        interrupted.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, interrupt)
    try:
        return run_server(run(args.examples))
    except GuardedSandboxError as exc:
        if interrupted.is_set():
            raise KeyboardInterrupt from None
        raise CommandError(str(exc), 1) from None


def conformance_parser(prog: str = "volcano-guard-sandbox conformance") -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description="Run the CEL cases of Kubernetes' and cel-go's own test tables in the "
        "sandbox's 1.30 policy environment, then the admission plugin's (webhook rules and "
        "matchConditions, the policy validator) against the sandbox's admission, then 1.36's "
        "MutatingAdmissionPolicy tables (JSONPatch, compilation); print per "
        "upstream file the cases passed, failed, not modelled and unparsed.",
    )
    parser.add_argument(
        "upstream", metavar="UPSTREAM_DIR", help="a folder of <project>/<revision>/<path> files"
    )
    parser.add_argument("--failures", action="store_true", help="also list each failing case")
    return parser


def conformance(prog: str, argv: Sequence[str]) -> int:
    args = conformance_parser(prog).parse_args(argv)
    from volcano_guard_sandbox.conformance.admission_runner import run_admission_folder
    from volcano_guard_sandbox.conformance.mutating_tables import run_mutating_folder
    from volcano_guard_sandbox.conformance.runner import failures, run_folder, summary

    folder = Path(args.upstream)
    if not folder.is_dir():
        raise CommandError(f"{args.upstream}: not a folder")
    try:
        reports, admission = run_folder(folder), run_admission_folder(folder)
        mutating = run_mutating_folder(folder)
    except OSError as exc:
        raise CommandError(f"{args.upstream} lacks {exc.filename}") from None
    print("\n".join(summary(reports)))
    if args.failures:
        print("\n".join(failures(reports)))
    print("\nadmission plugin tables:")
    print("\n".join(summary(admission)))
    if args.failures:
        print("\n".join(failures(admission)))
    print("\nmutating admission policy tables (1.36):")
    print("\n".join(summary(mutating)))
    if args.failures:
        print("\n".join(failures(mutating)))
    return 0


HARNESS_COMMANDS = {"conformance": conformance}


def main(argv: Sequence[str] | None = None) -> int:
    """`volcano-guard-sandbox COMMAND ...`: the harness's own commands."""
    parser = Parser(prog="volcano-guard-sandbox", description="The sandbox harness's commands.")
    parser.add_argument("command", choices=sorted(HARNESS_COMMANDS))
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    prog = f"volcano-guard-sandbox {args.command}"
    try:
        return HARNESS_COMMANDS[args.command](prog, args.argv)
    except CommandError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as volcano-guard does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


# Each command's parser, by name: the reference's checks read their flags.
PARSERS = {"sandbox": sandbox_parser, "demo": demo_parser}
