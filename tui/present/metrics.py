"""The fleet as Prometheus metrics (``gpuroom export``; docs/METRICS.md lists them): pure.

Everything comes from what the room shows: ``HostState`` and its snapshot view, the watch's
findings and clocks. Names follow Prometheus' conventions (base units in the name: seconds,
bytes, hertz, watts, celsius, ratio; ``_total`` on counters) and labels stay low-cardinality:
host, GPU index, watched path, and fixed vocabularies (link state, job state, clock reason,
clock kind, gotcha id, severity); never a job's argv or name. A box's words that become label
values (a path, a reason) go through the same sanitize as the screen, and a reason or job
state outside the vocabulary is counted as "other".

A host that is DOWN exports only its link metrics: its last snapshot is too old to be a
reading. A STALE host keeps its last snapshot's values, as the room does; its poll age says
how old they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from gpuroom.remote.queue_events import STATES
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.gpus import BENIGN_THROTTLE, THROTTLE_SHORT
from gpuroom.tui.rules.clock import ClockItem, billed_seconds
from gpuroom.tui.rules.finding import SEVERITY_RANK, Finding
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Snapshot

Kind = Literal["gauge", "counter"]
MIB = 1 << 20
MHZ = 1e6
# Every reason the helper names (remote/gpu.py CLOCK_REASON_BITS); anything else is "other".
REASONS = tuple(sorted({*THROTTLE_SHORT, *BENIGN_THROTTLE, "unknown"} - {"none"}))
# Clock kinds that count down to something (the others count up or carry no time).
TIMER_KINDS = ("walltime", "session_cap", "idle_timeout", "auto_release")
# remote/kernel.py's event kinds: an Xid line, a GPU fallen off the bus, an OOM kill.
KERNEL_KINDS = ("xid", "gpu_lost", "oom")


# Why a series was left out of a scrape (gpuroom_dropped_series): its labels repeated those of
# one already there, which would make the whole exposition unparseable. The box's words decide
# GPU indexes and paths, so two GPUs "0", or two paths one control character apart (the same
# once sanitized), are the box's doing.
DROP_REASONS = ("duplicate_gpu", "duplicate_path", "duplicate_labels")


@dataclass
class Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)
    # How many leading labels name the thing measured: gpuroom_gpu_info's model is a value
    # of GPU (host, gpu), so a second model for the same GPU is a duplicate too.
    identity: int | None = None
    dropped: dict[tuple[str, str], int] = field(default_factory=dict, init=False)  # (host, why)
    _seen: set[tuple[str, ...]] = field(default_factory=set, init=False, repr=False)

    def add(self, value: float | None, *labels: str) -> None:
        # A counter below zero is no count (a forged oom_kill of -1): it is left out, as a
        # reading the box did not give, rather than fail the scrape.
        if value is None or (self.kind == "counter" and value < 0):
            return
        # Every value inert, host names from hosts.toml included: the exposition is read in
        # terminals (curl) as much as by Prometheus.
        labels = tuple(_label(x) for x in labels)
        key = labels[:self.identity] if self.identity is not None else labels
        if key in self._seen:
            reason = ("duplicate_gpu" if "gpu" in self.labels else
                      "duplicate_path" if "path" in self.labels else "duplicate_labels")
            drop = (labels[0] if labels else "", reason)
            self.dropped[drop] = self.dropped.get(drop, 0) + 1
            return
        self._seen.add(key)
        self.samples.append((labels, float(value)))


class KernelCounts:
    """Kernel events per host and kind since the exporter started: the box sends each event
    once (after the cursor), so the count is kept here, one feed per poll outcome."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self._seen: dict[str, float | None] = {}

    def observe(self, h: HostState) -> None:
        counts = self.counts.setdefault(h.name, dict.fromkeys(KERNEL_KINDS, 0))
        if h.state is not LinkState.UP or h.view is None or self._seen.get(h.name) == h.last_ok:
            return
        self._seen[h.name] = h.last_ok
        for event in h.view.kernel.events:
            if event.kind in counts:
                counts[event.kind] += 1


class _Families:
    def __init__(self) -> None:
        self.all: dict[str, Family] = {}

    def __call__(self, name: str, kind: Kind, help_: str, *labels: str,
                 identity: int | None = None) -> Family:
        if name not in self.all:
            self.all[name] = Family(name, kind, help_, labels, identity=identity)
        return self.all[name]


