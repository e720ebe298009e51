"""Helpers for tests that run volcano-guard as a real process (or, for a command that ends,
as typed in this one)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from tests.conftest import HOSTNAME
from volcano_guard.base.tls import client_context
from volcano_guard.certs.generate import generate
from volcano_guard.cli import main

# Debian's faketime: preloaded into a process (LD_PRELOAD, FAKETIME="+60s"), it shifts that
# process's clock alone. None where it is not installed (.ci/run installs it).
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)


def admissions_counted(metrics: str) -> float:
    """How many admissions a webhook answered, read from its /metrics text."""
    for line in metrics.splitlines():
        if line.startswith("volcano_guard_admission_duration_seconds_count"):
            return float(line.split()[-1])
    return 0.0


async def post_review(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes
) -> int:
    """One POST /validate of body on a kept-alive connection; the answer's status code."""
    writer.write(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return status


def run_here(*argv: str) -> subprocess.CompletedProcess[str]:
    """`volcano-guard ARGV` run to its end in this interpreter: its exit code and what it
    printed. A command that ends (check, audit) needs no process of its own, and a new
    interpreter with its kubernetes import costs 2 to 5 s a run."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as refused:  # argparse's refusals
            code = int(refused.code or 0)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "volcano_guard.cli", *args], stderr=subprocess.PIPE, text=True
    )


def wait_for_log(proc: subprocess.Popen[str], pattern: str, timeout: float = 20) -> re.Match:
    """The first stderr line matching pattern (the process logs its address when ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.stderr is not None  # started with stderr=PIPE
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no log line matching {pattern!r}")


def tls_connect(ca_file: Path, port: int) -> ssl.SSLSocket:
    """A verified TLS connection to a webhook on loopback (its certificate names HOSTNAME)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return client_context(ca_file).wrap_socket(sock, server_hostname=HOSTNAME)


def post_once(ca_file: Path, port: int, path: str, body: bytes) -> tuple[int, dict]:
    """POST a JSON body on a connection of its own; (HTTP status, decoded answer)."""
    with tls_connect(ca_file, port) as tls:
        tls.sendall(
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), len(body)) + body
        )
        response = b""
        while chunk := tls.recv(65536):
            response += chunk
    head, _, payload = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


class WebhookProcess(NamedTuple):
    pid: int
    port: int
    metrics_port: int
    ca_file: Path


@contextmanager
def webhook_process(config: dict[str, Any], *args: str) -> Iterator[WebhookProcess]:
    """`volcano-guard webhook` on loopback with fresh certificates and config (and args),
    serving inside the block, terminated after it."""
    work = Path(tempfile.mkdtemp(prefix="webhook-"))
    made = generate("volcano-guard", "volcano-guard", work)
    config_file = work / "config.yaml"
    config_file.write_text(json.dumps(config))
    listening = ("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
    tls = ("--tls-cert", str(made.cert_file), "--tls-key", str(made.key_file))
    proc = start_cli("webhook", "--config", str(config_file), *listening, *tls, *args)
    try:
        found = wait_for_log(proc, r"https://[^:]+:(\d+), metrics on http://[^:]+:(\d+)", 60)
        yield WebhookProcess(proc.pid, int(found[1]), int(found[2]), made.ca_file)
    finally:
        proc.terminate()
        proc.wait(30)
