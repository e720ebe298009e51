"""The sidecar's token and loopback certificate outlive its process: a restarted sidecar reuses
what it wrote to the pod's volume when that is all there, its own and valid, and makes new ones
otherwise. (tests/attack/test_sidecar_restart.py restarts the real process under a client.)"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
import urllib3
from cryptography import x509
from kubernetes import client, config
from yarl import URL

from tests.threaded import on_thread
from volcano_guard.base.kubeconfig import Cluster, write_kubeconfig
from volcano_guard.base.tls import client_context
from volcano_guard.certs.generate import generate_loopback
from volcano_guard.sidecar.identity import Identity, load_or_make
from volcano_guard.sidecar.service import SidecarSettings, running
from volcano_guard_sandbox.apiserver.runner import SandboxThread


def first_run(folder: Path) -> tuple[Path, Identity]:
    """A kubeconfig and its identity as a sidecar's first run leaves them."""
    kubeconfig = folder / "kubeconfig"
    identity = load_or_make(kubeconfig)
    write_kubeconfig(
        kubeconfig, "https://127.0.0.1:8001", token=identity.token, ca_file=identity.ca_file
    )
    return kubeconfig, identity


def files(identity: Identity) -> list[bytes]:
    return [path.read_bytes() for path in (identity.ca_file, identity.cert_file, identity.key_file)]


def test_a_restart_reuses_the_token_and_certificate_it_wrote(tmp_path: Path) -> None:
    kubeconfig, before = first_run(tmp_path)
    written = files(before)
    after = load_or_make(kubeconfig)
    assert after == before
    assert files(after) == written
    assert before.key_file.stat().st_mode & 0o777 == 0o600


def other_key(identity: Identity) -> None:
    stranger = generate_loopback(identity.key_file.parent / "elsewhere", "x")
    os.replace(stranger.key_file, identity.key_file)


def other_ca(identity: Identity) -> None:
    stranger = generate_loopback(identity.key_file.parent / "elsewhere", "x")
    os.replace(stranger.ca_file, identity.ca_file)


def key_open_to_others(identity: Identity) -> None:
    identity.key_file.chmod(0o644)


def key_owned_by_someone_else(identity: Identity) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file away")
    os.chown(identity.key_file, 12345, -1)


def symlinked_key(identity: Identity) -> None:
    target = identity.key_file.with_name("moved.key")
    os.replace(identity.key_file, target)
    identity.key_file.symlink_to(target)


def guessable_token(identity: Identity) -> None:
    kubeconfig = identity.key_file.parent / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:8001", token="guess", ca_file=identity.ca_file)


def no_ca_named(identity: Identity) -> None:
    kubeconfig = identity.key_file.parent / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:8001", token=identity.token)


def not_json(identity: Identity) -> None:
    (identity.key_file.parent / "kubeconfig").write_text("{")


@pytest.mark.parametrize(
    "spoil",
    [
        other_key,
        other_ca,
        key_open_to_others,
        key_owned_by_someone_else,
        symlinked_key,
        guessable_token,
        no_ca_named,
        not_json,
    ],
)
def test_what_is_not_its_own_or_not_whole_is_replaced(
    tmp_path: Path, spoil: Callable[[Identity], None], caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig, before = first_run(tmp_path)
    spoil(before)
    with caplog.at_level(logging.WARNING, "volcano_guard.sidecar"):
        after = load_or_make(kubeconfig)
    assert after.token != before.token
    assert [record.message for record in caplog.records if "not reusing" in record.message]
    assert not after.key_file.is_symlink()
    assert after.key_file.stat().st_mode & 0o777 == 0o600
    assert load_or_make(kubeconfig).token != after.token  # nothing names the new token yet


def test_a_certificate_near_its_end_is_replaced(tmp_path: Path) -> None:
    kubeconfig, before = first_run(tmp_path)
    ends = x509.load_pem_x509_certificate(before.cert_file.read_bytes()).not_valid_after_utc
    assert load_or_make(kubeconfig, now=ends - datetime.timedelta(days=2)).token == before.token
    assert load_or_make(kubeconfig, now=ends - datetime.timedelta(hours=12)).token != before.token


async def test_a_client_holding_the_first_runs_ca_and_token_is_served_by_the_second(
    tmp_path: Path,
) -> None:
    """As client-go does: the CA is read once, into memory, with the token beside it."""
    kubeconfig = tmp_path / "shared" / "kubeconfig"
    settings = SidecarSettings(listen_port=0, metrics_port=0, write_kubeconfig=str(kubeconfig))
    with SandboxThread() as sandbox:
        async with running(Cluster(sandbox.url), settings) as first:
            assert first.ca_file is not None
            token = first.proxy.client_token
            write_kubeconfig(kubeconfig, first.url, token=token, ca_file=first.ca_file)
            held = client_context(first.ca_file)
        async with (
            running(Cluster(sandbox.url), settings) as second,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=held)) as session,
        ):
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(f"{second.url}/api/v1/namespaces", headers=headers) as answer:
                assert answer.status == 200


def test_a_stranger_on_the_port_while_the_sidecar_is_down_gets_no_token(tmp_path: Path) -> None:
    """While the sidecar restarts its port is free: a container of the pod that does not mount
    the shared volume (or a process of the node, for a hostNetwork pod) can listen there. It has
    no key for the certificate the app trusts, so the app's client refuses it before sending the
    token."""
    kubeconfig = tmp_path / "shared" / "kubeconfig"
    settings = SidecarSettings(listen_port=0, metrics_port=0, write_kubeconfig=str(kubeconfig))
    with SandboxThread() as sandbox:
        with on_thread(lambda: running(Cluster(sandbox.url), settings)) as sidecar:
            token = sidecar.proxy.client_token
            write_kubeconfig(kubeconfig, sidecar.url, token=token, ca_file=sidecar.ca_file)
            api = config.new_client_from_config(config_file=str(kubeconfig))
            api.configuration.retries = 0
            core = client.CoreV1Api(api)
            assert core.list_namespace(_request_timeout=5).items == []
            api.rest_client.pool_manager.clear()  # the sidecar's shutdown need not wait for it
        heard = Impostor(tmp_path / "stranger", int(URL(sidecar.url).port or 0))
        heard.start()
        with pytest.raises(urllib3.exceptions.HTTPError):
            core.list_namespace(_request_timeout=5)
        heard.join(5)
    assert heard.handshakes == 1 and heard.received == b""


class Impostor(threading.Thread):
    """Accepts one TLS connection on the sidecar's port with a loopback certificate of a CA of
    its own (the best a stranger without the sidecar's key can do); what it read: `received`."""

    def __init__(self, folder: Path, port: int) -> None:
        super().__init__(daemon=True)
        made = generate_loopback(folder, "stranger")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(made.cert_file, made.key_file)
        self.listener = socket.create_server(("127.0.0.1", port))
        self.received, self.handshakes = b"", 0

    def run(self) -> None:
        with self.listener:
            self.listener.settimeout(10)
            conn, _ = self.listener.accept()
            self.handshakes += 1
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.settimeout(5)
                    self.received = tls.recv(65536)
            except OSError:  # ssl.SSLError included: the client refused the certificate
                pass
