"""`volcano-guard webhook` as a real process: serves, and on SIGTERM finishes in-flight work."""

import json
import signal
import socket
import ssl
import time

import pytest

from tests.builders import container, pod, review
from tests.conftest import HOSTNAME
from tests.processes import post_once, start_cli, tls_connect, wait_for_log


@pytest.fixture
def process(certs, tmp_path, request):
    delay = getattr(request, "param", "0")  # --shutdown-delay
    config = tmp_path / "config.yaml"
    config.write_text(
        "policies: {resourceRequests: {mode: enforce}, nodeName: {mode: off, "
        "bindingGuard: {mode: off}}, podGroups: {stampGenerationId: false, "
        "deleteGuard: {mode: off}}, queues: {mode: off}}\n"
    )
    proc = start_cli(
        "webhook",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        str(certs.cert_file),
        "--tls-key",
        str(certs.key_file),
        "--shutdown-delay",
        delay,
    )
    match = wait_for_log(proc, r"https://[^:]+:(\d+), metrics on http://[^:]+:(\d+)")
    yield proc, (int(match[1]), int(match[2]))
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_sigterm_lets_an_in_flight_request_finish_then_exits_0(process, certs):
    proc, (port, _) = process
    body = json.dumps(review(pod(container("c")), uid="in-flight")).encode()
    tls = tls_connect(certs.ca_file, port)
    tls.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    )
    tls.sendall(body[:100])
    time.sleep(0.3)  # the handler is now waiting for the rest of the body
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    tls.sendall(body[100:])
    response = b""
    while chunk := tls.recv(65536):
        response += chunk
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    answer = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert answer["response"]["uid"] == "in-flight"
    assert answer["response"]["allowed"] is False
    assert proc.wait(20) == 0


def test_new_connections_are_refused_after_shutdown(process, certs):
    proc, (port, _) = process
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    with pytest.raises(OSError):
        tls_connect(certs.ca_file, port)


def get(port: int, path: str) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
    response = b""
    while chunk := sock.recv(65536):
        response += chunk
    return response


def keep_alive_post(tls: ssl.SSLSocket, body: bytes) -> bytes:
    """One POST /validate on a kept-alive connection; the answer's head."""
    tls.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += tls.recv(65536)
    return head


@pytest.mark.parametrize("process", ["1.5"], indirect=True)
def test_after_sigterm_it_answers_unready_and_closing_for_the_shutdown_delay(process, certs):
    proc, (port, metrics_port) = process
    body = json.dumps(review(pod(container("c")), uid="late")).encode()
    tls = tls_connect(certs.ca_file, port)
    assert b"Connection: close" not in keep_alive_post(tls, body)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert get(metrics_port, "/readyz").startswith(b"HTTP/1.1 503")
    head = keep_alive_post(tls, body)  # the Service still leads here: answered, then closed
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head, head
    status, answer = post_once(certs.ca_file, port, "/validate", body)  # a new connection too
    assert status == 200 and answer["response"]["uid"] == "late"
    assert proc.wait(20) == 0
    assert time.monotonic() - sent >= 1.5


@pytest.mark.parametrize("process", ["30"], indirect=True)
def test_sigint_stops_at_once_whatever_the_shutdown_delay(process):
    proc, _ = process
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0


@pytest.mark.parametrize("delay", ["-1", "301", "soon"])
def test_a_shutdown_delay_out_of_range_exits_2_naming_it(delay, certs, capsys):
    from volcano_guard.cli import main

    tls = ["--tls-cert", str(certs.cert_file), "--tls-key", str(certs.key_file)]
    with pytest.raises(SystemExit) as exited:
        main(["webhook", *tls, "--shutdown-delay", delay])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--shutdown-delay" in line and delay in line, line


def test_metrics_port_serves_plain_http(process):
    _, (_, metrics_port) = process
    sock = socket.create_connection(("127.0.0.1", metrics_port), timeout=10)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    response = b""
    while chunk := sock.recv(65536):
        response += chunk
    assert response.startswith(b"HTTP/1.1 200")
    assert b"volcano_guard_admission_duration_seconds" in response


def test_tls_port_refuses_plain_http(process):
    _, (port, _) = process
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = sock.recv(100)
    assert not data.startswith(b"HTTP/1.1 200")


def test_with_client_ca_only_the_client_that_ca_signed_is_answered(certs, tmp_path):
    from volcano_guard.base.tls import client_context
    from volcano_guard.certs.generate import generate_client
    from volcano_guard.cli import main

    assert main(["certs", "client", "--out", str(tmp_path / "apiserver")]) == 0
    assert main(["certs", "client", "--out", str(tmp_path / "apiserver")]) == 1  # no --force
    apiserver = tmp_path / "apiserver"
    stranger = generate_client("kube-apiserver", tmp_path / "stranger")  # another CA
    proc = start_cli(
        "webhook",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        str(certs.cert_file),
        "--tls-key",
        str(certs.key_file),
        "--client-ca",
        str(apiserver / "client-ca.crt"),
        "--config",
        str(no_cluster_config(tmp_path)),
    )
    try:
        port = int(wait_for_log(proc, r"https://[^:]+:(\d+), metrics")[1])

        def answer(cert: object = None, key: object = None) -> bytes:
            context = client_context(certs.ca_file)
            if cert is not None:
                context.load_cert_chain(str(cert), str(key))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
                context.wrap_socket(sock, server_hostname=HOSTNAME) as tls,
            ):
                body = json.dumps(review(pod(container("c")))).encode()
                tls.sendall(
                    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
                    b"\r\n" % len(body) + body
                )
                return tls.recv(65536)

        assert answer(apiserver / "client.crt", apiserver / "client.key").startswith(
            b"HTTP/1.1 200"
        )
        for cert, key in ((None, None), (stranger.cert_file, stranger.key_file)):
            try:  # TLS 1.3: the server's verdict on the client arrives after the handshake
                refused = answer(cert, key)
            except (ssl.SSLError, ConnectionError) as exc:
                refused = repr(exc).encode()
            assert not refused.startswith(b"HTTP/"), refused
            assert b"CERTIFICATE" in refused.upper() or refused == b"", refused
    finally:
        proc.kill()
        proc.wait(10)


def test_a_client_ca_that_is_not_a_ca_bundle_exits_2_naming_it(certs, tmp_path, capsys):
    from volcano_guard.cli import main

    garbage = tmp_path / "client-ca.crt"
    garbage.write_text("garbage\n")
    for bad, said in (
        (garbage, "holds no PEM block"),
        (certs.cert_file, "holds a certificate that is not a CA"),
    ):  # a leaf
        code = main(
            [
                "webhook",
                "--tls-cert",
                str(certs.cert_file),
                "--tls-key",
                str(certs.key_file),
                "--client-ca",
                str(bad),
                "--config",
                str(no_cluster_config(tmp_path)),
            ]
        )
        assert code == 2
        assert f"--client-ca {bad}: {said}" in capsys.readouterr().err


def no_cluster_config(tmp_path):
    config = tmp_path / "no-cluster.yaml"
    config.write_text(
        "policies: {nodeName: {mode: off, bindingGuard: {mode: off}}, podGroups: "
        "{stampGenerationId: false, deleteGuard: {mode: off}}, queues: {mode: off}}\n"
    )
    return config
