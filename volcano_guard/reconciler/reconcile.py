"""One reconcile pass: read the config, make every owned object match it, keep the
certificates current. Synchronous (the `kubernetes` client); run on a thread, one at a time."""

from __future__ import annotations

import base64
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from volcano_guard.base.api_client import request_json
from volcano_guard.certs.plan import Lifetimes
from volcano_guard.reconciler import metrics
from volcano_guard.reconciler.discovery import served_apis
from volcano_guard.reconciler.objects import (
    AdmissionObjects,
    differs,
    spec_of,
    with_ca_bundles,
    without_ca_bundles,
)
from volcano_guard.webhook.admission_policies import PolicyApis
from volcano_guard.webhook.config import Config, ConfigError, parse_config
from volcano_guard.webhook.manifests import MUTATING, NAME, OWNED, VALIDATING, Owned
from volcano_guard.webhook.manifests import admission_objects as generate

log = logging.getLogger("volcano_guard.reconciler")
CONFIG_KEY = "config.yaml"
PAUSE_ANNOTATION = "volcano-guard.io/reconcile"  # "paused": write nothing (break-glass, uninstall)
CERT_MANAGER_ANNOTATION = "cert-manager.io/inject-ca-from"
LEASE = "volcano-guard-reconciler"
INTERVAL = 2.0  # seconds between passes: an edited or deleted object is back within about this
DISCOVERY_EVERY = 60.0  # seconds between reads of what the cluster serves
# On every owned object, so `kubectl delete ... -l` finds them all (docs/install.md, uninstall).
LABELS = {
    "app.kubernetes.io/name": "volcano-guard",
    "app.kubernetes.io/part-of": "volcano-guard",
    "app.kubernetes.io/managed-by": "volcano-guard-reconciler",
}


@dataclass(frozen=True)
class Settings:
    namespace: str
    service: str = "volcano-guard"
    config_map: str = "volcano-guard-config"
    ca_secret: str = "volcano-guard-ca"
    tls_secret: str = "volcano-guard-tls"
    gitops: bool = False  # report what differs, write no admission object
    # Who keeps the certificates and caBundles: "self" (the certs logic, here), "cert-manager"
    # (its cainjector, told by an annotation), "external" (someone else; nothing done here).
    certificates: str = "self"
    lifetimes: Lifetimes = field(default_factory=Lifetimes)


def unexpired(pem: bytes) -> bytes:
    """The certificates of a PEM bundle that have not expired (b"" if it does not parse): an
    expired CA verifies nothing, and a caBundle made of it alone would refuse every call."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return b""
    now = datetime.datetime.now(datetime.UTC)
    return b"".join(
        c.public_bytes(Encoding.PEM) for c in certificates if c.not_valid_after_utc > now
    )


def for_cert_manager(obj: dict[str, Any], namespace: str, tls_secret: str) -> dict[str, Any]:
    """A webhook configuration annotated for cert-manager's cainjector, which then fills its
    caBundles from the serving Certificate's Secret; any other object as it is."""
    if obj["kind"] not in (MUTATING, VALIDATING):
        return obj
    source = f"{namespace}/{tls_secret}"
    metadata = {**obj["metadata"], "annotations": {CERT_MANAGER_ANNOTATION: source}}
    return {**obj, "metadata": metadata}


class ConfigProblem(Exception):
    """The ConfigMap holds no usable config; the message says why, in one line."""


def write_order(desired: Mapping[Owned, object]) -> list[Owned]:
    """OWNED in the order a pass writes: the policies and bindings the config calls for, then
    the webhook configurations, then what it no longer calls for. A scope leaves the
    registrations only once the policy that takes it over is written, and a policy goes only
    once the registrations have taken its scope back, so no request falls between the two."""
    registrations = [owned for owned in OWNED if owned.kind in (MUTATING, VALIDATING)]
    policies = [owned for owned in OWNED if owned not in registrations]
    return [
        *(owned for owned in policies if owned in desired),
        *registrations,
        *(owned for owned in policies if owned not in desired),
    ]


