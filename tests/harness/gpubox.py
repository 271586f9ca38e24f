"""The test sshd's box with a GPU: an interpreter path for hosts.toml's ``python`` that runs
the box's python3 with the nvidia-smi replay in its environment (tests/fakes), found the way a
box finds it: by $GPUROOM_NVIDIA_SMI. Everything it needs is copied into the test user's
home, so the box reads nothing of the jump host's checkout."""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomli_w
from fakes import NVIDIA_SMI

from harness.boxenv import python_with_env

# A GPU table with two cards, and the plain table listing their processes
# (--query-compute-apps has no capture, so the helper falls back to it).
SMI_CAPTURES = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",
                "nvsmi_table/driver460-gtx1080-with-processes.txt")


@contextmanager
def gpu_python(sshd_box: Any, fixtures: Path, name: str,
               captures: Sequence[str] = SMI_CAPTURES,
               extra_env: Mapping[str, str] | None = None) -> Iterator[Path]:
    user = pwd.getpwnam(sshd_box.user)
    root = sshd_box.home / name
    shutil.rmtree(root, ignore_errors=True)
    for rel in captures:
        (root / "fixtures" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fixtures / rel, root / "fixtures" / rel)
    shutil.copy(NVIDIA_SMI, root / "nvidia-smi")
    env = {"GPUROOM_NVIDIA_SMI": str(root / "nvidia-smi"),
           "GPUROOM_FAKE_NVSMI": ":".join(captures),
           "GPUROOM_FIXTURES": str(root / "fixtures"), **(extra_env or {})}
    wrapper = python_with_env(root / "python3", env)
    for path in (root, *root.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)
    try:
        yield wrapper
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def gpu_box_config(sshd_box: Any, fixtures: Path, tmp_path: Path, host: str, *,
                   poll_interval_s: float = 0.5, price_per_hour: float = 2.5) -> Iterator[Path]:
    """A hosts.toml (0600) naming the GPU box ``host``: the room and the verbs read it."""
    with gpu_python(sshd_box, fixtures, f"gpuroom-{host}-test") as python:
        path = tmp_path / "hosts.toml"
        path.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config),
                         "poll_interval_s": poll_interval_s},
            "hosts": {host: {"ssh": sshd_box.alias, "python": str(python),
                             "price_per_hour": price_per_hour}}}).encode())
        path.chmod(0o600)
        yield path
