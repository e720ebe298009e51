"""Child processes for the demo and the benchmarks: free ports, readiness, CPU and memory."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 20) -> None:
    """Return once 127.0.0.1:port accepts connections; RuntimeError if proc exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.05)


def memory_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """A /proc/PID/status memory field (VmRSS now, VmHWM peak), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    """The process's child pids."""
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def tree_memory_kib(pid: int) -> int:
    """VmRSS of the process and all its descendants, in KiB."""
    return memory_kib(pid) + sum(tree_memory_kib(child) for child in children(pid))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses):
    [0] the state (R, S, T stopped, Z zombie...), [11] and [12] user and system CPU ticks."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
