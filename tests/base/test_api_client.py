"""The kubernetes client as the commands use it: a timeout on every call, no retries behind the
caller's back, and an unreachable API server named in one line."""

import logging
import socket
import threading
import time

import pytest
from kubernetes import client

from volcano_guard.base import api_client as api_client_module
from volcano_guard.base.api_client import APIServerUnreachable, api_client
from volcano_guard.base.informer import Informer
from volcano_guard.base.kubeconfig import Cluster
from volcano_guard.cli import main
from volcano_guard_sandbox.processes import free_port


@pytest.fixture
def silent_server():
    """Accepts connections and never answers a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for connection in accepted:
        connection.close()


def test_a_silent_server_is_given_up_on_after_the_read_timeout(silent_server, monkeypatch):
    monkeypatch.setattr(api_client_module, "READ_TIMEOUT", 0.5)
    api = client.CoreV1Api(api_client(Cluster(silent_server)))
    started = time.monotonic()
    with pytest.raises(APIServerUnreachable) as error:
        api.list_node()
    assert time.monotonic() - started < 3  # one try, not urllib3's three
    assert str(error.value) == f"the API server {silent_server} did not answer within 0.5s"


def test_a_refused_connection_is_named_at_once_and_not_retried(caplog):
    server = f"http://127.0.0.1:{free_port()}"
    api = client.CoreV1Api(api_client(Cluster(server)))
    with caplog.at_level(logging.WARNING), pytest.raises(APIServerUnreachable) as error:
        api.list_node()
    assert str(error.value) == f"the API server {server} cannot be reached: connection refused"
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


def test_a_one_shot_command_against_a_silent_server_exits_2_naming_it(
    silent_server, tmp_path, monkeypatch, capsys
):
    from volcano_guard.base.kubeconfig import write_kubeconfig

    monkeypatch.setattr(api_client_module, "READ_TIMEOUT", 0.5)
    write_kubeconfig(tmp_path / "kubeconfig", silent_server)
    assert main(["audit", "--kubeconfig", str(tmp_path / "kubeconfig")]) == 2
    assert capsys.readouterr().err.strip() == (
        "volcano-guard audit: cannot read the cluster: listing nodes: the API server "
        f"{silent_server} did not answer within 0.5s"
    )


def test_an_informer_logs_each_failure_once_and_backs_off(caplog):
    server = f"http://127.0.0.1:{free_port()}"
    informer = Informer(
        "nodes", client.CoreV1Api(api_client(Cluster(server))).list_node, lambda node: node
    )
    with caplog.at_level(logging.INFO):
        informer.start()
        time.sleep(1.7)
        informer.stop()
    lines = [r.getMessage() for r in caplog.records]
    failures = [line for line in lines if "list/watch failed" in line]
    # Tries at 0, 0.5 and 1.5 s: one line each, and nothing from urllib3.
    assert 2 <= len(failures) <= 3, lines
    assert all(f"the API server {server} cannot be reached" in line for line in failures)
    assert not [line for line in lines if "Retrying" in line]


def test_https_to_a_server_that_speaks_plain_http_is_a_named_tls_failure():
    import http.server

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(APIServerUnreachable) as error:
            client.CoreV1Api(api_client(Cluster(url))).list_node()
    finally:
        server.shutdown()
    assert str(error.value).startswith(f"the API server {url} failed TLS: ")
    assert "\n" not in str(error.value)
