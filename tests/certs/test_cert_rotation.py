"""Certificate rotation and live reload: a TLS client keeps connecting through the swap."""

import asyncio
import datetime
import socket
import ssl

import pytest
from cryptography import x509

from tests.conftest import HOSTNAME, NAMESPACE, SERVICE
from volcano_guard.base.durations import parse_duration
from volcano_guard.base.listen import Listen
from volcano_guard.base.metrics import REGISTRY
from volcano_guard.base.tls import client_context, server_context
from volcano_guard.certs.generate import generate
from volcano_guard.certs.reload import CertReloader
from volcano_guard.certs.rotate import rotate
from volcano_guard.cli import main
from volcano_guard.webhook.config import config_from_dict
from volcano_guard.webhook.server import running


def serial(path):
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_nothing_is_renewed_far_from_expiry(tmp_path):
    made = generate(SERVICE, NAMESPACE, tmp_path, days=90)
    before = serial(made.cert_file)
    done = rotate(tmp_path, parse_duration("720h"))
    assert not done.leaf_renewed and not done.ca_rotated
    assert serial(made.cert_file) == before


def test_near_expiry_the_ca_rotates_with_an_overlap_and_the_leaf_keeps_its_names(tmp_path):
    made = generate(SERVICE, NAMESPACE, tmp_path, days=90)
    ca = x509.load_pem_x509_certificate(made.ca_file.read_bytes())
    assert not rotate(tmp_path, parse_duration("30d")).leaf_renewed  # 90 days left
    done = rotate(tmp_path, parse_duration("100d"))  # both expire within 100 days
    assert done.ca_rotated and done.leaf_renewed and done.bundle_size == 2
    bundle = x509.load_pem_x509_certificates(made.ca_file.read_bytes())
    leaf = x509.load_pem_x509_certificate(made.cert_file.read_bytes())
    leaf.verify_directly_issued_by(bundle[0])  # the new CA signs the new leaf
    assert bundle[1].serial_number == ca.serial_number  # the old CA stays trusted meanwhile
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{SERVICE}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)


def test_an_expired_old_ca_leaves_the_bundle(tmp_path):
    generate(SERVICE, NAMESPACE, tmp_path, days=10)
    rotate(tmp_path, parse_duration("20d"))  # rotates: bundle new + old
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=11)
    done = rotate(tmp_path, parse_duration("1h"), now=later)
    assert done.bundle_size == 1


def test_cli_rotate_and_bad_duration(tmp_path, capsys):
    generate(SERVICE, NAMESPACE, tmp_path, days=30)
    assert main(["certs", "rotate", "--dir", str(tmp_path), "--force"]) == 0
    assert "serving cert renewed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["certs", "rotate", "--dir", str(tmp_path), "--renew-before", "soon"])
    assert exited.value.code == 2
    assert "'soon' is not a duration" in capsys.readouterr().err
    assert main(["certs", "rotate", "--dir", str(tmp_path / "missing")]) == 1
    assert f"{tmp_path / 'missing' / 'ca.crt'}: no such file" in capsys.readouterr().err


def handshake_serial(port, ca_file):
    context = client_context(ca_file)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=HOSTNAME) as tls,
    ):
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


async def test_a_renewed_cert_is_served_without_restart_and_no_handshake_fails(tmp_path):
    made = generate(SERVICE, NAMESPACE, tmp_path, days=30)
    old_serial = serial(made.cert_file)
    tls = server_context(made.cert_file, made.key_file)
    reloader = CertReloader(tls, made.cert_file, made.key_file)
    config = config_from_dict(
        {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}}}
    )
    async with running(config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls) as (port, _):
        watcher = asyncio.create_task(reloader.watch(interval=0.02))
        seen, failures = [], []

        async def client():
            while True:
                try:
                    seen.append(await asyncio.to_thread(handshake_serial, port, made.ca_file))
                except (ssl.SSLError, OSError) as exc:
                    failures.append(exc)
                await asyncio.sleep(0.005)

        task = asyncio.create_task(client())
        await asyncio.sleep(0.2)
        rotate(tmp_path, force_leaf=True)
        new_serial = serial(made.cert_file)
        for _ in range(300):
            if seen and seen[-1] == new_serial:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        watcher.cancel()
    assert old_serial in seen and seen[-1] == new_serial
    assert failures == []
    assert reloader.reloads == 1
    expiry = REGISTRY.get_sample_value("volcano_guard_cert_expiry_timestamp_seconds")
    leaf = x509.load_pem_x509_certificate(made.cert_file.read_bytes())
    assert expiry == pytest.approx(leaf.not_valid_after_utc.timestamp())


def staged_renewal(served, staging):
    """A renewed leaf (same CA) made beside the served files, not yet written over them."""
    staging.mkdir()
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        (staging / name).write_bytes((served / name).read_bytes())
    rotate(staging, force_leaf=True)
    return (staging / "tls.crt").read_bytes(), (staging / "tls.key").read_bytes()


def other_key(tmp_path):
    return generate(SERVICE, NAMESPACE, tmp_path / "unrelated").key_file.read_bytes()


