"""`volcano-guard sandbox` as a process: --load seeds it, a bad file exits 2, SIGTERM stops it."""

import json
import signal
import urllib.request

from tests.conftest import REPO
from tests.processes import start_cli, wait_for_log


def start(*args):
    return start_cli("sandbox", *args)


def test_load_seeds_objects_and_sigterm_exits_0():
    proc = start("--listen", "127.0.0.1:0", "--load", str(REPO / "examples" / "sandbox-seed.yaml"))
    url = wait_for_log(proc, r"on (http://127\.0\.0\.1:\d+)")[1]
    with urllib.request.urlopen(f"{url}/api/v1/namespaces/team-a/pods/p1") as response:
        pod = json.load(response)
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    with urllib.request.urlopen(f"{url}/apis/scheduling.volcano.sh/v1beta1/queues") as response:
        assert [q["metadata"]["name"] for q in json.load(response)["items"]] == ["default"]
    with urllib.request.urlopen(f"{url}/api/v1/namespaces") as response:  # a new cluster's
        names = {n["metadata"]["name"] for n in json.load(response)["items"]}
    assert {"default", "kube-system", "kube-public", "kube-node-lease", "team-a"} <= names
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_a_bad_load_file_exits_2_naming_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Endpoints\nmetadata: {name: s, namespace: a}\n")
    proc = start("--listen", "127.0.0.1:0", "--load", str(bad))
    assert proc.wait(20) == 2
    assert "does not serve Endpoints" in proc.stderr.read()


def test_help_says_it_serves_https_with_a_certificate(capsys):
    import pytest

    from volcano_guard.cli import main

    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "HTTPS with --tls-cert and --tls-key" in text
