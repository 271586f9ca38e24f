"""Host, cgroup and disk facts, read from /proc, /sys and statvfs (no forks).

Every reader returns plain dicts. A missing file is a normal state (a box without cgroup v2,
a mount that is not there) and becomes None or an ``error`` field, never an exception.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
CGROUP_ROOT = "/sys/fs/cgroup"

# cgroup v1 reports "no limit" as a huge page-aligned number instead of a word.
_V1_UNLIMITED_BYTES = 1 << 60


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _read_int(path: str) -> Optional[int]:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def host_facts() -> Dict[str, Any]:
    """Identity and liveness of the box: boot_id changes on every reboot (GEN6)."""
    boot_id = _read(BOOT_ID_PATH)
    uptime_text = _read("/proc/uptime")
    uptime_s = float(uptime_text.split()[0]) if uptime_text else None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    uname = os.uname()
    return {
        "hostname": socket.gethostname(),
        "boot_id": boot_id.strip() if boot_id else None,
        "uptime_s": uptime_s,
        "time": time.time(),
        "kernel": uname.release,
        "arch": uname.machine,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        # Host-wide on a container: it counts the neighbours' load too (U40).
        "loadavg_host": load,
        "python": ".".join(str(n) for n in sys.version_info[:3]),
    }


def parse_cpu_max(text: str) -> Optional[float]:
    """cgroup v2 ``cpu.max`` ("200000 100000" or "max 100000") -> vCPUs, None if unlimited."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    if period <= 0:
        return None
    return quota / period


