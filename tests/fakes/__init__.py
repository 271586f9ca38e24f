"""The hardware boundary this machine lacks (no GPU), replayed from real captures.

``FIXTURES`` is the shared capture folder (``$GPUROOM_FIXTURES`` overrides); each capture is
``# source/what/note`` lines, a ``---`` line, then the verbatim command output.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from paths import FIXTURES

FAKES = Path(__file__).resolve().parent
NVIDIA_SMI = FAKES / "nvidia-smi"
# Two cards, and the plain table listing their processes (--query-compute-apps has no
# capture, so the helper falls back to it).
SMI_CAPTURES = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",
                "nvsmi_table/driver460-gtx1080-with-processes.txt")


def replay_python(root: Path, user: str, name: str = "python3", **extra: str) -> Path:
    """An interpreter path for hosts.toml's ``python``: the box's python3 with the
    nvidia-smi replay (and ``extra``) in its environment, which every process the helper
    starts inherits (a Slurm step too). The replay and its captures are copied under
    ``root``, owned by ``user``, so the box reads nothing of the jump host's checkout."""
    for rel in SMI_CAPTURES:
        (root / "fixtures" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURES / rel, root / "fixtures" / rel)
    shutil.copy(NVIDIA_SMI, root / "nvidia-smi")
    env = {"GPUROOM_NVIDIA_SMI": str(root / "nvidia-smi"),
           "GPUROOM_FAKE_NVSMI": ":".join(SMI_CAPTURES),
           "GPUROOM_FIXTURES": str(root / "fixtures"), **extra}
    wrapper = root / name
    wrapper.write_text("#!/usr/bin/python3\nimport os, sys\n"
                       f"os.environ.update({env!r})\n"
                       "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")
    wrapper.chmod(0o755)
    owner = pwd.getpwnam(user)
    for path in (root, *root.rglob("*")):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return wrapper


def split_capture(text: str) -> tuple[dict[str, str], str]:
    """(header fields, verbatim output) of one capture file."""
    head, sep, body = text.partition("\n---\n")
    if not sep:
        raise ValueError("capture has no '---' line between its header and the output")
    meta: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.lstrip("# ").partition(":")
        if value:
            meta[key.strip()] = value.strip()
    return meta, body


def capture(rel: str) -> str:
    """The verbatim output of ``FIXTURES/rel``."""
    return split_capture((FIXTURES / rel).read_text(encoding="utf-8"))[1]


def capture_what(rel: str) -> str:
    """The ``# what:`` line of ``FIXTURES/rel``: the command that produced it."""
    return split_capture((FIXTURES / rel).read_text(encoding="utf-8"))[0]["what"]
