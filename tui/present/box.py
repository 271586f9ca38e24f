"""The box's CPU and memory: the job cgroup's CPU use against its quota, memory against the
cgroup limit, load per vCPU (U40, U41), with a short history per host.

The helper reports the cgroup's CPU time so far (remote/hostinfo.py cgroup_facts
``cpu_usage_usec``); CPU use is the difference between two polls over the box's clock, so
``BoxHistory`` keeps the previous reading. It lives here, pure and bounded, and the room only
feeds it one snapshot per poll.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpuroom.tui.present.format import NA, fmt_bytes, sparkline
from gpuroom.tui.present.levels import Level, level_of, worst
from gpuroom.tui.snapshot import Snapshot

BOX_HISTORY_LEN = 24  # points per host, one per poll, like the GPU pane's sparklines
# Percent of the quota / limit from which the cell warns and turns critical: a cgroup at its
# memory limit is OOM-killed (U41); one at its CPU quota is throttled (U40).
MEM_WARN_PCT, MEM_CRIT_PCT = 85.0, 95.0
CPU_WARN_PCT, CPU_CRIT_PCT = 90.0, 100.0


def _pct(used: float | None, limit: float | None) -> float | None:
    return None if used is None or not limit else 100.0 * used / limit


@dataclass(frozen=True)
class BoxView:
    """One host's CPU and memory now, with their recent history (oldest first)."""

    host: str
    cpu_vcpus: float | None  # vCPUs the cgroup used since the previous poll
    cpu_limit: float | None  # its quota, else the CPUs it may run on
    quota: bool  # cpu_limit is a cgroup quota (not the box's CPU count)
    mem_bytes: float | None
    mem_limit: float | None  # None: no cgroup limit
    load_per_vcpu: float | None  # the 1-minute load over cpu_limit (host-wide, U40)
    cpu_history: tuple[float | None, ...] = ()  # percent of cpu_limit
    mem_history: tuple[float | None, ...] = ()  # percent of mem_limit

    @property
    def cpu_pct(self) -> float | None:
        return _pct(self.cpu_vcpus, self.cpu_limit)

    @property
    def mem_pct(self) -> float | None:
        return _pct(self.mem_bytes, self.mem_limit)

    @property
    def cpu_level(self) -> Level:
        return level_of(self.cpu_pct, CPU_WARN_PCT, CPU_CRIT_PCT)

    @property
    def mem_level(self) -> Level:
        return level_of(self.mem_pct, MEM_WARN_PCT, MEM_CRIT_PCT)

    @property
    def level(self) -> Level:
        return worst(self.cpu_level, self.mem_level)

    def cell(self) -> str:
        """The hosts table's one compact column: "cpu% mem%" ("-" where unknown)."""
        def pct(p: float | None) -> str:
            return NA if p is None else f"{p:.0f}%"
        return f"{pct(self.cpu_pct)} {pct(self.mem_pct)}"

    def parts(self) -> tuple[str, str, str]:
        """(cpu, mem, load) for the box line: "cpu 1.5/4 vCPU", "mem 3.0GiB/8.0GiB",
        "load 0.42/vCPU" (the limit is the quota when ``quota``, else the box's CPUs)."""
        limit = NA if self.cpu_limit is None else f"{self.cpu_limit:g}"
        used = NA if self.cpu_vcpus is None else f"{self.cpu_vcpus:.1f}"
        cpu = f"cpu {used}/{limit} vCPU"
        mem_limit = "no limit" if self.mem_limit is None else fmt_bytes(self.mem_limit)
        mem = f"mem {fmt_bytes(self.mem_bytes)}/{mem_limit}"
        load = NA if self.load_per_vcpu is None else f"{self.load_per_vcpu:.2f}"
        return cpu, mem, f"load {load}/vCPU"

    def sparklines(self) -> tuple[str, str]:
        """(cpu, mem) history as sparklines scaled to 100 %."""
        return sparkline(self.cpu_history, 100.0), sparkline(self.mem_history, 100.0)


@dataclass
class _Track:
    at: float | None = None  # the box's time of the last reading
    usage_usec: float | None = None
    cpu_vcpus: float | None = None
    cpu: deque[float | None] | None = None
    mem: deque[float | None] | None = None


def _limits(snap: Snapshot) -> tuple[float | None, bool]:
    quota = snap.cgroup.cpu_quota_vcpus
    if quota:
        return quota, True
    return snap.host.cpu_count, False


class BoxHistory:
    """Per host: the previous CPU reading (to turn CPU time into a rate) and a bounded
    history of CPU and memory percent. Feed each new snapshot once with ``observe``."""

    def __init__(self, length: int = BOX_HISTORY_LEN) -> None:
        self._length = length
        self._tracks: dict[str, _Track] = {}

    def observe(self, host: str, snap: Snapshot | None) -> None:
        if snap is None:
            return
        track = self._tracks.setdefault(host, _Track(cpu=deque(maxlen=self._length),
                                                     mem=deque(maxlen=self._length)))
        at, usage = snap.host.time, snap.cgroup.cpu_usage_usec
        if at is not None and at == track.at:
            return  # the same snapshot again
        rate = None
        if (at is not None and usage is not None and track.at is not None
                and track.usage_usec is not None and at > track.at
                and usage >= track.usage_usec):
            rate = (usage - track.usage_usec) / 1e6 / (at - track.at)
        track.at, track.usage_usec, track.cpu_vcpus = at, usage, rate
        view = self.view(host, snap)
        assert track.cpu is not None and track.mem is not None
        track.cpu.append(view.cpu_pct)
        track.mem.append(view.mem_pct)

    def view(self, host: str, snap: Snapshot | None) -> BoxView:
        track = self._tracks.get(host, _Track())
        if snap is None:
            return BoxView(host, None, None, False, None, None, None)
        limit, quota = _limits(snap)
        load = snap.host.loadavg_host
        return BoxView(
            host=host,
            cpu_vcpus=track.cpu_vcpus,
            cpu_limit=limit,
            quota=quota,
            mem_bytes=snap.cgroup.memory_current,
            mem_limit=snap.cgroup.memory_max,
            load_per_vcpu=load[0] / limit if load and limit else None,
            cpu_history=tuple(track.cpu or ()),
            mem_history=tuple(track.mem or ()),
        )
