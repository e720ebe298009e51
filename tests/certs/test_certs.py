import datetime
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from volcano_guard.certs.generate import CertsError, generate
from volcano_guard.cli import main


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_generates_p256_ca_and_serving_cert_for_the_service_names(tmp_path):
    made = generate("volcano-guard", "volcano-system", tmp_path, days=30)
    ca, cert = load(made.ca_file), load(made.cert_file)
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert ca.public_key().curve.name == "secp256r1"
    assert cert.public_key().curve.name == "secp256r1"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        "volcano-guard",
        "volcano-guard.volcano-system",
        "volcano-guard.volcano-system.svc",
        "volcano-guard.volcano-system.svc.cluster.local",
    ]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    cert.verify_directly_issued_by(ca)
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=29) < lifetime <= datetime.timedelta(days=30)


def test_key_files_are_private(tmp_path):
    made = generate("s", "n", tmp_path)
    assert stat.S_IMODE(made.key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(made.cert_file.stat().st_mode) == 0o644


def test_refuses_to_overwrite_a_ca_without_force(tmp_path):
    first = generate("s", "n", tmp_path)
    before = first.ca_file.read_bytes()
    with pytest.raises(CertsError, match="--force"):
        generate("s", "n", tmp_path)
    assert first.ca_file.read_bytes() == before
    generate("s", "n", tmp_path, force=True)
    assert first.ca_file.read_bytes() != before


def test_cli_generate_refuses_a_second_run(tmp_path, capsys):
    out = tmp_path / "tls"
    args = [
        "certs",
        "generate",
        "--service",
        "vg",
        "--namespace",
        "ns",
        "--out",
        str(out),
        "--days",
        "10",
    ]
    assert main(args) == 0
    assert main(args) == 1
    assert "refusing to replace a CA" in capsys.readouterr().err


def test_cli_generate_names_every_file_it_writes_in_its_message_and_help(tmp_path, capsys):
    out = tmp_path / "tls"
    assert (
        main(["certs", "generate", "--service", "vg", "--namespace", "ns", "--out", str(out)]) == 0
    )
    said = capsys.readouterr().out
    named = said.removeprefix("wrote ").split(" (valid until ")[0].split(", ")
    written = sorted(str(path) for path in out.iterdir())
    assert sorted(named) == written, said
    with pytest.raises(SystemExit):
        main(["certs", "generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps it
    out_help = help_text.split("--out OUT")[-1].split("--days")[0]
    assert all(path.name in out_help for path in out.iterdir()), out_help


def test_cli_refuses_zero_days(tmp_path, capsys):
    args = [
        "certs",
        "generate",
        "--service",
        "vg",
        "--namespace",
        "ns",
        "--out",
        str(tmp_path),
        "--days",
        "0",
    ]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert "argument --days: 0 is not a positive integer" in capsys.readouterr().err