def _label(text: str | None) -> str:
    """A box's words as a label value: inert, bounded, and valid UTF-8 (a lone surrogate
    from JSON's \\ud800 would fail the exposition's encoding)."""
    inert = sanitize_line(text or "")[:200]
    return inert.encode("utf-8", errors="replace").decode("utf-8")


def _host(f: _Families, h: HostState, now: float) -> None:
    f("gpuroom_host_up", "gauge", "1 when the last poll answered", "host").add(
        1.0 if h.state is LinkState.UP else 0.0, h.name)
    state = f("gpuroom_host_state", "gauge", "1 for the host's link state (up, stale, down)",
              "host", "state")
    for s in LinkState:
        state.add(1.0 if h.state is s else 0.0, h.name, s.value)
    f("gpuroom_host_poll_age_seconds", "gauge", "seconds since the last good poll",
      "host").add(h.age_s(now), h.name)
    polls = f("gpuroom_host_polls_total", "counter", "polls by outcome", "host", "outcome")
    polls.add(h.polls_ok, h.name, "ok")
    polls.add(h.polls_failed, h.name, "failed")


def _gpus(f: _Families, host: str, snap: Snapshot) -> None:
    def gauge(name: str, help_: str) -> Family:
        return f(name, "gauge", help_, "host", "gpu")

    for g in snap.gpus:
        if g.index is None:
            continue
        i = str(g.index)
        f("gpuroom_gpu_info", "gauge", "1 per GPU, its model in a label", "host", "gpu",
          "model", identity=2).add(1.0, host, i, _label(g.name))
        for name, help_, value, scale in (
            ("gpuroom_gpu_sm_clock_hertz", "SM clock", g.clock_sm_mhz, MHZ),
            ("gpuroom_gpu_sm_clock_max_hertz", "SM clock maximum", g.clock_sm_max_mhz, MHZ),
            ("gpuroom_gpu_memory_clock_hertz", "memory clock", g.clock_mem_mhz, MHZ),
            ("gpuroom_gpu_memory_clock_max_hertz", "memory clock maximum",
             g.clock_mem_max_mhz, MHZ),
            ("gpuroom_gpu_power_watts", "power draw", g.power_w, 1.0),
            ("gpuroom_gpu_power_limit_watts", "power limit", g.power_limit_w, 1.0),
            ("gpuroom_gpu_temperature_celsius", "temperature", g.temp_c, 1.0),
            ("gpuroom_gpu_utilization_ratio", "GPU utilisation (0-1)", g.util_gpu_pct, 0.01),
            ("gpuroom_gpu_memory_utilization_ratio", "memory controller utilisation (0-1)",
             g.util_mem_pct, 0.01),
            ("gpuroom_gpu_memory_used_bytes", "GPU memory used", g.mem_used_mib, MIB),
            ("gpuroom_gpu_memory_total_bytes", "GPU memory total", g.mem_total_mib, MIB),
        ):
            gauge(name, help_).add(None if value is None else value * scale, host, i)
        active = {r if r in REASONS else "other" for r in g.clock_event_reasons}
        reasons = f("gpuroom_gpu_clock_event_reason_active", "gauge",
                    "1 for each active clock-event (throttle) reason", "host", "gpu", "reason")
        for r in (*REASONS, "other"):
            reasons.add(1.0 if r in active else 0.0, host, i, r)


def _disks_and_cgroup(f: _Families, host: str, snap: Snapshot) -> None:
    # One series per filesystem, under the first path the box gave for it (as the disk pane
    # shows it): ~, the home path and / on one device exported thrice made sum() count it thrice.
    devices: set[int] = set()
    for d in snap.disks:
        if d.error is not None or not d.path:
            continue
        if d.device is not None:
            if d.device in devices:
                continue
            devices.add(d.device)
        path = _label(d.path)
        for name, help_, value in (
            ("gpuroom_disk_used_bytes", "bytes used (df: total - free incl. reserve)",
             d.used_bytes),
            ("gpuroom_disk_size_bytes", "bytes total", d.total_bytes),
            ("gpuroom_disk_available_bytes", "bytes available to a job", d.free_bytes),
            ("gpuroom_disk_inodes_used", "inodes used", d.used_inodes),
            ("gpuroom_disk_inodes_total", "inodes total", d.total_inodes),
        ):
            f(name, "gauge", help_, "host", "path").add(value, host, path)
    c = snap.cgroup
    f("gpuroom_cgroup_memory_bytes", "gauge", "cgroup memory in use", "host").add(
        c.memory_current, host)
    f("gpuroom_cgroup_memory_limit_bytes", "gauge", "cgroup memory.max", "host").add(
        c.memory_max, host)
    f("gpuroom_cgroup_oom_kills_total", "counter", "cgroup OOM kills (the box's counter)",
      "host").add(c.oom_kill, host)