def parse_flat_keyed(text: str) -> Dict[str, int]:
    """``memory.events`` / ``memory.stat`` / v1 ``memory.oom_control``: "key value" lines."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def parse_memory_max(text: str) -> Optional[int]:
    """``memory.max`` is a byte count or the word ``max``."""
    value = text.strip()
    if value == "max":
        return None
    n = int(value)
    return None if n >= _V1_UNLIMITED_BYTES else n


def _own_cgroup_v2_dir(root: str) -> str:
    """The cgroup v2 directory of this process, falling back to the root inside containers."""
    text = _read("/proc/self/cgroup") or ""
    for line in text.splitlines():
        if line.startswith("0::"):
            candidate = os.path.join(root, line[3:].strip().lstrip("/")).rstrip("/")
            if os.path.exists(os.path.join(candidate, "memory.current")) or os.path.exists(
                os.path.join(candidate, "cpu.max")
            ):
                return candidate
    return root


def _own_cgroup_v1_dir(root: str, controller: str) -> str:
    """This process's v1 cgroup for a controller: on a bare v1 host the hierarchy's root
    describes the whole machine, not the job's limit (U41)."""
    base = os.path.join(root, controller)
    text = _read("/proc/self/cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            candidate = os.path.join(base, parts[2].strip().lstrip("/"))
            if os.path.isdir(candidate):
                return candidate.rstrip("/")
    return base


def memory_cgroup_of(pid: int, root: str = CGROUP_ROOT) -> Optional[str]:
    """The memory cgroup directory of process ``pid`` (v2 unified, else v1's memory
    controller), from /proc/PID/cgroup; None when it cannot be read. A job started from an
    SSH session is not in the probe's cgroup: its OOM count is read here, not there (U9)."""
    text = _read(f"/proc/{pid}/cgroup") or ""
    unified = os.path.exists(os.path.join(root, "cgroup.controllers"))
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if unified and parts[0] == "0" and parts[1] == "":
            where = os.path.join(root, parts[2].strip().lstrip("/")).rstrip("/")
        elif not unified and "memory" in parts[1].split(","):
            where = os.path.join(root, "memory", parts[2].strip().lstrip("/")).rstrip("/")
        else:
            continue
        return where if os.path.isdir(where) else None
    return None


def oom_kill_count(cgroup_dir: str) -> Optional[int]:
    """The cgroup's OOM kills so far: v2 memory.events, else v1 memory.oom_control."""
    for name in ("memory.events", "memory.oom_control"):
        text = _read(os.path.join(cgroup_dir, name))
        if text is not None:
            return parse_flat_keyed(text).get("oom_kill")
    return None


# cpu_usage_usec is the cgroup's CPU time so far; the jump host turns two polls into vCPUs used.
_CGROUP_KEYS = ("version", "path", "memory_current", "memory_max", "oom_kill", "oom",
                "cpu_quota_vcpus", "cpu_usage_usec")


def cgroup_facts(root: str = CGROUP_ROOT) -> Dict[str, Any]:
    """Memory and CPU limits as the job sees them (U40, U41), for cgroup v2 or v1."""
    values: Tuple[Any, ...] = (None,) * len(_CGROUP_KEYS)
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        base = _own_cgroup_v2_dir(root)
        cpu_text = _read(os.path.join(base, "cpu.max"))
        max_text = _read(os.path.join(base, "memory.max"))
        events = parse_flat_keyed(_read(os.path.join(base, "memory.events")) or "")
        values = (2, base, _read_int(os.path.join(base, "memory.current")),
                  parse_memory_max(max_text) if max_text else None,
                  events.get("oom_kill"), events.get("oom"),
                  parse_cpu_max(cpu_text) if cpu_text else None,
                  parse_flat_keyed(_read(os.path.join(base, "cpu.stat")) or "").get("usage_usec"))
    elif os.path.isdir(os.path.join(root, "memory")):
        mem = _own_cgroup_v1_dir(root, "memory")
        cpu = _own_cgroup_v1_dir(root, "cpu")
        quota = _read_int(os.path.join(cpu, "cpu.cfs_quota_us"))
        period = _read_int(os.path.join(cpu, "cpu.cfs_period_us"))
        limit = _read_int(os.path.join(mem, "memory.limit_in_bytes"))
        control = parse_flat_keyed(_read(os.path.join(mem, "memory.oom_control")) or "")
        usage_ns = _read_int(os.path.join(_own_cgroup_v1_dir(root, "cpuacct"), "cpuacct.usage"))
        # v1 has no count of OOM events apart from the kills.
        values = (1, mem, _read_int(os.path.join(mem, "memory.usage_in_bytes")),
                  None if limit is None or limit >= _V1_UNLIMITED_BYTES else limit,
                  control.get("oom_kill"), None,
                  quota / period if quota and quota > 0 and period else None,
                  usage_ns // 1000 if usage_ns is not None else None)
    return dict(zip(_CGROUP_KEYS, values))  # noqa: B905 (strict= is 3.10+; the box runs 3.8)


def disk_facts(path: str) -> Dict[str, Any]:
    """Bytes AND inodes of the filesystem holding ``path`` (U7: inodes die first)."""
    expanded = os.path.expanduser(path)
    try:
        st = os.statvfs(expanded)
        dev = os.stat(expanded).st_dev
    except OSError as exc:
        return {"path": path, "error": f"{type(exc).__name__}: {exc.strerror or exc}"}
    return {
        "path": path,
        "real_path": os.path.realpath(expanded),
        "device": dev,
        "total_bytes": st.f_blocks * st.f_frsize,
        "free_bytes": st.f_bavail * st.f_frsize,  # what a job may still write
        "bfree_bytes": st.f_bfree * st.f_frsize,  # that plus the blocks reserved for root
        "total_inodes": st.f_files,
        "free_inodes": st.f_favail,
        "ffree_inodes": st.f_ffree,
    }


def disks(paths: Iterable[str]) -> List[Dict[str, Any]]:
    """statvfs of home, cwd and the profile's mounts, each path once, in the order asked."""
    seen = set()
    out = []
    for p in ["~", os.getcwd(), *paths]:
        if p in seen:
            continue
        seen.add(p)
        out.append(disk_facts(p))
    return out
