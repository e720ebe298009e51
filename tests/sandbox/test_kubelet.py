"""The kubelet's volume projection the rehearsals use: a ConfigMap or Secret shown in a
directory as a mounted volume shows it, swapped whole when it changes."""

import os
import time

from volcano_guard_sandbox.kubelet import VolumeProjector, write_atomically


def configmap(data, name="cfg"):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team-a"},
        "data": data,
    }


def test_each_key_is_a_symlink_through_data_and_a_change_swaps_data_whole(tmp_path):
    assert write_atomically(tmp_path, {"a": b"1", "b": b"2"})
    first = os.readlink(tmp_path / "..data")
    assert os.readlink(tmp_path / "a") == "..data/a"
    assert not write_atomically(tmp_path, {"a": b"1", "b": b"2"})
    assert write_atomically(tmp_path, {"a": b"3"})
    assert os.readlink(tmp_path / "..data") != first
    assert (tmp_path / "a").read_bytes() == b"3"
    assert not (tmp_path / "b").exists() and not (tmp_path / first).exists()


def test_a_configmap_change_reaches_the_mounted_file(sandbox, core, tmp_path):
    sandbox.seed([configmap({"config.yaml": "failClosed: true\n"})])
    mount = tmp_path / "config"
    with VolumeProjector(sandbox.url, "ConfigMap", "team-a", "cfg", mount, interval=0.05):
        assert (mount / "config.yaml").read_text() == "failClosed: true\n"
        core.patch_namespaced_config_map(
            "cfg", "team-a", {"data": {"config.yaml": "failClosed: false\n"}}
        )
        deadline = time.monotonic() + 5
        while (mount / "config.yaml").read_text() != "failClosed: false\n":
            assert time.monotonic() < deadline, "the change never reached the mount"
            time.sleep(0.02)
        core.delete_namespaced_config_map("cfg", "team-a")
        time.sleep(0.2)
        assert (mount / "config.yaml").read_text() == "failClosed: false\n"


def test_a_secret_is_projected_decoded(sandbox, tmp_path):
    sandbox.seed(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "tls", "namespace": "team-a"},
                "data": {"tls.crt": "Y2VydA=="},
            }
        ]
    )
    with VolumeProjector(sandbox.url, "Secret", "team-a", "tls", tmp_path / "tls") as volume:
        assert (volume.directory / "tls.crt").read_bytes() == b"cert"
