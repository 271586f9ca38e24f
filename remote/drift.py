"""What code a job launched with, and whether it changed under it (U2, U42, principle 6).

At launch the runner records ``code_facts``: each script argument that is a file (sha256,
size, mtime) and, when the cwd is a git work tree, its HEAD and whether tracked files differ
from it. The probe compares a running job's scripts by size and mtime (``changed``, no hashing
at every poll): bash reads a replaced script at the old byte offset (U2), and a Python
process runs the old code while the log reads as the new (U42).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Dict, List, Optional

from .selfhash import sha256_file

MAX_SCRIPTS = 8
MAX_HASH_BYTES = 16 * 1024 * 1024  # a bigger argument is a data file, not a script
GIT_TIMEOUT_S = 2.0


def script_files(argv: List[str], cwd: str) -> List[str]:
    """The arguments that name a regular file (relative to ``cwd``), at most MAX_SCRIPTS."""
    out: List[str] = []
    for arg in argv:
        if not arg or arg.startswith("-") or "\n" in arg:
            continue
        path = os.path.normpath(os.path.join(cwd, arg))
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= MAX_HASH_BYTES \
                    and path not in out:
                out.append(path)
        except (OSError, ValueError):  # ValueError: a NUL in an -c program's text
            continue
        if len(out) >= MAX_SCRIPTS:
            break
    return out


def _git(cwd: str, *args: str) -> Optional[str]:
    try:
        proc = subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_facts(cwd: str) -> Optional[Dict[str, Any]]:
    head = _git(cwd, "rev-parse", "HEAD")
    if head is None:
        return None  # not a work tree, no commit yet, or no git on the box
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    return {"head": head.strip()[:64], "dirty": bool(status.strip()) if status is not None
            else None}


def code_facts(argv: List[str], cwd: str) -> Dict[str, Any]:
    scripts = []
    for path in script_files(argv, cwd):
        try:
            st = os.stat(path)
            scripts.append({"path": path, "sha256": sha256_file(path), "size": st.st_size,
                            "mtime": st.st_mtime})
        except OSError:
            continue
    return {"scripts": scripts, "git": git_facts(cwd)}


def changed(code: Any) -> List[str]:
    """The recorded scripts that differ now (size or mtime), or are gone."""
    out: List[str] = []
    scripts = code.get("scripts") if isinstance(code, dict) else None
    for item in scripts if isinstance(scripts, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            continue
        try:
            st = os.stat(item["path"])
        except OSError:
            out.append(item["path"])
            continue
        if st.st_size != item.get("size") or st.st_mtime != item.get("mtime"):
            out.append(item["path"])
    return out
