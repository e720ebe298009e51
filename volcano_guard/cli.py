"""`volcano-guard <command>`: one entry point, each command a thin function over a package API.

Each command imports its package when it runs, so `--help`, `certs` and `check` do not pay for
importing the servers (docs/decisions/layout.md, "Layers run one way")."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import logging
import os
import ssl
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from volcano_guard import __version__
from volcano_guard.base.errors import EXIT_USAGE, CommandError

if TYPE_CHECKING:
    from volcano_guard.base.kubeconfig import Cluster
    from volcano_guard.base.listen import Listen
    from volcano_guard.certs.reload import CertReloader
    from volcano_guard.webhook.caches import Caches
    from volcano_guard.webhook.config import Config

# The commands of the sandbox distribution (sandbox/: the sandbox API server and the demo), left
# out of the image. It registers them as entry points of this group, each a function
# (prog, argv) -> exit code, so that no product module imports it.
SANDBOX_COMMANDS = "volcano_guard.commands"
# How a user gets them: neither distribution is on a package index, so from the checkout.
SANDBOX_INSTALL = "from a checkout: pip install . ./sandbox"


# What a shell reports for a program that SIGPIPE ended (128 + 13): output to a reader that left.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # and for one SIGINT ended (128 + 2)
# What `manifests` renders for when no --kubernetes-version is given: output every cluster
# from 1.30 serves (no MutatingAdmissionPolicy, which 1.30 to 1.35 lack by default).
DEFAULT_KUBERNETES_VERSION = (1, 30)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_command_line(argv)
    _configure_logging()
    try:
        return int(args.run(args) or 0)
    except CommandError as exc:
        return _said(args, exc)
    except KeyboardInterrupt:  # Ctrl-C: the servers stop on SIGINT themselves; the rest here
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`| head`): stop quietly, and point stdout at /dev/null so the
        # interpreter's last flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _said(args: argparse.Namespace, error: CommandError) -> int:
    """Print what stopped the command, after its name as typed; its exit code."""
    print(f"{_typed(args)}: {error}", file=sys.stderr)
    return error.exit_code


def _typed(args: argparse.Namespace) -> str:
    """The command as typed: `volcano-guard certs generate`."""
    action = getattr(args, "action", None)
    return " ".join(["volcano-guard", args.command, *([action] if action else [])])


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# The namespace attribute naming the parser of the innermost (sub)command on the command line.
_OWNER = "_parser"


class Parser(argparse.ArgumentParser):
    """argparse that says what is wrong in one line, as kubectl does, not with the usage, and
    takes a flag only as it is spelt (no abbreviations: `--out` is not `--output`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # A subcommand's defaults overwrite its parent's, so after parsing this is the parser
        # of the innermost command given (subparsers are made with their parent's class).
        self.set_defaults(**{_OWNER: self})

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_command_line(self, argv: Sequence[str] | None) -> argparse.Namespace:
        """parse_args, but a flag no parser knows is reported by the command it was given to,
        before any flag it lacks (a misspelt flag is what makes the right one missing).

        argparse's parse_args reports leftovers from the top parser, as `volcano-guard:`, after
        every subparser has passed them up: it cannot say which command lacks the flag."""
        argv = sys.argv[1:] if argv is None else list(argv)
        with _nothing_required(self):
            args, unknown = self.parse_known_args(argv)
        if unknown:
            vars(args)[_OWNER].error(f"unrecognized arguments: {' '.join(unknown)}")
        args = self.parse_args(argv)
        del vars(args)[_OWNER]  # not passed on: --workers pickles args for its processes
        return args


@contextlib.contextmanager
def _nothing_required(parser: argparse.ArgumentParser) -> Iterator[None]:
    """parser and its subcommands' parsers with no argument required, for the time being."""
    required = [action for action in _actions(parser) if action.required]
    for action in required:
        action.required = False
    try:
        yield
    finally:
        for action in required:
            action.required = True


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)


# Every command's --config: the one loader (webhook.config.load_config) reads both forms.
CONFIG_HELP = (
    "YAML config file, or a ConfigMap manifest holding it under config.yaml "
    "(default: every default)"
)