class Reconciler:
    """Holds the last good config and what it last put in step; reconcile_once() makes one
    pass. Only the thread running passes touches it."""

    def __init__(
        self,
        api_client: Any,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api, self.settings = api_client, settings
        self._objects = AdmissionObjects(api_client)
        self._clock = clock
        # Called (on the pass's thread) with each config accepted.
        self.on_config: Callable[[Config], None] = lambda config: None
        self.config: Config | None = None  # the last good config
        self._config_text: str | None = None
        self._problem: str | None = None
        self._paused = False
        self._in_step: dict[Owned, dict[str, Any]] = {}  # what each object was last put to
        self._out_of_step: set[Owned] = set()
        self._served: PolicyApis | None = None
        self._served_at = -DISCOVERY_EVERY

    @property
    def paused(self) -> bool:
        return self._paused

    def reconcile_once(self) -> bool:
        """One pass; True when everything matched the config at its end."""
        config = self._read_config()
        if config is None or self._paused:
            return False
        ok = self._reconcile_objects(config)
        # In GitOps mode too: the caBundles are the one thing the operator's objects leave out.
        ok = self._ensure_certificates() and ok
        if ok:
            metrics.LAST_SUCCESS.set(time.time())
        return ok

    # The config

    def _read_config(self) -> Config | None:
        """The config to reconcile to: the ConfigMap's if good, else the last good one (None
        before any). Pausing is read here too."""
        try:
            configmap = self._read_configmap()
            paused = (configmap["metadata"].get("annotations") or {}).get(PAUSE_ANNOTATION)
            self._set_paused(paused == "paused")
            text = (configmap.get("data") or {}).get(CONFIG_KEY)
            if text is None:
                raise ConfigProblem(f"has no {CONFIG_KEY} key")
            if text != self._config_text:
                self._accept(text)
        except ConfigProblem as exc:
            self._refuse(str(exc))
        return self.config

    def _read_configmap(self) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            return dict(
                request_json(
                    self._api,
                    "GET",
                    f"/api/v1/namespaces/{self.settings.namespace}/configmaps/"
                    f"{self.settings.config_map}",
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise ConfigProblem("does not exist") from None
            raise

    def _accept(self, text: str) -> None:
        try:
            config = parse_config(text)
        except ConfigError as exc:
            raise ConfigProblem(f"{CONFIG_KEY}: {exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigProblem(f"{CONFIG_KEY}: not YAML: {str(exc).splitlines()[0]}") from None
        self.config, self._config_text = config, text
        metrics.CONFIG_VALID.set(1)
        if self._problem is not None:
            self._event("Normal", "ConfigAccepted", "the config parses again and is in force")
        self._problem = None
        log.info("config %s accepted", self._where())
        self.on_config(config)

    def _refuse(self, problem: str) -> None:
        if problem != self._problem:
            self._problem = problem
            metrics.CONFIG_REJECTED.inc()
            kept = "the last good config stays in force" if self.config else "nothing is written"
            message = f"config {self._where()} {problem}; {kept}"
            log.error("%s", message)
            self._event("Warning", "ConfigRejected", message)
        # Last: whoever sees the gauge at 0 finds the refusal already logged and in an Event.
        metrics.CONFIG_VALID.set(0)

    def _set_paused(self, paused: bool) -> None:
        if paused != self._paused:
            log.warning(
                "%s %s=paused: %s",
                self._where(),
                PAUSE_ANNOTATION,
                "writing nothing until it is removed" if paused else "removed, reconciling",
            )
        self._paused = paused
        metrics.PAUSED.set(1 if paused else 0)

    def _where(self) -> str:
        return f"ConfigMap {self.settings.namespace}/{self.settings.config_map}"

    # The admission objects

    def _reconcile_objects(self, config: Config) -> bool:
        served = self._served_apis()
        # Read and written at the versions served; an object of a kind no longer served (or
        # that the config no longer calls for) is deleted where it is still reachable.
        self._objects.apis = served
        desired = generate(config, self.settings.namespace, self.settings.service, served=served)
        trusted = self._trusted_cas()
        for owned in write_order(desired):
            live = self._objects.get(owned)
            want = desired.get(owned)
            if want is not None:
                want = self._with_certificates(with_ca_bundles(want, live, trusted))
                want["metadata"] = {**want["metadata"], "labels": LABELS}
            self._bring_in_step(owned, want, live)
        metrics.OUT_OF_STEP.set(len(self._out_of_step))
        return not self._out_of_step

    def _bring_in_step(
        self, owned: Owned, want: dict[str, Any] | None, live: dict[str, Any] | None
    ) -> None:
        if (want is None and live is None) or (
            want is not None and live is not None and not self._differs(want, live)
        ):
            self._mark(owned, want, in_step=True)
            return
        reason = self._why(owned, want, live)
        if reason in ("drift", "missing"):
            metrics.DRIFT.labels(owned.kind, owned.name).inc()
        if self.settings.gitops:
            self._mark(owned, want, in_step=False)
            return
        if want is None:
            self._objects.delete(owned)
        elif live is None:
            self._objects.create(want)
        else:
            self._objects.replace(want, live)
        metrics.WRITES.labels(owned.kind, reason).inc()
        if reason != "config":
            message = f"{owned.kind} {owned.name}: {reason}, restored to the config"
            log.warning("%s", message)
            self._event("Warning", "DriftRepaired", message)
        self._mark(owned, want, in_step=True)

    def _why(self, owned: Owned, want: dict[str, Any] | None, live: dict[str, Any] | None) -> str:
        if want is None:
            return "unused"
        # The config did not change it (the certificates may have): someone else did.
        if without_ca_bundles(self._in_step.get(owned)) == without_ca_bundles(want):
            return "missing" if live is None else "drift"
        return "config"

    def _mark(self, owned: Owned, want: dict[str, Any] | None, *, in_step: bool) -> None:
        if want is not None and in_step:
            self._in_step[owned] = want
        if in_step:
            self._out_of_step.discard(owned)
        elif owned not in self._out_of_step:
            self._out_of_step.add(owned)
            log.warning("%s %s differs from the config (GitOps: left as it is)", *owned)

    @staticmethod
    def _differs(want: dict[str, Any], live: dict[str, Any]) -> bool:
        labels = want["metadata"].get("labels") or {}
        annotations = want["metadata"].get("annotations") or {}
        metadata = live.get("metadata") or {}
        return (
            differs(spec_of(want), spec_of(live))
            or differs(labels, metadata.get("labels") or {})
            or differs(annotations, metadata.get("annotations") or {})
        )

    def _with_certificates(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.settings.certificates != "cert-manager":
            return obj
        return for_cert_manager(obj, self.settings.namespace, self.settings.tls_secret)

    def _served_apis(self) -> PolicyApis:
        if self._served is None or self._clock() - self._served_at >= DISCOVERY_EVERY:
            served = served_apis(self._api)
            if served != self._served:
                log.info(
                    "the cluster serves ValidatingAdmissionPolicies %s, "
                    "MutatingAdmissionPolicies %s",
                    served.validating or "not at all",
                    served.mutating or "not at all",
                )
            self._served, self._served_at = served, self._clock()
        return self._served

    def _trusted_cas(self) -> bytes:
        """The CAs every caBundle should hold: the CA Secret's (or, under cert-manager, the
        serving Secret's ca.crt); b"" when there is none yet."""
        from kubernetes.client.exceptions import ApiException

        secret = (
            self.settings.ca_secret
            if self.settings.certificates == "self"
            else self.settings.tls_secret
        )
        try:
            found = request_json(
                self._api, "GET", f"/api/v1/namespaces/{self.settings.namespace}/secrets/{secret}"
            )
        except ApiException as exc:
            if exc.status == 404:
                return b""
            raise
        encoded = (found.get("data") or {}).get("ca.crt")
        return unexpired(base64.b64decode(encoded)) if encoded else b""

    # The certificates

    def _ensure_certificates(self) -> bool:
        if self.settings.certificates != "self":
            return True
        from volcano_guard.certs.ensure import Target, ensure
        from volcano_guard.certs.generate import CertsError

        target = Target(
            self.settings.namespace,
            self.settings.service,
            self.settings.ca_secret,
            self.settings.tls_secret,
            (NAME,),
            (NAME,),
        )
        try:
            ensure(
                self._api,
                target,
                self.settings.lifetimes,
                now=lambda: datetime.datetime.now(datetime.UTC),
                said=_said_about_certificates,
            )
        except CertsError as exc:
            metrics.ERRORS.labels("certificates").inc()
            log.error("certificates: %s", exc)
            return False
        return True

    # Events

    def _event(self, kind: str, reason: str, message: str) -> None:
        """An Event on the config ConfigMap, where `kubectl describe` shows it; best effort."""
        from kubernetes.client.exceptions import ApiException

        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = self.settings.namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.settings.config_map}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": self.settings.config_map,
                "namespace": namespace,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "volcano-guard-reconciler"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            request_json(self._api, "POST", f"/api/v1/namespaces/{namespace}/events", body=body)
        except (ApiException, ConnectionError) as exc:
            log.warning("could not record Event %s: %s", reason, exc)


def uninstall(
    api_client: Any,
    settings: Settings,
    interval: float = INTERVAL,
    said: Callable[[str], None] = lambda line: None,
) -> None:
    """Pause the running reconciler (the config ConfigMap's annotation), then delete every
    owned object: the first step of an uninstall, so nothing re-creates them and no
    registration outlives the webhook it calls. RuntimeError when some will not go."""
    from kubernetes.client.exceptions import ApiException

    path = f"/api/v1/namespaces/{settings.namespace}/configmaps/{settings.config_map}"
    pause = {"metadata": {"annotations": {PAUSE_ANNOTATION: "paused"}}}
    try:
        request_json(
            api_client, "PATCH", path, body=pause, content_type="application/merge-patch+json"
        )
        said(f"paused the reconciler ({PAUSE_ANNOTATION}=paused on {settings.config_map})")
        time.sleep(2 * interval)  # a pass already under way ends
    except ApiException as exc:
        if exc.status != 404:  # no config: no reconciler will write anything
            raise
    objects = AdmissionObjects(api_client, served_apis(api_client))
    for _ in range(3):
        for owned in OWNED:
            objects.delete(owned)
        time.sleep(interval)
        left = [owned for owned in OWNED if objects.get(owned) is not None]
        if not left:
            said("deleted the guard's webhook configurations, policies and bindings")
            _delete_made_in_namespace(api_client, settings)
            said(f"deleted what it made in {settings.namespace}: certificates, node states, Lease")
            return
    raise RuntimeError(f"still there after three tries: {', '.join(map(' '.join, left))}")


def _delete_made_in_namespace(api_client: Any, settings: Settings) -> None:
    """The namespaced objects the reconciler made, which no install renders (so `helm
    uninstall` would leave them): its Secrets, the node-state ConfigMaps, its Lease. Its Events
    expire by themselves."""
    from kubernetes.client.exceptions import ApiException

    from volcano_guard.webhook.node_states import NAMES

    core = f"/api/v1/namespaces/{settings.namespace}"
    paths = [f"{core}/configmaps/{name}" for name in NAMES]
    if settings.certificates == "self":
        paths += [f"{core}/secrets/{settings.ca_secret}", f"{core}/secrets/{settings.tls_secret}"]
    paths.append(f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{LEASE}")
    for path in paths:
        try:
            request_json(api_client, "DELETE", path)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _said_about_certificates(step: str, why: str) -> None:
    if step == "refuse":  # someone wrote a CA into the CA Secret: an alert, not only a log
        metrics.CA_REFUSALS.inc()
        log.warning("certificates: %s: %s", step, why)
    else:
        log.info("certificates: %s: %s", step, why)
