"""A ConfigMap volume of one key, written as the kubelet writes it (the harness's
kubelet.write_atomically: `..data` swapped by rename, `KEY -> ..data/KEY`): an update changes no
path the pod reads, only what `..data` names."""

from __future__ import annotations

from pathlib import Path

from volcano_guard_sandbox.kubelet import write_atomically


class ConfigMapVolume:
    def __init__(self, directory: Path, key: str = "config.yaml") -> None:
        self.directory, self.key = directory, key
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        """The file a pod names: DIR/KEY."""
        return self.directory / self.key

    def write(self, text: str) -> None:
        write_atomically(self.directory, {self.key: text.encode()})