def build_parser() -> Parser:
    parser = Parser(
        prog="volcano-guard",
        description="Admission webhook and status-coalescing proxy for the Volcano scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_webhook(commands)
    _add_certs(commands)
    _add_check(commands)
    _add_manifests(commands)
    _add_sidecar(commands)
    _add_sandbox_command(
        commands,
        "sandbox",
        "a local stand-in for kube-apiserver for tests and demos, over HTTP, or HTTPS with "
        "--tls-cert (needs the sandbox harness)",
    )
    _add_audit(commands)
    _add_reconcile(commands)
    _add_sandbox_command(
        commands,
        "demo",
        "the guard against a sandbox API server, no cluster needed (needs the sandbox harness)",
    )
    return parser


def _add_webhook(commands: argparse._SubParsersAction) -> None:
    webhook = commands.add_parser("webhook", help="serve the admission webhook over HTTPS")
    webhook.add_argument("--config", help=CONFIG_HELP)
    webhook.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT (default %(default)s)")
    webhook.add_argument("--tls-cert", required=True, help="serving certificate (PEM)")
    webhook.add_argument("--tls-key", required=True, help="serving key (PEM)")
    webhook.add_argument(
        "--client-ca",
        metavar="FILE",
        help="require a client certificate "
        "signed by this CA (the API server's, from its AdmissionConfiguration; "
        "a CA used for nothing else: `certs client` makes one)",
    )
    webhook.add_argument(
        "--metrics-listen", default="0.0.0.0:9090", help="HOST:PORT for /metrics (plain HTTP)"
    )
    _add_cluster_flags(webhook)
    webhook.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="processes sharing the admission port (SO_REUSEPORT); one uses "
        "one core (default %(default)s)",
    )
    webhook.add_argument(
        "--shutdown-delay",
        type=_notice_seconds,
        default=0.0,
        metavar="SECONDS",
        help="after SIGTERM, go on serving, unready, this long before closing the port, while "
        "the Service's endpoints drop the pod (the Deployment gives 5; default %(default)s)",
    )
    webhook.set_defaults(run=run_webhook)


def _add_certs(commands: argparse._SubParsersAction) -> None:
    certs = commands.add_parser("certs", help="certificate tooling")
    actions = certs.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = actions.add_parser("generate", help="ECDSA P-256 CA and serving certificate")
    generate.add_argument(
        "--service", type=_service, required=True, help="the webhook's Service name"
    )
    generate.add_argument(
        "--namespace", type=_namespace, required=True, help="the Service's namespace"
    )
    generate.add_argument(
        "--out", required=True, help="directory for ca.crt, ca.key, tls.crt, tls.key"
    )
    generate.add_argument(
        "--days", type=_positive_int, default=365, help="validity (default %(default)s)"
    )
    generate.add_argument("--force", action="store_true", help="replace an existing CA")
    generate.set_defaults(run=run_certs_generate)
    rotate = actions.add_parser(
        "rotate",
        help="renew the serving cert (and the CA, with an overlapping bundle) before they expire",
    )
    rotate.add_argument("--dir", required=True, help="directory written by certs generate")
    rotate.add_argument(
        "--renew-before",
        type=_duration,
        default="720h",
        help="renew what expires within this (default %(default)s)",
    )
    rotate.add_argument("--force", action="store_true", help="renew the serving cert now")
    rotate.set_defaults(run=run_certs_rotate)
    inject = actions.add_parser("inject", help="set caBundle on the webhook configurations")
    inject.add_argument("--ca", required=True, help="CA bundle file (ca.crt)")
    inject.add_argument(
        "--mutating", type=_object_name, action="append", default=[], metavar="NAME"
    )
    inject.add_argument(
        "--validating", type=_object_name, action="append", default=[], metavar="NAME"
    )
    _add_cluster_flags(inject)
    inject.set_defaults(run=run_certs_inject)
    ensure = actions.add_parser(
        "ensure",
        help="make, renew and rotate the webhook's "
        "certificates in the cluster, in an order that never breaks TLS",
    )
    ensure.add_argument(
        "--service",
        type=_service,
        default="volcano-guard",
        help="the webhook's Service (default %(default)s)",
    )
    ensure.add_argument(
        "--namespace", type=_namespace, required=True, help="the Service's and Secrets' namespace"
    )
    ensure.add_argument(
        "--ca-secret",
        type=_object_name,
        default="volcano-guard-ca",
        help="Secret holding the CAs and the CA key (default %(default)s)",
    )
    ensure.add_argument(
        "--tls-secret",
        type=_object_name,
        default="volcano-guard-tls",
        help="Secret the webhook mounts (default %(default)s)",
    )
    ensure.add_argument(
        "--mutating", type=_object_name, action="append", default=[], metavar="NAME"
    )
    ensure.add_argument(
        "--validating", type=_object_name, action="append", default=[], metavar="NAME"
    )
    ensure.add_argument(
        "--ca-valid",
        type=_duration,
        default="3650d",
        help="a new CA's lifetime (default %(default)s)",
    )
    ensure.add_argument(
        "--cert-valid",
        type=_duration,
        default="365d",
        help="a serving certificate's lifetime (default %(default)s)",
    )
    _add_cluster_flags(ensure)
    ensure.set_defaults(run=run_certs_ensure)
    client = actions.add_parser(
        "client",
        help="a CA of its own and a client certificate for the API server, for webhook --client-ca",
    )
    client.add_argument(
        "--out", required=True, help="directory for client-ca.crt, client.crt, client.key"
    )
    client.add_argument(
        "--name",
        type=_common_name,
        default="kube-apiserver",
        help="the certificate's common name (default %(default)s)",
    )
    client.add_argument(
        "--days", type=_positive_int, default=365, help="validity (default %(default)s)"
    )
    client.add_argument("--force", action="store_true", help="replace an existing client CA")
    client.set_defaults(run=run_certs_client)
    secret = actions.add_parser("secret", help="create or update the serving cert's Secret")
    secret.add_argument("--dir", required=True, help="directory with tls.crt, tls.key, ca.crt")
    secret.add_argument("--name", type=_object_name, required=True, help="the Secret's name")
    secret.add_argument(
        "--namespace", type=_namespace, required=True, help="the Secret's namespace"
    )
    _add_cluster_flags(secret)
    secret.set_defaults(run=run_certs_secret)


