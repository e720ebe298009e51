"""Where a webhook's Service leads, as kube-apiserver and kube-proxy take it there.

kube-apiserver calls a `clientConfig.service` webhook at the Service's ClusterIP by default
(aggregator routing off) and keeps those connections alive in one pool for the Service;
kube-proxy sends each new connection to one ready endpoint, chosen at random, and an
established connection stays with the endpoint it reached, even after that endpoint leaves the
list. So a rolling update meets both: new connections only to ready replicas, a kept-alive one
to a replica that is shutting down.

The sandbox plays that with a resolver: the webhook's URL names the Service (`NAME.NAMESPACE.svc`),
its client pools connections by that name, and each new connection resolves to one endpoint of
the current list. Whoever plays the endpoints controller (a test, the install harness) sets the
list; it is an immutable mapping swapped whole, read by the sandbox's loop on another thread.
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Iterable, Mapping, Sequence

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

Address = tuple[str, int]  # (host, port) of one endpoint
ServiceKey = tuple[str, str, int]  # (namespace, name, port) of clientConfig.service
SUFFIX = ".svc"


def service_host(namespace: str, name: str) -> str:
    """The DNS name kube-apiserver calls a service webhook by (and verifies the certificate for)."""
    return f"{name}.{namespace}{SUFFIX}"


class ServiceEndpoints:
    """Each Service's ready endpoints; set() replaces one Service's list."""

    def __init__(self, services: Mapping[ServiceKey, Iterable[Address]] | None = None) -> None:
        self._current: Mapping[ServiceKey, tuple[Address, ...]] = {
            key: tuple(addresses) for key, addresses in (services or {}).items()
        }

    def set(self, key: ServiceKey, addresses: Iterable[Address]) -> None:
        self._current = {**self._current, key: tuple(addresses)}

    def get(self, key: ServiceKey) -> tuple[Address, ...] | None:
        """The Service's endpoints, empty when none is ready; None when it is not mapped."""
        return self._current.get(key)


class ServiceResolver(AbstractResolver):
    """Resolves `NAME.NAMESPACE.svc` to one of the Service's endpoints per connection (as
    kube-proxy does); every other name as the system does."""

    def __init__(self, endpoints: ServiceEndpoints) -> None:
        self._endpoints = endpoints
        self._system = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        key = _service_key(host, port)
        addresses = self._endpoints.get(key) if key else None
        if addresses is None:
            return await self._system.resolve(host, port, family)
        if not addresses:  # a ClusterIP with no ready endpoint rejects the connection
            raise OSError(errno.ECONNREFUSED, "connection refused")
        target_host, target_port = random.choice(addresses)
        return [_result(host, target_host, target_port)]

    async def close(self) -> None:
        await self._system.close()


def _service_key(host: str, port: int) -> ServiceKey | None:
    name, dot, namespace = host.removesuffix(SUFFIX).partition(".")
    if not host.endswith(SUFFIX) or not dot or "." in namespace:
        return None
    return (namespace, name, port)


def _result(hostname: str, host: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return ResolveResult(
        hostname=hostname,
        host=host,
        port=port,
        family=family,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )


def grouped(pairs: Sequence[tuple[ServiceKey, Address]]) -> dict[ServiceKey, list[Address]]:
    """`--service` given once per endpoint: each Service with its endpoints, in order."""
    services: dict[ServiceKey, list[Address]] = {}
    for key, address in pairs:
        services.setdefault(key, []).append(address)
    return services
