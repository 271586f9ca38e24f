"""The helper on the test box with a chosen environment, and a probe with a section that fails.

A box finds its nvidia-smi or dmesg the way a real one does (``$GPUROOM_NVIDIA_SMI``,
``$GPUROOM_DMESG`` in the helper's environment): hosts.toml's ``python`` names a wrapper that
sets them and execs the box's python3.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuroom.remote import kernel
from gpuroom.remote.probe import ProbeSession


def python_with_env(path: Path, env: Mapping[str, str]) -> Path:
    """An interpreter for hosts.toml's ``python`` at ``path``: the box's python3 with
    ``env`` added to its environment."""
    path.write_text("#!/usr/bin/python3\nimport os, sys\n"
                    f"os.environ.update({dict(env)!r})\n"
                    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")
    path.chmod(0o755)
    return path


def job_python(box: Any) -> tuple[str, str]:
    """(python, PYTHONPATH) with which the test user can import torch from our venv.

    The venv's own interpreter may live where the test user cannot go (pyenv under /root);
    the same minor version elsewhere can load the venv's site-packages.
    """
    site = sysconfig.get_paths()["purelib"]
    candidates = [os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"]
    for python in dict.fromkeys(candidates):
        probe = box.run("env", f"PYTHONPATH={site}", python, "-c",
                        "import sys, torch; print(sys.version_info[:2])")
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return python, site
    pytest.skip(f"no python the test user can run imports torch from {site}")


def probe_with_a_broken_section(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A real probe whose kernel collector raised: the section is missing and ``errors[]``
    names it (remote/probe.py)."""

    def broken(session: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(kernel, "collect", broken)
    session = ProbeSession()
    try:
        return session.snapshot({})
    finally:
        session.close()
