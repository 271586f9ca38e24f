"""The room's memory for the doctor and the danger clock: pure, fed once per poll outcome.

The doctor needs the previous good snapshot to see a transition (a job that vanished across a
reboot, an OOM counter that rose); the clock needs idle history. The watch keeps both, and
keeps a transition's finding on screen after the poll that saw it ("the box rebooted" must
not vanish five seconds later just because the next poll no longer sees a change) until the
user clears it. Which critical items to alert on is decided by its ``alerts``
(tui/rules/alerts.py), for the bell, ``notify_command`` and ``notify_url`` alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuroom.profiles import Profile, ProfileError, load_profile
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.alerts import DEFAULT_RENOTIFY_S, Alert, AlertGate
from gpuroom.tui.rules.clock import ClockItem, IdleTracker, banner_lines, host_clocks
from gpuroom.tui.rules.doctor import Finding, diagnose, sort_findings, vanished_findings
from gpuroom.tui.rules.gate import Record
from gpuroom.tui.rules.money import KERNEL_WINDOW_S, Recall, log_findings
from gpuroom.tui.snapshot import KernelEvent, Snapshot

# A remembered transition is dropped after this long even if never cleared.
STICKY_S = 24 * 3600.0
MAX_STICKY_PER_HOST = 20
MAX_EVENTS = 200


@dataclass
class _HostMemory:
    prev: Snapshot | None = None  # the last good snapshot before the current one
    current: Snapshot | None = None
    seen_try: float | None = None  # last_try of the last poll outcome observed
    findings: list[Finding] = field(default_factory=list)
    sticky: dict[tuple[str, str], tuple[Finding, float]] = field(default_factory=dict)
    # Kernel events of the last KERNEL_WINDOW_S (each poll ships only the lines since its
    # cursor), and the most GPUs one poll of this boot showed (U22).
    events: list[tuple[float, KernelEvent]] = field(default_factory=list)
    gpus_seen: tuple[str | None, int] = (None, 0)

    def remember(self, snap: Snapshot, now: float) -> Recall:
        self.events = [(t, e) for t, e in self.events if now - t <= KERNEL_WINDOW_S]
        self.events += [(now, e) for e in snap.kernel.events]
        del self.events[:-MAX_EVENTS]
        boot, most = self.gpus_seen
        if boot != snap.host.boot_id:
            most = 0  # a new boot: the GPU count starts again
        self.gpus_seen = (snap.host.boot_id, max(most, len(snap.gpus)))
        return Recall(tuple(e for _t, e in self.events), most or None)


def cached_profile(name: str, cache: dict[str, Profile | None]) -> Profile | None:
    """A host's profile by name, loaded once; None for "local" and unknown names."""
    if name not in cache:
        try:
            cache[name] = load_profile(name)
        except ProfileError:
            cache[name] = None  # "local" and unknown names: the doctor runs without facts
    return cache[name]


class FleetWatch:
    """Findings and clocks for every host, updated by ``observe`` after each poll."""

    def __init__(self, renotify_s: float = DEFAULT_RENOTIFY_S) -> None:
        self._mem: dict[str, _HostMemory] = {}
        self._profiles: dict[str, Profile | None] = {}
        self.tracker = IdleTracker()
        self.alerts = AlertGate(renotify_s)

    def profile(self, name: str) -> Profile | None:
        return cached_profile(name, self._profiles)

    def observe(self, h: HostState, now: float) -> None:
        """One poll outcome of ``h``. Seeing the same outcome twice changes nothing."""
        mem = self._mem.setdefault(h.name, _HostMemory())
        if mem.seen_try is not None and h.last_try == mem.seen_try:
            return
        mem.seen_try = h.last_try
        profile = self.profile(h.profile)
        snap = h.view
        up = h.state is LinkState.UP and snap is not None
        if up:
            mem.prev, mem.current = mem.current, snap
        recall = mem.remember(snap, now) if up and snap is not None else None
        mem.findings = diagnose(mem.prev if up else mem.current, snap if up else None,
                                h.state, profile, now, host=h.name, error=h.error,
                                last_ok=h.last_ok, recall=recall,
                                price_per_hour=h.price_per_hour,
                                stall_after_s=h.stall_after_s, mtbf_s=h.mtbf_s,
                                cpu_training_after_s=h.cpu_training_after_s,
                                local=h.local_code,
                                moves=h.moved, held=h.held, host_key=h.host_key)
        if up and snap is not None:
            self.tracker.feed(h.name, snap, h.last_ok if h.last_ok is not None else now,
                              h.stall_after_s)
            # The log bytes are shipped once: what they said stays until cleared.
            for f in [*vanished_findings(h.name, mem.prev, snap, recall),
                      *log_findings(h.name, snap)]:
                mem.sticky[(f.id, f.title)] = (f, now)
        for key, (_f, at) in list(mem.sticky.items()):
            if now - at > STICKY_S:
                del mem.sticky[key]
        while len(mem.sticky) > MAX_STICKY_PER_HOST:
            del mem.sticky[min(mem.sticky, key=lambda k: mem.sticky[k][1])]

    def remember(self, host: str, findings: Iterable[Finding], now: float) -> None:
        """Findings read apart from a poll (an ended job's log tail): kept like a
        transition's, until cleared or STICKY_S old."""
        mem = self._mem.setdefault(host, _HostMemory())
        for f in findings:
            mem.sticky[(f.id, f.title)] = (f, now)
        while len(mem.sticky) > MAX_STICKY_PER_HOST:
            del mem.sticky[min(mem.sticky, key=lambda k: mem.sticky[k][1])]

    def findings(self, host: str | None = None) -> list[Finding]:
        """Current findings plus remembered transitions, worst first (one host or all)."""
        out: list[Finding] = []
        for name, mem in self._mem.items():
            if host is not None and name != host:
                continue
            current = set(mem.findings)
            out += mem.findings
            out += [f for f, _at in mem.sticky.values() if f not in current]
        return sort_findings(out)

    def clocks(self, hosts: Iterable[HostState], now: float,
               records: Sequence[Record] = (),
               down_since: Mapping[str, float] | None = None) -> list[ClockItem]:
        """Every host's clocks; ``records`` are the pull records (FleetAPI.pull_records),
        ``down_since`` when each DOWN host went down after being up (tui/fleet/downs.py)."""
        out: list[ClockItem] = []
        for h in hosts:
            snap = h.view if h.view is not None else self._mem.get(
                h.name, _HostMemory()).current
            down = (down_since or {}).get(h.name) if h.state is LinkState.DOWN else None
            out += host_clocks(h.name, snap, self.profile(h.profile), now,
                               price_per_hour=h.price_per_hour, rented_at=h.rented_at,
                               tracker=self.tracker, records=records, spot=h.spot,
                               down_since=down)
        return out

    def clear(self, host: str | None = None) -> int:
        """Forget remembered transitions (the user has read them); returns how many."""
        n = 0
        for name, mem in self._mem.items():
            if host is None or name == host:
                n += len(mem.sticky)
                mem.sticky.clear()
        return n

    def banner(self, hosts: Iterable[HostState], now: float, limit: int = 3,
               records: Sequence[Record] = ()) -> list[str]:
        hosts = list(hosts)
        return banner_lines(self.findings(), self.clocks(hosts, now, records), limit=limit)

    def new_criticals(self, findings: Iterable[Finding], clocks: Iterable[ClockItem],
                      now: float) -> list[Alert]:
        """The critical items to alert on now (``findings()`` and ``clocks()`` of this
        moment): new, changed, or due again after the re-notify interval."""
        return self.alerts.due(findings, clocks, now)
