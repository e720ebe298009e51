"""`HOST:PORT` listen addresses, as every volcano-guard server takes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Listen:
    host: str
    port: int


def parse_listen(text: str) -> Listen:
    """"HOST:PORT" (IPv6 as [::1]:PORT) -> Listen; ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return Listen(host.strip("[]") or "0.0.0.0", int(port))
