"""The config reloader the webhook and the audit share: a change published as the kubelet
publishes a ConfigMap (a `..data` symlink swap, no path's mtime changed) is applied once; a bad
one is refused on one log line, counted, not retried, and the last good config stays."""

from __future__ import annotations

import logging
import os

import pytest

from tests.configmap_volume import ConfigMapVolume
from volcano_guard.base.config_reload import CONFIG_INFO, CONFIG_RELOADS, ConfigReloader
from volcano_guard.base.metrics import REGISTRY


def parse(data: bytes) -> int:
    """A stand-in config: a number; anything else is refused."""
    text = data.decode().strip()
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number")
    return int(text)


@pytest.fixture
def volume(tmp_path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("1\n")
    return volume


def reloads(result: str) -> float:
    return REGISTRY.get_sample_value(f"{CONFIG_RELOADS._name}_total", {"result": result}) or 0.0


def hash_in_force() -> str:
    (family,) = CONFIG_INFO.collect()
    (sample,) = [s for s in family.samples if s.value == 1]
    return sample.labels["hash"]


async def test_a_symlink_swap_is_applied_once_though_no_path_changed_its_mtime(volume):
    applied: list[int] = []

    async def apply(config: int) -> None:
        applied.append(config)

    reloader = ConfigReloader(volume.path, parse, apply)
    started_hash = hash_in_force()
    before = os.stat(volume.path, follow_symlinks=False).st_mtime_ns
    volume.write("2\n")
    assert os.stat(volume.path, follow_symlinks=False).st_mtime_ns == before  # the key's link
    assert await reloader.check() is True
    assert await reloader.check() is False  # the same content: nothing to do
    assert applied == [2]
    assert hash_in_force() != started_hash


async def test_a_bad_config_is_refused_once_and_the_last_good_one_stays(volume, caplog):
    applied: list[int] = []

    async def apply(config: int) -> None:
        applied.append(config)

    reloader = ConfigReloader(volume.path, parse, apply)
    good_hash, rejected = hash_in_force(), reloads("rejected")
    volume.write("oops\n")
    with caplog.at_level(logging.ERROR, logger="volcano_guard.config"):
        assert await reloader.check() is False
        assert await reloader.check() is False  # not tried again until it changes
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(volume.path) in line and "'oops' is not a number" in line
    assert "\n" not in line
    assert reloads("rejected") == rejected + 1
    assert hash_in_force() == good_hash
    assert applied == []
    volume.write("3\n")
    assert await reloader.check() is True
    assert applied == [3]


async def test_a_config_apply_refuses_counts_as_rejected_and_is_not_in_force(volume):
    async def refuse(config: int) -> None:
        raise ValueError("the nodes cache it needs did not sync within 1s")

    reloader = ConfigReloader(volume.path, parse, refuse)
    good_hash, applied = hash_in_force(), reloads("applied")
    volume.write("4\n")
    assert await reloader.check() is False
    assert reloader.rejected == 1 and reloads("applied") == applied
    assert hash_in_force() == good_hash


async def test_a_missing_file_keeps_the_last_good_config(volume, caplog):
    async def apply(config: int) -> None:
        raise AssertionError("nothing to apply")

    reloader = ConfigReloader(volume.path, parse, apply)
    (volume.directory / "..data").unlink()
    with caplog.at_level(logging.ERROR, logger="volcano_guard.config"):
        assert await reloader.check() is False
        assert await reloader.check() is False
    assert len(caplog.records) == 1 and "no such file" in caplog.records[0].getMessage()


async def test_a_change_between_the_first_read_and_the_reloader_is_applied(volume):
    from volcano_guard.base.config_reload import content_hash

    started_from = content_hash(volume.path.read_bytes())  # what the process read at start
    volume.write("5\n")  # then the kubelet swapped the file, before the reloader began
    applied: list[int] = []

    async def apply(config: int) -> None:
        applied.append(config)

    reloader = ConfigReloader(volume.path, parse, apply, loaded=started_from)
    assert await reloader.check() is True
    assert applied == [5]
