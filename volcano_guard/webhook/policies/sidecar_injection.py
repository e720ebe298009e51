"""Policy sidecarInjection: pods labelled `volcano-guard.io/inject: "true"` get the coalescing
sidecar, and their app containers are pointed at it. A hostNetwork pod is refused (by config,
injected with a warning): on the node's network its loopback port is open to the whole node.

The sidecar is a native sidecar by default (an init container with `restartPolicy: Always`,
placed first: it is up before the app starts and stops after it). At start it writes a
kubeconfig whose server is itself into a shared emptyDir; the chosen containers get
`--kubeconfig=<that file>` appended to their args (proxy-mode `args`, what Volcano's
controller-manager and scheduler take) or `KUBECONFIG` set (`env`). A pod that already has the
sidecar is left alone, so reinvocation and re-creation from an injected template are no-ops.

Outside this module the guard uses only what __all__ lists: POLICY, for the registry
(webhook.evaluation), and its config section, for the config (webhook.config).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from volcano_guard import __version__
from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonbody import object_at, shown
from volcano_guard.webhook.cel import all_of, kind_is, operation_is
from volcano_guard.webhook.policies.base import (
    INJECT,
    NOTHING_FOUND,
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

__all__ = ["POLICY", "SidecarInjectionConfig"]


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
HOST_NETWORK_RISK = (
    "the pod uses hostNetwork, so the sidecar's loopback port is the node's: "
    "every process on the node can reach it (it still requires the token of the "
    "kubeconfig it writes)"
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
    annotations = object_at(metadata, "annotations")
    config = settings(context.config)
    options, problems = _options(annotations, config)
    targets, problem = _targets(app, annotations)
    problems += [problem] if problem else []
    host_network = spec.get("hostNetwork") is True
    if host_network and config.hostNetwork == "refuse":
        problems.append(
            HOST_NETWORK_RISK + "; run it without hostNetwork, or set "
            "policies.sidecarInjection.hostNetwork: warn to inject anyway"
        )
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


POLICY = Policy(
    name=NAME,
    mode=lambda config: settings(config).mode,
    off="policies.sidecarInjection.mode: off",
    mutate=mutate,
    kinds=frozenset({POD}),
    scopes=scopes,
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
            _number(options["flush"]),
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


def _inject(
    spec: dict[str, Any], config: SidecarInjectionConfig, options: dict[str, Any]
) -> list[dict[str, Any]]:
    sidecar = sidecar_container(config, options, config.nativeSidecar)
    volume = {"name": VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
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
    mount = {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}
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
        env = {"name": "KUBECONFIG", "value": KUBECONFIG}
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
        "flush": config.flushInterval,
        "ack": config.ack,
        "mode": config.proxyMode,
        "drain": config.drainTimeout,
    }
    problems = []
    if FLUSH_INTERVAL in annotations:
        text = annotations[FLUSH_INTERVAL]
        try:
            value = float(text)
            if not 0.05 <= value <= 60:
                raise ValueError
            options["flush"] = value
        except (TypeError, ValueError):
            problems.append(
                f"annotation {FLUSH_INTERVAL} is {shown(text)}; allowed: seconds "
                'from 0.05 to 60, e.g. "1" or "0.5"'
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
                    f"annotation {key} is {shown(annotations[key])}; allowed: "
                    f"{' or '.join(allowed)}"
                )
    return options, problems


def _targets(app: list[Container], annotations: dict[str, Any]) -> tuple[list[Container], str]:
    wanted = annotations.get(PROXY_CONTAINERS)
    if wanted is None:
        return app, ""
    if not isinstance(wanted, str):
        return [], f"annotation {PROXY_CONTAINERS} is {shown(wanted)}, not a string"
    by_name = {c.name: c for c in app}
    chosen = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in by_name]
    if unknown:
        return [], (
            f"annotation {PROXY_CONTAINERS} names {', '.join(unknown)}, not containers "
            f"of this pod (it has {', '.join(by_name)})"
        )
    return [by_name[n] for n in chosen], ""


def _number(value: float) -> str:
    return f"{value:g}"
