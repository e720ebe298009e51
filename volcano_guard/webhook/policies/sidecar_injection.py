"""Policy sidecarInjection: pods labelled `volcano-guard.io/inject: "true"` get the coalescing
sidecar, and their app containers are pointed at it. A hostNetwork pod is refused (by config,
injected with a warning): on the node's network its loopback port is open to the whole node.

The sidecar is a native sidecar by default (an init container with `restartPolicy: Always`,
placed first: it is up before the app starts and stops after it). At start it writes a
kubeconfig whose server is itself into a shared emptyDir; the chosen containers get
`--kubeconfig=<that file>` appended to their args (proxy-mode `args`, what Volcano's
controller-manager and scheduler take) or `KUBECONFIG` set (`env`). A pod that already has the
sidecar is left alone, so reinvocation and re-creation from an injected template are no-ops.

In enforce mode the same injection and refusals can run inside the API server: mutate_in_server
(a MutatingAdmissionPolicy's JSONPatch expression) and in_server (a ValidatingAdmissionPolicy),
both written from the webhook's own pieces (sidecar_container, VOLUME_SOURCE, READ_ONLY_MOUNT,
KUBECONFIG_ENV, the annotations' grammar), with config values as CEL literals (cel.literal).

Outside this module the guard uses only what __all__ lists: POLICY, for the registry
(webhook.evaluation), and its config section, for the config (webhook.config); CONTAINER_NAME
and INJECT_LABEL, for the audit and `check` to tell a pod that has the sidecar
(webhook.volcano_versions).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from volcano_guard import __version__
from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonbody import object_at, shown
from volcano_guard.webhook.cel import (
    DESCRIBED,
    Expr,
    all_of,
    concat,
    json_patch,
    kind_is,
    literal,
    operation_is,
)
from volcano_guard.webhook.policies.base import (
    INJECT,
    NOTHING_FOUND,
    PATCHED_CONTAINERS,
    InServerCheck,
    InServerMutation,
    Policy,
    PolicyContext,
    Scope,
    Verdict,
    pods_rule,
)
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode, Name, Port, QuantityText, Seconds, Section
from volcano_guard.webhook.workloads import POD, Container, PodTemplate, containers

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

__all__ = ["CONTAINER_NAME", "INJECT_LABEL", "POLICY", "SidecarInjectionConfig"]


class SidecarInjectionConfig(Section, frozen=True):
    """`policies.sidecarInjection`."""

    mode: Mode = "enforce"
    image: Name = f"volcano-guard:{__version__}"  # this release's own image, never :latest
    nativeSidecar: bool = True
    port: Port = 8001
    metricsPort: Port = 9091
    # per pod: annotation volcano-guard.io/flush-interval, within the same bounds
    flushInterval: Annotated[float, msgspec.Meta(ge=0.05, le=60)] = 1.0
    ack: Literal["async", "sync"] = "async"  # per pod: annotation volcano-guard.io/ack
    drainTimeout: Seconds = 20.0
    proxyMode: Literal["args", "env"] = "args"  # per pod: annotation volcano-guard.io/proxy-mode
    # A hostNetwork pod's loopback is the node's: every process there could reach the sidecar.
    hostNetwork: Literal["refuse", "warn"] = "refuse"
    # The sidecar's own requests and limits, so injected pods pass resourceRequests.
    requests: dict[Name, QuantityText] = msgspec.field(
        default_factory=lambda: {"cpu": QuantityText("50m"), "memory": QuantityText("64Mi")}
    )
    limits: dict[Name, QuantityText] = msgspec.field(
        default_factory=lambda: {"cpu": QuantityText("1"), "memory": QuantityText("256Mi")}
    )


NAME = "sidecarInjection"
INJECT_LABEL = "volcano-guard.io/inject"
FLUSH_INTERVAL = "volcano-guard.io/flush-interval"
ACK = "volcano-guard.io/ack"
PROXY_CONTAINERS = "volcano-guard.io/proxy-containers"
PROXY_MODE = "volcano-guard.io/proxy-mode"
CONTAINER_NAME = "volcano-guard-sidecar"
VOLUME = "volcano-guard-kubeconfig"
MOUNT_PATH = "/var/run/volcano-guard"
KUBECONFIG = f"{MOUNT_PATH}/kubeconfig"
GRACE_MARGIN = 10  # seconds beyond the drain timeout before the kubelet kills the sidecar
FLUSH_PATTERN = r"[0-9]{1,2}(\.[0-9]{1,6})?"  # seconds, as in "1", "0.5" or "12.25"
FLUSH_MIN, FLUSH_MAX = 0.05, 60
FLUSH_ALLOWED = 'a decimal number of seconds from 0.05 to 60, e.g. "1" or "0.5"'
SHOWN_PATTERN = r"[ -~]{0,80}"  # printable ASCII, at most 80 characters
LISTED_NAMES = 20
# Go's unicode.IsSpace, which CEL's trim() strips (Python's str.strip() also strips \x1c-\x1f).
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
HOST_NETWORK_RISK = (
    "the pod uses hostNetwork, so the sidecar's loopback port is the node's: "
    "every process on the node can reach it (it still requires the token of the "
    "kubeconfig it writes)"
)

HOST_NETWORK_REFUSAL = (
    HOST_NETWORK_RISK + "; run it without hostNetwork, or set "
    "policies.sidecarInjection.hostNetwork: warn to inject anyway"
)


def settings(config: Config) -> SidecarInjectionConfig:
    return config.policies.sidecarInjection


def mutate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    pod = request.created(*POD)
    if pod is None:
        return None
    metadata = object_at(pod, "metadata")
    if object_at(metadata, "labels").get(INJECT_LABEL) != "true":
        return None
    spec = object_at(pod, "spec")
    every = containers(PodTemplate(("spec",), spec, ""))  # ObjectShapeError: HTTP 400
    if any(c.name == CONTAINER_NAME for c in every):
        return NOTHING_FOUND  # already injected
    app = [c for c in every if c.kind == "container"]
    if len(app) > PATCHED_CONTAINERS:  # a forged pod: its patch would not fit in an answer
        return Verdict(violations=(f"{request.describe()}: {too_many_to_inject(len(app))}",))
    annotations = object_at(metadata, "annotations")
    config = settings(context.config)
    options, problems = _options(annotations, config)
    targets, problem = _targets(app, annotations)
    problems += [problem] if problem else []
    host_network = spec.get("hostNetwork") is True
    if host_network and config.hostNetwork == "refuse":
        problems.append(HOST_NETWORK_REFUSAL)
    if problems:
        return Verdict(violations=tuple(f"{request.describe()}: {p}" for p in problems))
    patch = _inject(spec, config, options)
    for target in targets:
        patch.extend(_point_at_proxy(target, options["mode"]))
    grace = math.ceil(options["drain"]) + GRACE_MARGIN
    current = spec.get("terminationGracePeriodSeconds")
    if not isinstance(current, int) or current < grace:  # unset (30 s) or too short
        patch.append(jsonpatch.add("/spec/terminationGracePeriodSeconds", grace))
    names = ", ".join(c.name for c in targets)
    return Verdict(
        patch=tuple(patch),
        changes=(
            f"inject the volcano-guard sidecar into {request.describe()} and point {names} at it",
        ),
        warnings=(f"{request.describe()}: {HOST_NETWORK_RISK}",) if host_network else (),
    )


def too_many_to_inject(count: int) -> str:
    return (
        f"has {count:,} containers, more than the {PATCHED_CONTAINERS:,} one answer can point "
        "at the sidecar"
    )


def scopes(config: Config) -> tuple[Scope, ...]:
    """Pod CREATEs labelled for injection, in a registration of their own that fails open."""
    return (
        Scope(
            INJECT,
            (pods_rule("CREATE"),),
            all_of(kind_is(*POD), operation_is("CREATE")),
            ((INJECT_LABEL, "true"),),
        ),
    )


def sidecar_container(
    config: SidecarInjectionConfig, options: dict[str, Any], native: bool
) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/readyz", "port": config.metricsPort}, "periodSeconds": 5}
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": config.image,
        "command": ["volcano-guard"],
        "args": [
            "sidecar",
            "--listen",
            f"127.0.0.1:{config.port}",
            "--metrics-listen",
            f"0.0.0.0:{config.metricsPort}",
            "--flush-interval",
            options["flush"],
            "--ack",
            options["ack"],
            "--drain-timeout",
            _number(options["drain"]),
            "--write-kubeconfig",
            KUBECONFIG,
        ],
        "ports": [{"name": "vg-metrics", "containerPort": config.metricsPort}],
        "resources": {"requests": dict(config.requests), "limits": dict(config.limits)},
        "readinessProbe": probe,
        "livenessProbe": {**probe, "httpGet": {"path": "/healthz", "port": config.metricsPort}},
        "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}],
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if native:
        container["restartPolicy"] = "Always"
        container["startupProbe"] = {**probe, "periodSeconds": 1, "failureThreshold": 30}
    return container


VOLUME_SOURCE = {"name": VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
READ_ONLY_MOUNT = {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}
KUBECONFIG_ENV = {"name": "KUBECONFIG", "value": KUBECONFIG}


def _inject(
    spec: dict[str, Any], config: SidecarInjectionConfig, options: dict[str, Any]
) -> list[dict[str, Any]]:
    sidecar = sidecar_container(config, options, config.nativeSidecar)
    volume = VOLUME_SOURCE
    ops = []
    if config.nativeSidecar:  # first, so it is up before every other init container
        ops.append(
            jsonpatch.add("/spec/initContainers/0", sidecar)
            if spec.get("initContainers")
            else jsonpatch.add("/spec/initContainers", [sidecar])
        )
    else:
        ops.append(jsonpatch.add("/spec/containers/-", sidecar))
    ops.append(
        jsonpatch.add("/spec/volumes/-", volume)
        if spec.get("volumes")
        else jsonpatch.add("/spec/volumes", [volume])
    )
    return ops


def _point_at_proxy(target: Container, mode: str) -> list[dict[str, Any]]:
    container, base = target.body, jsonpatch.pointer(*target.path)
    mount = READ_ONLY_MOUNT
    ops = [
        jsonpatch.add(f"{base}/volumeMounts/-", mount)
        if container.get("volumeMounts")
        else jsonpatch.add(f"{base}/volumeMounts", [mount])
    ]
    # Appending args to a container without any would replace its image's CMD: use env there.
    if mode == "args" and container.get("args"):
        ops.append(jsonpatch.add(f"{base}/args/-", f"--kubeconfig={KUBECONFIG}"))
    elif mode == "args" and container.get("command"):
        ops.append(jsonpatch.add(f"{base}/args", [f"--kubeconfig={KUBECONFIG}"]))
    else:
        env = KUBECONFIG_ENV
        ops.append(
            jsonpatch.add(f"{base}/env/-", env)
            if container.get("env")
            else jsonpatch.add(f"{base}/env", [env])
        )
    return ops


def _options(
    annotations: dict[str, Any], config: SidecarInjectionConfig
) -> tuple[dict[str, Any], list[str]]:
    options: dict[str, Any] = {
        "flush": _number(config.flushInterval),
        "ack": config.ack,
        "mode": config.proxyMode,
        "drain": config.drainTimeout,
    }
    problems = []
    if FLUSH_INTERVAL in annotations:
        text = annotations[FLUSH_INTERVAL]
        if _flush_interval_valid(text):
            options["flush"] = text  # as written: the in-server form cannot format a number
        else:
            problems.append(
                f"annotation {FLUSH_INTERVAL} is {_shown_text(text)}; allowed: {FLUSH_ALLOWED}"
            )
    for key, field, allowed in (
        (ACK, "ack", ("async", "sync")),
        (PROXY_MODE, "mode", ("args", "env")),
    ):
        if key in annotations:
            if annotations[key] in allowed:
                options[field] = annotations[key]
            else:
                problems.append(
                    f"annotation {key} is {_shown_text(annotations[key])}; allowed: "
                    f"{' or '.join(allowed)}"
                )
    return options, problems


def _flush_interval_valid(text: object) -> bool:
    """A decimal number of seconds within the bounds (FLUSH_PATTERN: what CEL's double()
    and Python's float() read alike; Python alone would take " 1", "1_0" or "1e0")."""
    return (
        isinstance(text, str)
        and re.fullmatch(FLUSH_PATTERN, text) is not None
        and FLUSH_MIN <= float(text) <= FLUSH_MAX
    )


def _targets(app: list[Container], annotations: dict[str, Any]) -> tuple[list[Container], str]:
    """The app containers to point at the sidecar, in the pod's order: all, or those the
    annotation names (each name trimmed of what CEL's trim() removes)."""
    wanted = annotations.get(PROXY_CONTAINERS)
    if wanted is None:
        return app, ""
    if not isinstance(wanted, str):
        return [], f"annotation {PROXY_CONTAINERS} is {shown(wanted)}, not a string"
    names = [c.name for c in app]
    chosen = [n.strip(GO_SPACE) for n in wanted.split(",") if n.strip(GO_SPACE)]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        return [], (
            f"annotation {PROXY_CONTAINERS} names {_shown_text(', '.join(unknown))}, not "
            f"containers of this pod (it has {_listed(names)})"
        )
    return [c for c in app if c.name in chosen], ""


def _shown_text(value: object) -> str:
    """An annotation's value for a message, as the in-server check can say it too: in double
    quotes when it is at most 80 printable ASCII characters, else only its length (a message of
    a ValidatingAdmissionPolicy must be one line)."""
    if not isinstance(value, str):
        return shown(value)
    if re.fullmatch(SHOWN_PATTERN, value):
        return f'"{value}"'
    return f"a value of {len(value)} characters, not shown"


def _listed(names: list[str]) -> str:
    """The pod's container names for a message, or their count past LISTED_NAMES."""
    return ", ".join(names) if len(names) <= LISTED_NAMES else f"{len(names)} containers"


def _number(value: float) -> str:
    return f"{value:g}"


# -- in the API server: a MutatingAdmissionPolicy injects, ValidatingAdmissionPolicies refuse --


def mutate_in_server(config: Config) -> tuple[InServerMutation, ...]:
    """The injection as one JSONPatch expression, making the webhook's patch: the sidecar
    (native or not), the volume, each target's mount and its `--kubeconfig` or KUBECONFIG, and
    the grace period; nothing for a pod already injected, or one in_server refuses.

    Under `hostNetwork: warn` injection stays on the webhook: a hostNetwork pod is injected
    there with a warning to its creator, which a MutatingAdmissionPolicy cannot give (and the
    binding of a ValidatingAdmissionPolicy takes its one action from the policy's mode, Deny in
    enforce). Only in enforce mode (Policy.mutate_in_server applies it): in the API server a
    policy cannot warn that it would patch.

    None without `validatingAdmissionPolicies` either: the policy injects no pod with a
    problem, and leaves refusing it to in_server's check; without that check such a pod would
    start without the sidecar where the webhook refuses it.

    Where the webhook and CEL could read an annotation differently, the webhook reads it as CEL
    does (FLUSH_PATTERN, GO_SPACE, the flush interval passed as written). A pod whose
    containers share a name is patched differently (CEL finds a container's index by its
    name), but kube-apiserver refuses such a pod by its validation, whatever either did."""
    section = settings(config)
    if section.hostNetwork == "warn" or not config.validatingAdmissionPolicies:
        return ()
    return (
        InServerMutation(
            "sidecar-injection",
            (pods_rule("CREATE"),),
            _NOT_INJECTED,
            _patches(section),
            (*_judged(section), *_injected(section)),
            fails_open=True,
        ),
    )


def in_server(config: Config) -> tuple[InServerCheck, ...]:
    """The webhook's refusals, decided by the API server for a labelled pod not injected (one
    that passes them was injected by mutate_in_server or the webhook before they run): a bad
    annotation, and (`hostNetwork: refuse`) a hostNetwork pod, in the webhook's order, so the
    refusal names the problem the webhook names first, in its words. One check, named
    for the refusal it was added for (the name the registrations and the reconciler's RBAC
    know). Only in enforce mode, as the webhook refuses only then."""
    section = settings(config)
    if section.mode != "enforce":
        return ()
    validations = _ANNOTATION_VALIDATIONS
    if section.hostNetwork == "refuse":
        refusal = concat(*DESCRIBED, f": {HOST_NETWORK_REFUSAL}")
        validations += (("!variables.hostNetwork", refusal),)
    return (
        InServerCheck(
            "sidecar-host-network",
            (pods_rule("CREATE"),),
            _NOT_INJECTED,
            validations,
            _judged(section),
        ),
    )


POLICY = Policy(
    name=NAME,
    mode=lambda config: settings(config).mode,
    off="policies.sidecarInjection.mode: off",
    mutate=mutate,
    kinds=frozenset({POD}),
    scopes=scopes,
    in_server=in_server,
    in_server_mutations=mutate_in_server,
)


_ANNOTATIONS = "variables.annotations"


def _annotation(key: str) -> str:
    return f"{_ANNOTATIONS}[{literal(key)}]"


def _annotated(key: str) -> str:
    return f"{literal(key)} in {_ANNOTATIONS}"


def _has_sidecar(field: str) -> str:
    return (
        f"has(object.spec.{field}) && "
        f"object.spec.{field}.exists(c, c.name == {literal(CONTAINER_NAME)})"
    )


# A labelled pod without the sidecar: mutate's requests that are not NOTHING_FOUND.
_NOT_INJECTED = (
    f"has(object.metadata.labels) && {literal(INJECT_LABEL)} in object.metadata.labels && "
    f"object.metadata.labels[{literal(INJECT_LABEL)}] == 'true' && "
    f"!({_has_sidecar('initContainers')}) && !({_has_sidecar('containers')})"
)


def _choice(key: str, allowed: tuple[str, ...]) -> str:
    return f"!({_annotated(key)}) || {_annotation(key)} in {literal(list(allowed))}"


def _option(key: str, default: str) -> str:
    return f"{_annotated(key)} ? {_annotation(key)} : {literal(default)}"


def _judged(section: SidecarInjectionConfig) -> tuple[tuple[str, str], ...]:
    """The variables of what _options and _targets refuse, as CEL."""
    flush = _annotation(FLUSH_INTERVAL)
    return (
        (
            "annotations",
            "has(object.metadata.annotations) ? object.metadata.annotations : {}",
        ),
        (
            "flushValid",
            f"!({_annotated(FLUSH_INTERVAL)}) || "
            f"{_whole_match(flush, FLUSH_PATTERN)} && "
            f"double({flush}) >= {float(FLUSH_MIN)!r} && double({flush}) <= {float(FLUSH_MAX)!r}",
        ),
        ("ackValid", _choice(ACK, ("async", "sync"))),
        ("modeValid", _choice(PROXY_MODE, ("args", "env"))),
        (
            "appNames",
            "has(object.spec.containers) ? object.spec.containers.map(c, c.name) : []",
        ),
        (
            "chosen",
            f"{_annotated(PROXY_CONTAINERS)} ? {_annotation(PROXY_CONTAINERS)}.split(',')"
            ".map(n, n.trim()).filter(n, n != '') : []",
        ),
        ("unknown", "variables.chosen.filter(n, !(n in variables.appNames))"),
        ("hostNetwork", "has(object.spec.hostNetwork) && object.spec.hostNetwork == true"),
    )


def _whole_match(text: str, pattern: str) -> str:
    """CEL: the string text matches pattern as a whole, as re.fullmatch: its leftmost match
    from the start is all of it (the patterns here have one way to match), and find's "" for
    no match is not taken for a match of "" unless the pattern matches "". Not
    matches('^...$'): a `$` that an engine reads as Python's also matches before a final line
    break."""
    found = f"{text}.find({literal(f'^{pattern}')}) == {text}"
    return found if re.fullmatch(pattern, "") else f"{text} != '' && {found}"


def _shown_cel(text: str) -> Expr:
    """_shown_text in CEL, for a string expression."""
    return Expr(
        f"{_whole_match(text, SHOWN_PATTERN)} ? '\"' + {text} + '\"' : "
        f"'a value of ' + string(size({text})) + ' characters, not shown'"
    )


_LISTED_CEL = Expr(
    f"size(variables.appNames) <= {LISTED_NAMES} ? variables.appNames.join(', ') : "
    "string(size(variables.appNames)) + ' containers'"
)
_ANNOTATION_VALIDATIONS = (
    (
        "variables.flushValid",
        concat(
            *DESCRIBED,
            f": annotation {FLUSH_INTERVAL} is ",
            _shown_cel(_annotation(FLUSH_INTERVAL)),
            f"; allowed: {FLUSH_ALLOWED}",
        ),
    ),
    *(
        (
            f"variables.{name}Valid",
            concat(
                *DESCRIBED,
                f": annotation {key} is ",
                _shown_cel(_annotation(key)),
                f"; allowed: {allowed}",
            ),
        )
        for name, key, allowed in (
            ("ack", ACK, "async or sync"),
            ("mode", PROXY_MODE, "args or env"),
        )
    ),
    (
        "size(variables.unknown) == 0",
        concat(
            *DESCRIBED,
            f": annotation {PROXY_CONTAINERS} names ",
            _shown_cel("variables.unknown.join(', ')"),
            ", not containers of this pod (it has ",
            _LISTED_CEL,
            ")",
        ),
    ),
)


def _injected(section: SidecarInjectionConfig) -> tuple[tuple[str, str], ...]:
    """The variables of what mutate patches, as CEL: the options, the sidecar as
    sidecar_container builds it, the target containers, whether to inject at all."""
    per_pod = {
        "flush": Expr("variables.flush"),
        "ack": Expr("variables.ack"),
        "drain": section.drainTimeout,
    }
    sidecar = sidecar_container(section, per_pod, section.nativeSidecar)
    return (
        ("flush", _option(FLUSH_INTERVAL, _number(section.flushInterval))),
        ("ack", _option(ACK, section.ack)),
        ("mode", _option(PROXY_MODE, section.proxyMode)),
        ("sidecar", literal(sidecar)),
        (
            "targets",  # the indices of the target containers
            f"(!({_annotated(PROXY_CONTAINERS)}) ? variables.appNames : "
            "variables.appNames.filter(n, n in variables.chosen))"
            ".map(n, variables.appNames.indexOf(n))",
        ),
        (
            "injectable",
            "variables.flushValid && variables.ackValid && variables.modeValid && "
            "size(variables.unknown) == 0 && !variables.hostNetwork",
        ),
    )


def _add(path: str, value: str) -> str:
    """A JSONPatch add; path and value are CEL expressions."""
    return json_patch("add", path, value)


def _add_to(obj: str, path: str, field: str, item: str, at: str = "-") -> str:
    """CEL: the add that puts item into the list field of obj (at path, a CEL string) at `at`
    (the end, or an index), or sets it to [item] where it is absent or empty, as _inject and
    _point_at_proxy do."""
    into = _add(f"{path} + {literal(f'/{field}/{at}')}", item)
    whole = _add(f"{path} + {literal(f'/{field}')}", f"[{item}]")
    return f"has({obj}.{field}) && size({obj}.{field}) > 0 ? {into} : {whole}"


# Target container i (an app container's index: the sidecar goes first among the init
# containers or last among the containers, so the index the pod gave it still holds).
_CONTAINER = "object.spec.containers[i]"
_CONTAINER_PATH = "('/spec/containers/' + string(i))"
_KUBECONFIG_ARG = f"--kubeconfig={KUBECONFIG}"


def _pointer() -> str:
    """CEL, of target container i: _point_at_proxy's args or env."""
    has_args = f"variables.mode == 'args' && has({_CONTAINER}.args) && size({_CONTAINER}.args) > 0"
    has_command = (
        f"variables.mode == 'args' && has({_CONTAINER}.command) && size({_CONTAINER}.command) > 0"
    )
    append = _add(f"{_CONTAINER_PATH} + '/args/-'", literal(_KUBECONFIG_ARG))
    args = _add(f"{_CONTAINER_PATH} + '/args'", literal([_KUBECONFIG_ARG]))
    env = _add_to(_CONTAINER, _CONTAINER_PATH, "env", literal(KUBECONFIG_ENV))
    return f"{has_args} ? {append} : {has_command} ? {args} : {env}"


def _patches(section: SidecarInjectionConfig) -> str:
    """CEL: mutate's patch, for a pod _NOT_INJECTED matches."""
    spec, path = "object.spec", "'/spec'"
    sidecar = (
        _add_to(spec, path, "initContainers", "variables.sidecar", at="0")
        if section.nativeSidecar
        else _add("'/spec/containers/-'", "variables.sidecar")
    )
    grace = math.ceil(section.drainTimeout) + GRACE_MARGIN
    grace_patch = _add("'/spec/terminationGracePeriodSeconds'", literal(grace))
    volume = _add_to(spec, path, "volumes", literal(VOLUME_SOURCE))
    mount = _add_to(_CONTAINER, _CONTAINER_PATH, "volumeMounts", literal(READ_ONLY_MOUNT))
    return (
        f"!variables.injectable ? [] : [{sidecar}, {volume}]"
        f" + variables.targets.map(i, {mount})"
        f" + variables.targets.map(i, {_pointer()})"
        " + (has(object.spec.terminationGracePeriodSeconds) && "
        f"object.spec.terminationGracePeriodSeconds >= {grace} ? [] : [{grace_patch}])"
    )
