"""Since when the box has done no work: the probe's ``idle`` section.

Derived from the rest of the same probe and from the box's own records, never from the jump
host's memory: the newest end of any job attempt (the queue's events), the GPU work this
helper process last saw, and the boot. The answer carries the box's own ``now``, so the jump
host measures the span on the box's clock and only adds the age of the poll; a room opened
after a night shows the night at its first poll.

A box is busy while a gpuroom job runs, while a GPU runs a compute process no job of the
queue started (someone's notebook, a run started by hand), or while a GPU draws working power
with no process listed (a container that cannot see the processes).
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Iterator, List, Optional

from .queue_events import ACTIVE_STATES

# A GPU drawing at most this share of its power limit is doing no work (tui/rules/stall.py
# gpu_idle says the same on the jump host).
IDLE_POWER_FRAC = 0.2
IDLE_UTIL_PCT = 1.0
BUSY_KEY = "idle_busy_at"  # the ProbeSession state entry: the last time work was seen


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _dicts(value: Any) -> List[Dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _jobs(doc: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    queue = doc.get("queue")
    queues = queue.get("queues") if isinstance(queue, dict) else None
    for view in (queues.values() if isinstance(queues, dict) else ()):
        if isinstance(view, dict):
            yield from _dicts(view.get("jobs"))


def _running_pids(jobs: List[Dict[str, Any]]) -> List[int]:
    out = []
    for job in jobs:
        attempts = _dicts(job.get("attempts"))
        pid = attempts[-1].get("pid") if attempts else None
        if job.get("state") in ACTIVE_STATES and isinstance(pid, int):
            out.append(pid)
    return out


def _gpu_busy(gpu: Dict[str, Any]) -> bool:
    power, limit = _number(gpu.get("power_w")), _number(gpu.get("power_limit_w"))
    if power is not None and limit:
        return power > IDLE_POWER_FRAC * limit
    util = _number(gpu.get("util_gpu_pct"))
    return util is not None and util > IDLE_UTIL_PCT


def _display_only(proc: Dict[str, Any]) -> bool:
    kind = proc.get("type")
    return isinstance(kind, str) and kind.strip().upper() == "G"


def busy_reason(doc: Dict[str, Any]) -> Optional[str]:
    """Why the box is not idle now ("job", "foreign", "gpu"), or None."""
    jobs = list(_jobs(doc))
    if any(j.get("state") in ACTIVE_STATES for j in jobs):
        return "job"
    ours = set(_running_pids(jobs))
    gpus = _dicts(doc.get("gpus"))
    for gpu in gpus:
        for proc in _dicts(gpu.get("processes")):
            if _display_only(proc):
                continue
            if proc.get("pid") in ours or proc.get("pgid") in ours:
                continue
            return "foreign"
    if any(_gpu_busy(g) for g in gpus):
        return "gpu"
    return None


def _newest_end(doc: Dict[str, Any]) -> Optional[float]:
    ends = [_number(a.get("end")) for j in _jobs(doc) for a in _dicts(j.get("attempts"))]
    found = [e for e in ends if e is not None]
    return max(found) if found else None


def derive(session: Any, doc: Dict[str, Any], now: Optional[float] = None) -> Dict[str, Any]:
    """The ``idle`` section of ``doc`` (the probe's other sections), on the box's clock."""
    now = time.time() if now is None else now
    reason = busy_reason(doc)
    if reason is not None:
        session.state[BUSY_KEY] = now
        return {"idle": {"idle_since": None, "now": now, "busy": reason, "basis": None}}
    host = doc.get("host")
    uptime = _number(host.get("uptime_s")) if isinstance(host, dict) else None
    candidates = {
        "boot": now - uptime if uptime is not None and uptime >= 0 else None,
        "job_end": _newest_end(doc),
        "gpu": _number(session.state.get(BUSY_KEY)),
    }
    known = {k: v for k, v in candidates.items() if v is not None and v <= now}
    if not known:
        return {"idle": {"idle_since": None, "now": now, "busy": None, "basis": None}}
    basis = max(known, key=lambda k: known[k])
    return {"idle": {"idle_since": known[basis], "now": now, "busy": None, "basis": basis}}