# How the new pair reaches the served files: (file, bytes) writes with a pause between, as
# cert-manager, a kubelet secret update or an operator's cp may do it. new: the renewed pair.
WRITE_ORDERS = {
    "cert first": lambda new, tmp: [("tls.crt", new[0]), ("tls.key", new[1])],
    "key first": lambda new, tmp: [("tls.key", new[1]), ("tls.crt", new[0])],
    "garbage cert, then the pair": lambda new, tmp: [
        ("tls.crt", b"-----BEGIN CERTIFICATE-----\nnot base64\n"),
        ("tls.key", new[1]),
        ("tls.crt", new[0]),
    ],
    "empty key, then the pair": lambda new, tmp: [
        ("tls.key", b""),
        ("tls.crt", new[0]),
        ("tls.key", new[1]),
    ],
    "truncated cert, then the rest": lambda new, tmp: [
        ("tls.key", new[1]),
        ("tls.crt", new[0][: len(new[0]) // 2]),
        ("tls.crt", new[0]),
    ],
    "a key of another certificate": lambda new, tmp: [
        ("tls.crt", new[0]),
        ("tls.key", other_key(tmp)),
    ],
}


@pytest.mark.parametrize("order", list(WRITE_ORDERS))
async def test_no_write_order_or_garbage_breaks_a_single_handshake(tmp_path, order):
    served = tmp_path / "served"
    made = generate(SERVICE, NAMESPACE, served, days=365)  # the CA stays; the leaf renews
    old_serial = serial(made.cert_file)
    new = staged_renewal(served, tmp_path / "staging")
    new_serial = x509.load_pem_x509_certificate(new[0]).serial_number
    writes = WRITE_ORDERS[order](new, tmp_path)
    usable_at_end = order != "a key of another certificate"
    tls = server_context(made.cert_file, made.key_file)
    reloader = CertReloader(tls, made.cert_file, made.key_file)
    errors_before = REGISTRY.get_sample_value("volcano_guard_cert_reload_errors_total") or 0
    config = config_from_dict(
        {"policies": {"nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}}}}
    )
    async with running(config, Listen("127.0.0.1", 0), Listen("127.0.0.1", 0), tls) as (port, _):
        watcher = asyncio.create_task(reloader.watch(interval=0.01))
        seen, failures = [], []
        stop = asyncio.Event()

        async def client():
            while not stop.is_set():
                try:
                    seen.append(await asyncio.to_thread(handshake_serial, port, made.ca_file))
                except (ssl.SSLError, OSError) as exc:
                    failures.append(repr(exc))

        clients = [asyncio.create_task(client()) for _ in range(4)]
        for name, data in writes:
            await asyncio.sleep(0.15)  # many checks and handshakes see each partial state
            (served / name).write_bytes(data)
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*clients)
        watcher.cancel()
    assert failures == []
    assert len(seen) > 20
    assert seen[-1] == (new_serial if usable_at_end else old_serial)
    assert reloader.reloads == (1 if usable_at_end else 0)
    errors = REGISTRY.get_sample_value("volcano_guard_cert_reload_errors_total") - errors_before
    assert errors == len(writes) - 1 if usable_at_end else errors >= 1


async def test_an_expired_certificate_makes_the_webhook_unready_until_a_renewed_one_arrives(
    tmp_path,
):
    import urllib.request

    from volcano_guard.certs.generate import cert_pem, issue_ca, issue_leaf, key_pem

    made = generate(SERVICE, NAMESPACE, tmp_path)
    long_ago = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    ca_key, ca = issue_ca("old", long_ago, long_ago + datetime.timedelta(days=30))
    key, leaf = issue_leaf(
        ca_key, ca, (HOSTNAME,), long_ago, long_ago + datetime.timedelta(days=30)
    )
    made.key_file.write_bytes(key_pem(key))
    made.cert_file.write_bytes(cert_pem(leaf))
    tls = server_context(made.cert_file, made.key_file)
    reloader = CertReloader(tls, made.cert_file, made.key_file)
    config = config_from_dict(
        {
            "policies": {
                "nodeName": {"mode": "off", "bindingGuard": {"mode": "off"}},
                "podGroups": {"stampGenerationId": False, "deleteGuard": {"mode": "off"}},
                "queues": {"mode": "off"},
            }
        }
    )

    def readyz(port: int) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as page:
                return page.status, page.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    async with running(
        config,
        Listen("127.0.0.1", 0),
        Listen("127.0.0.1", 0),
        tls,
        unready_because=reloader.problem,
    ) as (_, metrics):
        status, text = await asyncio.to_thread(readyz, metrics)
        assert status == 503 and "expired at 2020-01-31" in text, text
        generate(SERVICE, NAMESPACE, tmp_path / "new")  # the renewed pair arrives
        made.key_file.write_bytes((tmp_path / "new" / "tls.key").read_bytes())
        made.cert_file.write_bytes((tmp_path / "new" / "tls.crt").read_bytes())
        assert reloader.check()
        assert await asyncio.to_thread(readyz, metrics) == (200, "ok")
        assert (
            REGISTRY.get_sample_value("volcano_guard_cert_expiry_timestamp_seconds")
            == reloader.expires_at
        )
