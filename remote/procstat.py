"""CPU seconds a job's process group has used, from /proc (stdlib only, Python 3.8).

A running job whose log and checkpoint are still and whose GPUs idle may be a CPU job at work,
not a hung one (issue 19, item 1): the jump host compares this counter across polls. The job
runs in its own process group (remote/queue_runner.py), whose id is the attempt's pid, so the
group's members are every /proc/PID/stat whose pgrp field is that id. Children that already
exited are counted through their parent's cutime/cstime, so the sum only grows while the
leader lives.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Tuple

PROC = "/proc"
# A box with more processes than this is not scanned to the end: a poll stays bounded.
SCAN_LIMIT = 20000


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def parse_stat(text: str) -> Optional[Tuple[int, int]]:
    """(pgrp, cpu ticks) of one /proc/PID/stat line; the comm may hold spaces and ')'."""
    end = text.rfind(")")
    if end < 0:
        return None
    fields = text[end + 2:].split()
    try:
        # After the comm: state ppid pgrp ... utime(11) stime(12) cutime(13) cstime(14).
        return int(fields[2]), sum(int(fields[i]) for i in (11, 12, 13, 14))
    except (IndexError, ValueError):
        return None


def _children(pid: str, proc: str) -> Optional[List[str]]:
    """Child pids of every thread of ``pid`` (None: the kernel has no children files)."""
    try:
        tids = os.listdir(os.path.join(proc, pid, "task"))
    except OSError:
        return []  # the process is gone
    out: List[str] = []
    for tid in tids:
        try:
            with open(os.path.join(proc, pid, "task", tid, "children")) as f:
                out += f.read().split()
        except FileNotFoundError:
            return None  # CONFIG_PROC_CHILDREN off: only a full scan finds the group
        except OSError:
            continue
    return out


def _group_tree(leaders: Iterable[int], proc: str) -> Optional[List[str]]:
    """The leaders and their descendants, walked through /proc/PID/task/TID/children: a
    job's few processes instead of every process on the box (a /proc scan costs ~25 us a
    process, per poll). None when a children file is missing."""
    seen: List[str] = []
    todo = [str(p) for p in leaders]
    while todo and len(seen) < SCAN_LIMIT:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        kids = _children(pid, proc)
        if kids is None:
            return None
        todo += kids
    return seen


def group_cpu_seconds(pgids: Iterable[int], proc: str = PROC) -> Dict[int, float]:
    """CPU seconds per process group id in ``pgids`` (a group with no process is absent)."""
    wanted = {int(p) for p in pgids if p}
    out: Dict[int, float] = {}
    if not wanted:
        return out
    names = _group_tree(wanted, proc)
    if names is None:
        try:
            names = os.listdir(proc)
        except OSError:
            return out
    tick = _ticks()
    for name in names[:SCAN_LIMIT]:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as f:
                parsed = parse_stat(f.read())
        except OSError:
            continue  # the process ended between listdir and open
        if parsed is None or parsed[0] not in wanted:
            continue
        out[parsed[0]] = out.get(parsed[0], 0.0) + parsed[1] / tick
    return out
