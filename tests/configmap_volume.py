"""A ConfigMap volume as the kubelet writes it (pkg/volume/util/atomic_writer.go): the files live
in a timestamped directory, `..data` is a symlink to it swapped by rename, and each key is a
symlink `KEY -> ..data/KEY`. An update changes no path the pod reads: only what `..data` names."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_versions = itertools.count()


class ConfigMapVolume:
    def __init__(self, directory: Path, key: str = "config.yaml") -> None:
        self.directory, self.key = directory, key
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        """The file a pod names: DIR/KEY."""
        return self.directory / self.key

    def write(self, text: str) -> None:
        """Publish text as the kubelet does: new timestamped directory, swap `..data`."""
        version = self.directory / f"..2026_{next(_versions):06d}"
        version.mkdir()
        (version / self.key).write_text(text)
        staged = self.directory / "..data_tmp"
        staged.symlink_to(version.name)
        old = (
            os.readlink(self.directory / "..data") if (self.directory / "..data").exists() else None
        )
        os.rename(staged, self.directory / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(Path("..data") / self.key)
        if old is not None:  # the kubelet removes the previous version after the swap
            (self.directory / old / self.key).unlink()
            (self.directory / old).rmdir()