def _add_check(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check",
        help="run the policies over manifests offline (exit 0 clean, 1 violations, "
        "2 unusable input)",
    )
    check.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=True,
        metavar="PATH",
        help="file or directory of YAML/JSON, or - for standard input (repeatable)",
    )
    check.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="check the directories of -f and everything below them",
    )
    check.add_argument("--config", help=CONFIG_HELP)
    check.add_argument("--output", choices=("text", "json"), default="text")
    check.add_argument(
        "--nodes",
        metavar="FILE",
        help="Nodes (a NodeList or Node YAMLs) for "
        "the nodeName policy; without it every node counts as Volcano-managed",
    )
    check.set_defaults(run=run_check)


def _add_audit(commands: argparse._SubParsersAction) -> None:
    audit = commands.add_parser(
        "audit",
        help="find what the policies and Volcano's node accounting object to in the "
        "cluster as it is (exit 0 clean, 1 findings, 2 the cluster cannot be read)",
    )
    _add_cluster_flags(audit)
    audit.add_argument("--config", help=CONFIG_HELP)
    audit.add_argument(
        "--namespace",
        type=_namespace,
        help="only this namespace's objects "
        "(node accounting, which needs every pod, is then skipped)",
    )
    audit.add_argument("--output", choices=("text", "json"), default="text")
    audit.add_argument(
        "--watch",
        action="store_true",
        help="keep auditing as the cluster "
        "changes, publishing metrics (on --metrics-listen) until SIGTERM",
    )
    audit.add_argument(
        "--metrics-listen",
        default="0.0.0.0:9092",
        help="HOST:PORT for /metrics, /healthz, /readyz with --watch (default %(default)s)",
    )
    audit.add_argument(
        "--lease-namespace",
        type=_namespace,
        help="where --watch replicas "
        "elect the active one (a Lease named volcano-guard-audit; default: the "
        "kubeconfig context's namespace, else the pod's own, else default)",
    )
    audit.add_argument(
        "--lease-duration",
        type=_positive_int,
        default=15,
        metavar="SECONDS",
        help="how long a standby waits for a silent leader (default 15)",
    )
    audit.set_defaults(run=run_audit)


def _add_reconcile(commands: argparse._SubParsersAction) -> None:
    reconcile = commands.add_parser(
        "reconcile",
        help="keep the webhook configurations, in-server policies, certificates and node "
        "states in step with the config ConfigMap, in the cluster, until SIGTERM",
    )
    _add_cluster_flags(reconcile)
    reconcile.add_argument(
        "--namespace",
        type=_namespace,
        help="the guard's namespace, where its config, Secrets and Service are (default: the "
        "pod's own, else the kubeconfig context's)",
    )
    reconcile.add_argument(
        "--config-map",
        type=_object_name,
        default="volcano-guard-config",
        help="the config ConfigMap, its key config.yaml (default %(default)s)",
    )
    reconcile.add_argument(
        "--service",
        type=_service,
        default="volcano-guard",
        help="the webhook's Service (default %(default)s)",
    )
    reconcile.add_argument(
        "--certificates",
        choices=("self", "cert-manager", "external"),
        default="self",
        help="who keeps the CA, serving certificate and caBundles: this process (self), "
        "cert-manager and its cainjector, or someone else (external: `certs` by hand, or "
        "your own tooling) (default %(default)s)",
    )
    reconcile.add_argument(
        "--gitops",
        action="store_true",
        help="write no webhook configuration, policy or binding: report what differs from the "
        "config (the operator applies `volcano-guard manifests`)",
    )
    reconcile.add_argument(
        "--uninstall",
        action="store_true",
        help="pause the running reconciler and delete the webhook configurations, policies and "
        "bindings it keeps (the first step of an uninstall); exit 0 once they are gone",
    )
    reconcile.add_argument(
        "--once",
        action="store_true",
        help="one pass, no Lease: exit 0 when everything is in step, 1 when not",
    )
    reconcile.add_argument(
        "--metrics-listen",
        default="0.0.0.0:9093",
        help="HOST:PORT for /metrics, /healthz, /readyz (default %(default)s)",
    )
    reconcile.add_argument(
        "--lease-duration",
        type=_positive_int,
        default=15,
        metavar="SECONDS",
        help="how long a standby waits for a silent leader (default 15)",
    )
    reconcile.set_defaults(run=run_reconcile)


