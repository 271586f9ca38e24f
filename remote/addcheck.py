"""What ``queue add`` refuses before a job is queued (issue 19, items 2 and 8).

- A job asking for GPUs on a box where the probe finds none (U31, K8S6): it would train on
  the CPU at GPU prices. The refusal names the probe's own GPU error.
- A script argument with Windows CRLF line ends (U26, GEN4, T3): bash stops at
  ``$'\\r': command not found``. ``--fix-crlf`` converts it, to a new file put in place with
  os.replace, so a shell already reading the old one keeps its own copy (principle 6, U2).

Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

# The runner's own inventory (NVML, else nvidia-smi, or the GPUROOM_GPUS_JSON test hook), so
# add refuses exactly when the runner would find no card.
from .queue_runner import _gpu_doc, _Session

# Only files this small are read: a script, not a dataset named on the command line.
SCRIPT_MAX_BYTES = 1 << 20
SCRIPT_SUFFIXES = (".sh", ".bash")
MAX_FILES = 16


def gpu_refusal(asked: Optional[int]) -> Optional[Dict[str, str]]:
    """An error and its fix when a job asks for GPUs and the probe finds none, else None."""
    if not asked or asked <= 0:
        return None
    doc = _gpu_doc(_Session())
    if doc.get("gpus"):
        return None
    why = doc.get("gpu_error") or "no GPU found"
    return {"error": f"the job asks for {asked} GPU(s) but this box has none the probe can "
                     f"see ({why}); it would train on the CPU (U31)",
            "fix": "fix the driver or the container's GPU runtime (nvidia-smi must list the "
                   "GPU), re-rent, or add the job with --gpus 0 to run it on the CPU"}


def _script_paths(argv: List[str], cwd: str) -> List[str]:
    out: List[str] = []
    for arg in argv:
        path = arg if os.path.isabs(arg) else os.path.join(cwd, arg)
        try:
            if not os.path.isfile(path) or os.path.getsize(path) > SCRIPT_MAX_BYTES:
                continue
        except OSError:
            continue
        out.append(path)
        if len(out) >= MAX_FILES:
            break
    return out


def _is_script(path: str, head: bytes) -> bool:
    return head.startswith(b"#!") or path.endswith(SCRIPT_SUFFIXES)


def crlf_scripts(argv: List[str], cwd: str) -> List[str]:
    """The job's script arguments (a shebang, or .sh/.bash) whose lines end in CRLF."""
    found: List[str] = []
    for path in _script_paths(argv, cwd):
        try:
            with open(path, "rb") as f:
                data = f.read(SCRIPT_MAX_BYTES)
        except OSError:
            continue
        if b"\0" not in data[:8192] and _is_script(path, data) and b"\r\n" in data:
            found.append(path)
    return found


def fix_crlf(path: str) -> None:
    """Rewrite ``path`` with LF line ends: a new file (same mode) replaces the old name."""
    with open(path, "rb") as f:
        data = f.read()
    mode = os.stat(path).st_mode & 0o7777
    tmp = f"{path}.gpuroom-lf.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data.replace(b"\r\n", b"\n"))
        out.flush()
        os.fsync(out.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def crlf_refusal(paths: List[str]) -> Dict[str, str]:
    names = ", ".join(paths[:4])
    return {"error": f"{names}: Windows CRLF line ends; bash would stop at "
                     f"\"$'\\r': command not found\" (U26)",
            "fix": f"sed -i 's/\\r$//' {paths[0]} (or dos2unix), or add the job again with "
                   "--fix-crlf to convert it"}
