"""Processes holding /dev/nvidia* that the GPU process list does not show (U11).

A crashed DDP rank or a process left by a killed container can keep a CUDA context, and its
VRAM, while ``nvidia-smi`` lists nothing: the GPU looks empty and the next job OOMs. The device
nodes do not lie, so this reads every /proc/PID/fd link, like ``fuser -v /dev/nvidia*``.

Inside a container NVML may report host PIDs that this PID namespace numbers differently; every
holder then looks unlisted, which is the "dead container's namespace" case U11 names.
"""

from __future__ import annotations

import os
import pwd
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

Holder = Dict[str, Any]
DEV_DIR = "/dev"
NVIDIA_PREFIX = "/dev/nvidia"
# cmdline is user data of any length (a torchrun line with hundreds of flags); keep a screenful.
CMDLINE_MAX_CHARS = 512


def display_only(kind: Any) -> bool:
    """Whether a GPU process type (NVML / nvidia-smi: "C", "G", "C+G") is graphics only:
    Xorg and gnome-shell hold a desktop's cards without being a run that shares them (GEN7)."""
    return isinstance(kind, str) and kind.strip().upper() == "G"


def proc_owner(pid: int) -> Dict[str, Any]:
    """Who runs a GPU process and its process group, for the jump host to tell a gpuroom job
    (the runner starts each attempt as its own group: pgid == the attempt's pid) from a
    foreign process. None for a pid outside this PID namespace (U11) or a vanished one."""
    pgid: Optional[int] = None
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return {"user": None, "pgid": None}
    try:
        user: Optional[str] = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)  # a uid with no passwd entry (a container's user): the number
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    return {"user": user, "pgid": pgid}


def _read_text(path: str, limit: int = 4096) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _proc_state(stat: Optional[str]) -> Optional[str]:
    """The state letter of /proc/PID/stat; comm may hold spaces and ')' so split at the last."""
    if not stat:
        return None
    rest = stat[stat.rfind(")") + 1:].split()
    return rest[0] if rest else None


def _cmdline(raw: Optional[str]) -> Optional[str]:
    if raw is None:
        return None
    text = raw.rstrip("\0").replace("\0", " ")
    if len(text) > CMDLINE_MAX_CHARS:
        return text[:CMDLINE_MAX_CHARS - 3] + "..."
    return text


def scan_holders(proc_root: str = "/proc",
                 match: Union[str, Callable[[str], bool]] = NVIDIA_PREFIX) -> List[Holder]:
    """Every process with an open fd whose link target matches, with the paths it holds.

    ``match`` is a path prefix or a predicate on the link target. Processes that vanish or whose
    fd directory this user may not read are skipped: another user's process is not ours to see.
    """
    wanted: Callable[[str], bool]
    if isinstance(match, str):
        prefix = match
        wanted = lambda target: target.startswith(prefix)  # noqa: E731
    else:
        wanted = match
    holders: List[Holder] = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return holders
    for name in names:
        if not name.isdigit():
            continue
        fd_dir = f"{proc_root}/{name}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        paths = set()
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue  # closed between listdir and readlink
            if wanted(target):
                paths.add(target)
        if not paths:
            continue
        base = f"{proc_root}/{name}"
        comm = _read_text(base + "/comm", 64)
        holders.append({
            "pid": int(name),
            "comm": comm.strip() if comm is not None else None,
            "cmdline": _cmdline(_read_text(base + "/cmdline", CMDLINE_MAX_CHARS * 2)),
            "state": _proc_state(_read_text(base + "/stat")),
            "user": proc_owner(int(name))["user"] if proc_root == "/proc" else None,
            "devices": sorted(paths),
        })
    return holders


def unlisted(holders: Iterable[Holder], gpu_pids: Optional[Iterable[int]],
             own_pid: int) -> List[Holder]:
    """Holders the GPU process list does not show; all of them when no list could be read.

    The helper itself holds the nodes open while NVML is initialised, so it is never a finding.
    """
    known = set(gpu_pids) if gpu_pids is not None else set()
    return [h for h in holders if h["pid"] != own_pid and h["pid"] not in known]


def _has_nvidia_nodes(dev_dir: str = DEV_DIR) -> bool:
    try:
        return any(n.startswith("nvidia") for n in os.listdir(dev_dir))
    except OSError:
        return False


def collect(session: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    """The ``vram_holders`` section. Runs after ``gpus``, which leaves ``gpu_pids`` behind."""
    # No device node, no holder: a GPU-less box skips walking every fd of every process.
    if not _has_nvidia_nodes():
        return {"vram_holders": []}
    holders = scan_holders("/proc", NVIDIA_PREFIX)
    return {"vram_holders": unlisted(holders, session.state.get("gpu_pids"), os.getpid())}