def _queue(f: _Families, host: str, snap: Snapshot) -> None:
    counts = dict.fromkeys((*STATES, "other"), 0)
    for job in snap.jobs:
        counts[job.state if job.state in STATES else "other"] += 1
    jobs = f("gpuroom_queue_jobs", "gauge", "jobs in the box's queues by state", "host",
             "state")
    for state, n in counts.items():
        jobs.add(n, host, state)


def fleet_families(hosts: Iterable[HostState], findings: Iterable[Finding],
                   clocks: Iterable[ClockItem], now: float, *, idle_for: dict[str, float],
                   kernel: dict[str, dict[str, int]]) -> list[Family]:
    """Every metric of the fleet at ``now``. ``idle_for``: seconds each host has been idle
    while billing (the watch's tracker); ``kernel``: events per host and kind
    (``KernelCounts.counts``)."""
    f = _Families()
    hosts = list(hosts)
    for h in hosts:
        _host(f, h, now)
        events = f("gpuroom_kernel_events_total", "counter", "kernel log events since the "
                   "exporter started: xid (GPU Xid errors), gpu_lost, oom", "host", "kind")
        for kind in KERNEL_KINDS:
            events.add(kernel.get(h.name, {}).get(kind, 0), h.name, kind)
        snap = h.view
        if snap is None or h.state is LinkState.DOWN:
            continue
        _gpus(f, h.name, snap)
        _disks_and_cgroup(f, h.name, snap)
        _queue(f, h.name, snap)
        billed = billed_seconds(snap, now, h.rented_at)
        f("gpuroom_billed_seconds", "gauge", "seconds billed since boot or rented_at",
          "host").add(billed, h.name)
        if billed is not None and h.price_per_hour is not None:
            f("gpuroom_cost_dollars", "gauge", "money billed at price_per_hour", "host").add(
                h.price_per_hour * billed / 3600.0, h.name)
        f("gpuroom_idle_while_billing_seconds", "gauge",
          "seconds the host has had no job and idle GPUs while billing", "host").add(
            idle_for.get(h.name, 0.0), h.name)
    timers: dict[tuple[str, str], float] = {}
    for c in clocks:
        if c.kind in TIMER_KINDS and c.seconds is not None:
            timer = (c.host, c.kind)
            timers[timer] = min(c.seconds, timers.get(timer, c.seconds))
    left = f("gpuroom_timer_remaining_seconds", "gauge", "seconds until the soonest timer of "
             "each kind ends (walltime, session cap, idle timeout, auto-release)", "host", "kind")
    for (host, kind), seconds in sorted(timers.items()):
        left.add(seconds, host, kind)
    counted: dict[tuple[str, str, str], int] = {}
    for finding in findings:
        seen = (finding.host, finding.id, finding.severity)
        counted[seen] = counted.get(seen, 0) + 1
    found = f("gpuroom_findings", "gauge", "the doctor's current findings by gotcha id and "
              "severity", "host", "id", "severity")
    for (host, fid, sev), n in sorted(counted.items()):
        found.add(n, host, _label(fid), sev if sev in SEVERITY_RANK else "other")
    dropped: dict[tuple[str, str], int] = {}
    for fam in f.all.values():
        for key, n in fam.dropped.items():
            dropped[key] = dropped.get(key, 0) + n
    gone = f("gpuroom_dropped_series", "gauge", "series left out of this scrape because their "
             "labels repeated another's (the box named two GPUs or paths alike)", "host", "reason")
    for h in hosts:
        for reason in DROP_REASONS:
            gone.add(dropped.get((h.name, reason), 0), h.name, reason)
    return list(f.all.values())