def _add_sidecar(commands: argparse._SubParsersAction) -> None:
    sidecar = commands.add_parser(
        "sidecar", help="API proxy that coalesces Queue status writes (run beside Volcano)"
    )
    sidecar.add_argument(
        "--listen",
        default="127.0.0.1:8001",
        help="HOST:PORT (default %(default)s, loopback: only the pod's own containers reach it)",
    )
    sidecar.add_argument(
        "--metrics-listen",
        default="127.0.0.1:9091",
        help="HOST:PORT for /metrics, /healthz, /readyz",
    )
    sidecar.add_argument("--upstream", help="API server URL (default: kubeconfig or in-cluster)")
    sidecar.add_argument("--token-file", help="bearer token file, re-read when it changes")
    sidecar.add_argument("--ca-file", help="CA bundle for an https upstream")
    _add_cluster_flags(sidecar)
    sidecar.add_argument(
        "--allow-plaintext-token",
        action="store_true",
        help="send the token to an http:// upstream (in clear: anyone on the "
        "path can take it); refused without this flag",
    )
    sidecar.add_argument(
        "--flush-interval",
        type=_positive_float,
        default=1.0,
        help="seconds between status writes of one object (default 1.0)",
    )
    sidecar.add_argument(
        "--ack",
        choices=("async", "sync"),
        default="async",
        help="answer writes at once (async) or when flushed (sync)",
    )
    sidecar.add_argument(
        "--max-pending",
        type=_positive_int,
        default=10_000,
        help="objects with pending writes before 429 backpressure",
    )
    sidecar.add_argument(
        "--max-upstream-qps",
        type=_positive_float,
        default=50.0,
        help="cap on upstream status writes per second",
    )
    sidecar.add_argument(
        "--drain-timeout",
        type=_positive_float,
        default=20.0,
        help="seconds to flush pending writes on SIGTERM",
    )
    sidecar.add_argument(
        "--upstream-read-timeout",
        type=_positive_float,
        default=60.0,
        help="seconds an upstream answer may go without a byte (not for "
        "watches, followed logs and proxies; default 60, as kube-apiserver's "
        "--request-timeout)",
    )
    sidecar.add_argument(
        "--coalesce",
        action="append",
        metavar="GROUP/VERSION/RESOURCE",
        help="resource whose /status writes are coalesced (repeatable; "
        "default scheduling.volcano.sh/v1beta1/queues)",
    )
    sidecar.add_argument(
        "--write-kubeconfig",
        metavar="PATH",
        help="write a kubeconfig pointing at this proxy (for the app's "
        "containers; the injected sidecar uses it)",
    )
    sidecar.set_defaults(run=run_sidecar)


def _add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """How a command finds its cluster, as kubectl does."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: "
        "$KUBECONFIG's files, else ~/.kube/config, else the in-cluster config)",
    )
    parser.add_argument(
        "--context", help="the kubeconfig context to use (default: its current-context)"
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _notice_seconds(text: str) -> float:
    """0 to 300 seconds: more would outlast any terminationGracePeriodSeconds worth having."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 300:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 300 seconds")
    return value


def _duration(text: str) -> datetime.timedelta:
    from volcano_guard.base.durations import parse_duration

    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not value:
        raise argparse.ArgumentTypeError(f"{text} is not a positive duration")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _name(check: Callable[[str], str | None]) -> Callable[[str], str]:
    """An argparse type: a Kubernetes name that check (base.names) accepts."""

    def parse(text: str) -> str:
        problem = check(text)
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
        return text

    return parse


