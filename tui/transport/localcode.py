"""The user's own tree on the jump host, read the way the runner read the box's (U42).

remote/drift.py::code_facts records at launch a job's script sha256s and its cwd's git HEAD
and dirty flag; this reads the same facts from a local tree so tui/rules/drift.py can say
whether the box runs the code the user has. git runs as an argv list, never through a shell;
it lives in transport/ because only this layer starts processes on the jump host.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable
from pathlib import Path

from gpuroom.tui.localpath import safe_local_path
from gpuroom.tui.rules.drift import LocalCode

GIT_TIMEOUT_S = 5.0
MAX_HASH_BYTES = 16 * 1024 * 1024  # the runner's bound (remote/drift.py)


def _git(tree: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _sha256(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_HASH_BYTES:
            return None
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def read_tree(tree: Path, rel_paths: Iterable[str] = ()) -> LocalCode:
    """The facts of ``tree``; each relative path that would leave the tree reads as missing."""
    root = tree.expanduser()
    head = _git(root, "rev-parse", "HEAD")
    dirty: bool | None = None
    if head is not None:
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status.strip()) if status is not None else None
    hashes: dict[str, str | None] = {}
    for rel in rel_paths:
        # The box named these paths: one that would leave the tree (.., absolute, a symlink
        # here leading out) is not read at all.
        path = safe_local_path(root, rel)
        hashes[rel] = _sha256(path) if path is not None else None
    return LocalCode(str(root), head.strip() if head else None, dirty, hashes)
