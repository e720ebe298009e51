"""`HOST:PORT` listen addresses, as every volcano-guard server takes them."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp.web import BaseSite


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """ "HOST:PORT" (IPv6 as [::1]:PORT) -> Listen; ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return Listen(host.strip("[]") or "0.0.0.0", int(port))


class AddressUnusable(OSError):
    """A listen address that cannot be bound; the message names the flag and the address."""


_BIND_WORDS = {
    errno.EADDRINUSE: "the address is already in use (another process listens there)",
    errno.EADDRNOTAVAIL: "this machine has no such address",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def unusable(flag: str, listen: Listen, exc: OSError) -> AddressUnusable:
    """exc, met binding listen (given as flag), in words."""
    words = _BIND_WORDS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return AddressUnusable(f"{flag} {listen}: {words}")


async def start_site(site: BaseSite, flag: str, listen: Listen) -> None:
    """Start an aiohttp site; AddressUnusable naming flag and address when it cannot bind."""
    try:
        await site.start()
    except OSError as exc:
        raise unusable(flag, listen, exc) from None


def listening_socket(flag: str, listen: Listen) -> socket.socket:
    """A socket bound to listen and listening, for a server that starts later; AddressUnusable
    naming flag and address when it cannot bind."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise unusable(flag, listen, exc) from None
    return sock