def _common_name(text: str) -> str:
    """A certificate's common name: 1 to 64 characters (X.509's upper bound)."""
    if not 1 <= len(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 to 64 characters long")
    return text


def _namespace(text: str) -> str:
    from volcano_guard.base.names import dns1123_label_problem

    return _name(dns1123_label_problem)(text)


def _service(text: str) -> str:
    from volcano_guard.base.names import dns1035_label_problem

    return _name(dns1035_label_problem)(text)


def _object_name(text: str) -> str:
    from volcano_guard.base.names import dns1123_subdomain_problem

    return _name(dns1123_subdomain_problem)(text)


def _add_manifests(commands: argparse._SubParsersAction) -> None:
    manifests = commands.add_parser(
        "manifests", help="print the webhook configurations that match a config"
    )
    manifests.add_argument("--config", help=CONFIG_HELP)
    manifests.add_argument(
        "--namespace",
        type=_namespace,
        default="volcano-guard",
        help="the guard's namespace (default %(default)s)",
    )
    manifests.add_argument(
        "--service",
        type=_service,
        default="volcano-guard",
        help="the webhook's Service (default %(default)s)",
    )
    manifests.add_argument(
        "--kubernetes-version",
        type=_kubernetes_version,
        default=None,
        metavar="MAJOR.MINOR",
        help="the cluster's version: ValidatingAdmissionPolicies from 1.30 (before it the "
        "registrations fail closed), MutatingAdmissionPolicies from 1.36 (1.34 and 1.35 with "
        "mutatingAdmissionPolicyBeta in the config) (default: 1.30, what every cluster from "
        "1.30 serves)",
    )
    manifests.set_defaults(run=run_manifests)


def _kubernetes_version(text: str) -> tuple[int, int]:
    from volcano_guard.reconciler.discovery import parse_version

    try:
        return parse_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_sandbox_command(commands: argparse._SubParsersAction, name: str, summary: str) -> None:
    """A command of the sandbox distribution: its arguments, --help included, go to it whole
    (no prefix character is an option's here)."""
    command = commands.add_parser(name, help=summary, add_help=False, prefix_chars="\0")
    command.add_argument("argv", nargs="*", default=[])
    command.set_defaults(run=run_sandbox_command)


def run_sandbox_command(args: argparse.Namespace) -> int:
    """Hand a sandbox command to the sandbox distribution; one line when it is not installed."""
    from importlib.metadata import entry_points

    found = entry_points(group=SANDBOX_COMMANDS, name=args.command)
    if not found:
        raise CommandError(
            f"needs the sandbox harness (volcano-guard-sandbox is not installed; {SANDBOX_INSTALL})"
        )
    (command,) = found
    return int(command.load()(_typed(args), list(args.argv)))


def run_webhook(args: argparse.Namespace) -> int:
    try:
        parts = _webhook_parts(args)
    except (ValueError, OSError) as exc:
        raise CommandError(str(exc)) from None
    if args.workers > 1:
        return _run_webhook_workers(args, parts)
    return run_server(parts.serve(shutdown_delay=args.shutdown_delay))


@dataclass(frozen=True)
class _WebhookParts:
    """Everything a webhook process serves with, checked before anything starts."""

    config: Config
    listen: Listen
    metrics_listen: Listen
    tls: ssl.SSLContext
    caches: Caches
    reloader: CertReloader
    config_file: str | None = None  # re-read when it changes
    config_hash: str | None = None  # of the bytes config was read from
    own_namespace: str | None = None

    async def serve(self, **options: Any) -> None:
        from volcano_guard.webhook.server import LiveConfig, config_reloader, serve

        live = LiveConfig(self.config)
        background = []
        if self.config_file is not None:
            reload = config_reloader(
                self.config_file, live, self.caches, self.own_namespace, loaded=self.config_hash
            )
            background.append(reload.watch)
        await serve(
            self.config,
            self.listen,
            self.metrics_listen,
            self.tls,
            caches=self.caches,
            reloader=self.reloader,
            background=background,
            live=live,
            **options,
        )


def _webhook_parts(args: argparse.Namespace) -> _WebhookParts:
    """ValueError/OSError naming the problem (bad listen address, certificate, cluster)."""
    from volcano_guard.base.kubeconfig import KubeconfigError, own_namespace, resolve
    from volcano_guard.base.listen import parse_listen
    from volcano_guard.base.tls import server_context
    from volcano_guard.certs.reload import CertReloader
    from volcano_guard.webhook.caches import Caches, needs_cluster, without_cluster
    from volcano_guard.webhook.config import exempt_own_namespace

    read, config_hash = _config_read(args.config)
    config = exempt_own_namespace(read, own_namespace())
    listen, metrics_listen = parse_listen(args.listen), parse_listen(args.metrics_listen)
    tls = server_context(args.tls_cert, args.tls_key, args.client_ca)

    def connect() -> Cluster:  # KubeconfigError is a ValueError naming the problem
        return resolve(kubeconfig=args.kubeconfig, context=args.context)

    try:
        cluster = connect() if needs_cluster(config) else None
    except KubeconfigError as exc:
        raise ValueError(f"{exc} ({without_cluster(config)})") from None
    caches = Caches.for_config(config, cluster, connect=connect)
    return _WebhookParts(
        config,
        listen,
        metrics_listen,
        tls,
        caches,
        CertReloader(tls, args.tls_cert, args.tls_key),
        config_file=args.config,
        config_hash=config_hash,
        own_namespace=own_namespace(),
    )


def _run_webhook_workers(args: argparse.Namespace, parts: _WebhookParts) -> int:
    from volcano_guard.base.listen import AddressUnusable, listening_socket
    from volcano_guard.webhook.server import SHUTDOWN_TIMEOUT
    from volcano_guard.webhook.workers import WorkerError, reserved_port, start_workers, supervise

    try:
        metrics = listening_socket("--metrics-listen", parts.metrics_listen)
        with reserved_port(parts.listen) as port:
            args.listen = str(replace(parts.listen, port=port))  # port 0 resolved once
            workers = start_workers(args.workers, _webhook_worker, args)
    except AddressUnusable as exc:  # before any worker started
        raise CommandError(str(exc)) from None
    except WorkerError as exc:
        raise CommandError(str(exc), 1) from None
    return run_server(supervise(workers, metrics, shutdown_timeout=SHUTDOWN_TIMEOUT))


def _webhook_worker(args: argparse.Namespace, report: Any) -> None:
    """One of --workers: a whole webhook on the shared admission port, metrics on loopback,
    with its share of the pod's connections."""
    import msgspec

    from volcano_guard.base.listen import Listen

    _configure_logging()
    try:
        parts = _webhook_parts(args)
    except CommandError as exc:  # a worker process has no main to say it
        raise SystemExit(_said(args, exc)) from None
    share = max(1, parts.config.maxConnections // args.workers)  # the pod's cap, split
    parts = replace(
        parts,
        metrics_listen=Listen("127.0.0.1", 0),
        config=msgspec.structs.replace(parts.config, maxConnections=share),
    )
    asyncio.run(
        parts.serve(
            reuse_port=True,
            started=lambda *ports: report.send(ports),
            shutdown_delay=args.shutdown_delay,
        )
    )


def run_certs_generate(args: argparse.Namespace) -> int:
    from volcano_guard.base.files import describe_os_error
    from volcano_guard.certs.generate import CertsError, generate

    try:
        made = generate(args.service, args.namespace, args.out, days=args.days, force=args.force)
    except CertsError as exc:
        raise CommandError(str(exc), 1) from None
    except OSError as exc:
        raise CommandError(describe_os_error(exc), 1) from None
    print(
        f"wrote {', '.join(map(str, made.files))} "
        f"(valid until {made.not_after:%Y-%m-%d}; names: {', '.join(made.dns_names)})"
    )
    return 0


def run_certs_client(args: argparse.Namespace) -> int:
    from volcano_guard.base.files import describe_os_error
    from volcano_guard.certs.generate import CertsError, generate_client

    try:
        made = generate_client(args.name, args.out, days=args.days, force=args.force)
    except CertsError as exc:
        raise CommandError(str(exc), 1) from None
    except OSError as exc:
        raise CommandError(describe_os_error(exc), 1) from None
    print(
        f"wrote {made.ca_file}, {made.cert_file}, {made.key_file} (client {made.name}, valid "
        f"until {made.not_after:%Y-%m-%d}): pass {made.ca_file.name} to webhook --client-ca, "
        "and the certificate and key to the API server's AdmissionConfiguration kubeconfig"
    )
    return 0


def run_certs_rotate(args: argparse.Namespace) -> int:
    from volcano_guard.certs.generate import CertsError
    from volcano_guard.certs.rotate import rotate

    try:
        done = rotate(args.dir, args.renew_before, force_leaf=args.force)
    except CertsError as exc:
        raise CommandError(str(exc), 1) from None
    print(
        f"serving cert {'renewed' if done.leaf_renewed else 'kept'} (valid until "
        f"{done.leaf_not_after:%Y-%m-%d}); CA {'rotated' if done.ca_rotated else 'kept'}; "
        f"ca.crt holds {done.bundle_size} CA(s)"
    )
    return 0


def run_certs_inject(args: argparse.Namespace) -> int:
    from volcano_guard.certs.cluster import UnfitCABundle, inject_ca_bundle, read_ca_bundle
    from volcano_guard.certs.generate import CertsError

    if not args.mutating and not args.validating:
        raise CommandError("name at least one --mutating or --validating configuration")
    try:
        pem = read_ca_bundle(args.ca)  # before the cluster is touched
    except UnfitCABundle as exc:
        raise CommandError(str(exc)) from None
    try:
        patched = inject_ca_bundle(_api_client(args), pem, args.mutating, args.validating)
    except CertsError as exc:
        raise CommandError(str(exc), 1) from None
    except ConnectionError as exc:  # no API server answered (base.api_client names it)
        raise CommandError(f"{exc}; no caBundle was changed") from None
    print("caBundle set on " + ", ".join(patched))
    return 0


def run_certs_ensure(args: argparse.Namespace) -> int:
    from volcano_guard.certs.ensure import Target, Unreachable, ensure
    from volcano_guard.certs.generate import CertsError
    from volcano_guard.certs.plan import Lifetimes

    if not args.mutating and not args.validating:
        raise CommandError("name at least one --mutating or --validating configuration")
    target = Target(
        args.namespace,
        args.service,
        args.ca_secret,
        args.tls_secret,
        tuple(args.mutating),
        tuple(args.validating),
    )
    try:
        taken = ensure(
            _api_client(args),
            target,
            Lifetimes(args.ca_valid, args.cert_valid),
            said=lambda step, why: print(f"{step}: {why}", flush=True),
        )  # logs as they happen
    except CertsError as exc:
        raise CommandError(str(exc), EXIT_USAGE if isinstance(exc, Unreachable) else 1) from None
    print(f"certificates current ({len(taken)} steps taken)")
    return 0


def run_certs_secret(args: argparse.Namespace) -> int:
    from volcano_guard.certs.cluster import write_secret
    from volcano_guard.certs.generate import CertsError

    try:
        done = write_secret(_api_client(args), args.dir, args.namespace, args.name)
    except CertsError as exc:
        raise CommandError(str(exc), 1) from None
    except ConnectionError as exc:  # no API server answered (base.api_client names it)
        raise CommandError(str(exc)) from None
    print(f"Secret {args.namespace}/{args.name} {done}")
    return 0


def _api_client(args: argparse.Namespace, exit_code: int = EXIT_USAGE) -> Any:
    """A kubernetes ApiClient for the command's cluster (CommandError naming what is
    missing)."""
    from volcano_guard.base.api_client import api_client

    return api_client(_cluster(args, exit_code))


def _cluster(args: argparse.Namespace, exit_code: int) -> Cluster:
    from volcano_guard.base.kubeconfig import KubeconfigError, resolve

    try:
        return resolve(kubeconfig=args.kubeconfig, context=args.context)
    except KubeconfigError as exc:
        raise CommandError(str(exc), exit_code) from None


def run_check(args: argparse.Namespace) -> int:
    from volcano_guard.webhook.check import EXIT_UNUSABLE, UnusableInput, format_report
    from volcano_guard.webhook.check import run_check as check

    config = _config(args.config)
    try:
        report = check(args.paths, config, args.nodes, recursive=args.recursive)
    except UnusableInput as exc:
        raise CommandError(str(exc), EXIT_UNUSABLE) from None
    if args.output == "text":
        for problem in report.problems:
            print(f"volcano-guard check: {problem}", file=sys.stderr)
    print(format_report(report, args.output))
    return report.exit_code


def run_audit(args: argparse.Namespace) -> int:
    from volcano_guard.audit.cluster import ClusterReadError, NamespaceNotFound, read_state
    from volcano_guard.audit.findings import NODE_ACCOUNTING, findings
    from volcano_guard.audit.report import EXIT_UNREADABLE, exit_code, format_report

    config, config_hash = _config_read(args.config)
    if args.watch:
        return _watch_audit(args, config, config_hash)
    on_terminal = sys.stderr.isatty()

    def progress(text: str) -> None:
        if on_terminal:  # large clusters take a while to list
            print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)

    try:
        state = read_state(_api_client(args, EXIT_UNREADABLE), args.namespace, progress)
    except ClusterReadError as exc:
        progress("")  # the error takes the progress line's place
        why = exc if isinstance(exc, NamespaceNotFound) else f"cannot read the cluster: {exc}"
        raise CommandError(str(why), EXIT_UNREADABLE) from None
    progress("")
    found = findings(state, config)
    if args.namespace:  # the nodes' accounts need every pod, not one namespace's
        found = [finding for finding in found if finding.policy != NODE_ACCOUNTING]
    print(format_report(found, state, args.output))
    return exit_code(found)


def _watch_audit(args: argparse.Namespace, config: Any, config_hash: str | None) -> int:
    import os
    import socket

    from volcano_guard.audit.report import EXIT_UNREADABLE
    from volcano_guard.audit.watch import watch
    from volcano_guard.base.api_client import api_client
    from volcano_guard.base.lease import LeaseSettings
    from volcano_guard.base.listen import parse_listen

    if args.namespace:
        raise CommandError("--watch audits the whole cluster (no --namespace)")
    try:
        metrics_listen = parse_listen(args.metrics_listen)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    cluster = _cluster(args, EXIT_UNREADABLE)
    namespace = args.lease_namespace or cluster.default_namespace()
    lease = LeaseSettings(
        namespace=namespace,
        duration=args.lease_duration,
        renew_deadline=args.lease_duration * 2 / 3,
        retry=min(2.0, args.lease_duration / 5),
    )
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"
    return run_server(
        watch(
            api_client(cluster), config, metrics_listen, lease, identity, args.config, config_hash
        )
    )


def run_reconcile(args: argparse.Namespace) -> int:
    import os
    import socket

    from volcano_guard.base.api_client import api_client
    from volcano_guard.base.kubeconfig import own_namespace
    from volcano_guard.base.lease import LeaseSettings
    from volcano_guard.base.listen import parse_listen
    from volcano_guard.reconciler.reconcile import LEASE, Reconciler, Settings, uninstall
    from volcano_guard.reconciler.run import reconcile

    try:
        metrics_listen = parse_listen(args.metrics_listen)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    cluster = _cluster(args, EXIT_USAGE)
    namespace = args.namespace or own_namespace() or cluster.default_namespace()
    settings = Settings(
        namespace,
        service=args.service,
        config_map=args.config_map,
        gitops=args.gitops,
        certificates=args.certificates,
    )
    client = api_client(cluster)
    if args.uninstall:
        try:
            uninstall(client, settings, said=lambda line: print(line, flush=True))
        except (RuntimeError, ConnectionError) as exc:
            raise CommandError(str(exc), 1) from None
        return 0
    if args.once:
        try:
            return 0 if Reconciler(client, settings).reconcile_once() else 1
        except ConnectionError as exc:  # no API server answered (base.api_client names it)
            raise CommandError(str(exc)) from None
    lease = LeaseSettings(
        namespace=namespace,
        name=LEASE,
        duration=args.lease_duration,
        renew_deadline=args.lease_duration * 2 / 3,
        retry=min(2.0, args.lease_duration / 5),
        namespace_flag="--namespace",
    )
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"
    return run_server(reconcile(client, cluster, settings, metrics_listen, lease, identity))


def run_manifests(args: argparse.Namespace) -> int:
    from volcano_guard.webhook.admission_policies import apis_at
    from volcano_guard.webhook.manifests import admission_objects
    from volcano_guard.webhook.registrations import render

    config = _config(args.config)
    served = apis_at(args.kubernetes_version or DEFAULT_KUBERNETES_VERSION)
    objects = admission_objects(config, args.namespace, args.service, served=served)
    print(render(list(objects.values())), end="")
    return 0


def run_sidecar(args: argparse.Namespace) -> int:
    from volcano_guard.base.files import read_bytes
    from volcano_guard.base.kubeconfig import KubeconfigError, resolve
    from volcano_guard.base.listen import parse_listen
    from volcano_guard.sidecar.routes import DEFAULT_COALESCED, parse_resource
    from volcano_guard.sidecar.service import SidecarSettings, serve

    if args.upstream and (args.kubeconfig or args.context):
        raise CommandError("--upstream and --kubeconfig/--context are alternatives; pass one")
    try:
        listen, metrics_listen = parse_listen(args.listen), parse_listen(args.metrics_listen)
        coalesce = tuple(parse_resource(r) for r in args.coalesce or DEFAULT_COALESCED)
        for path, flag in ((args.ca_file, "--ca-file"), (args.token_file, "--token-file")):
            if path:
                read_bytes(path, flag)  # named now, not at the first request
        cluster = resolve(
            args.upstream, args.token_file, args.ca_file, args.kubeconfig, args.context
        )
        cluster.ssl_context()  # a CA bundle that does not load fails here
    except KubeconfigError as exc:
        also = "" if args.upstream or args.kubeconfig or args.context else " or --upstream URL"
        raise CommandError(f"{exc}{also}") from None
    except ssl.SSLError as exc:
        problem = exc.reason or exc
        raise CommandError(f"the CA bundle {cluster.ca_file} does not load: {problem}") from None
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if (
        cluster.url.startswith("http://")
        and (cluster.token or cluster.token_file)
        and not args.allow_plaintext_token
    ):
        raise CommandError(
            f"{cluster.url} is plain http and a token would be sent to "
            "it in clear; use https, or pass --allow-plaintext-token"
        )
    settings = SidecarSettings(
        listen_host=listen.host,
        listen_port=listen.port,
        metrics_host=metrics_listen.host,
        metrics_port=metrics_listen.port,
        flush_interval=args.flush_interval,
        ack=args.ack,
        max_pending=args.max_pending,
        max_upstream_qps=args.max_upstream_qps,
        drain_timeout=args.drain_timeout,
        coalesce=coalesce,
        write_kubeconfig=args.write_kubeconfig,
        upstream_read_timeout=args.upstream_read_timeout,
    )
    return run_server(serve(cluster, settings))


def run_server(server: Coroutine[Any, Any, Any]) -> int:
    """Run a server to its end: its exit code; an address it cannot bind, or files it cannot
    use, are a CommandError (exit 2)."""
    from volcano_guard.base.files import FileProblem
    from volcano_guard.base.listen import AddressUnusable

    try:
        return int(asyncio.run(server) or 0)
    except (AddressUnusable, FileProblem) as exc:
        raise CommandError(str(exc)) from None


def _config(path: str | None) -> Config:
    return _config_read(path)[0]


def _config_read(path: str | None) -> tuple[Config, str | None]:
    """The config at path and the hash of the bytes it was read from (None: no file), for a
    reloader to tell a later change from the content in force."""
    from volcano_guard.base.config_reload import content_hash
    from volcano_guard.base.files import FileProblem, read_bytes
    from volcano_guard.webhook.config import Config, ConfigError, config_from_bytes

    if path is None:
        return Config(), None
    try:
        data = read_bytes(path, "config file")
        return config_from_bytes(data, path), content_hash(data)
    except (ConfigError, FileProblem) as exc:
        raise CommandError(f"bad config: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
