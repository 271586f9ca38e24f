"""What the fleet knows about each host: the data every pane renders.

Plain dataclasses, the probe's raw JSON document and its parsed view (tui/snapshot.py).
Only the fleet writes them, from the event loop (tui/fleet/); the room and the rules read them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from gpuroom.tui.rules.drift import LocalCode
from gpuroom.tui.snapshot import RawSnapshot, read_snapshot
from gpuroom.tui.snapshot import Snapshot as SnapshotView

# The raw document as the helper sent it (recorded and printed as is); read it through
# HostState.view or gpuroom.tui.snapshot.read_snapshot, never by its keys.
Snapshot = RawSnapshot


class LinkState(str, Enum):
    """UP: the last poll answered. STALE: it did not, but an earlier one did (its snapshot is
    kept, with its age). DOWN: nothing has answered for a while, or never. A failed poll never
    means a dead run (GEN8)."""

    UP = "up"
    STALE = "stale"
    DOWN = "down"


PendingKind = Literal["kill", "relaunch", "add"]


@dataclass(frozen=True)
class PendingAction:
    """An action sent to a box that no snapshot has confirmed yet (principle 3: say only
    what the box confirmed). The fleet adds it when the action is sent, drops it if the box
    refused, and retires it when a snapshot shows it took effect."""

    kind: PendingKind
    job: str | None  # None: an add the box has not yet answered with an id
    since: float  # the jump host's clock when it was sent
    label: str = ""  # add: the job's name or command, shown until the box lists the job
    attempt: int | None = None  # relaunch: the job's attempt when it was asked


@dataclass(frozen=True)
class MirrorHome:
    """A job's newest checkpoint the mirror brought home, verified (tui/fleet/mirror.py);
    a pull cut short never becomes one."""

    host: str
    job: str
    step: int
    file: str  # its name in the job's checkpoint dir (the box's text; made inert to show)
    local_path: str
    sha256: str
    verified_by: str  # load | hash
    box_mtime: float | None  # the box's clock when the file was committed
    home_at: float  # the jump host's clock when it verified here
    # the box's queue identity (tui/snapshot.py queue_identity): job ids start again at j1 in
    # a new queue, so a home is the job's only in the queue it was pulled from
    queue_id: str | None = None


@dataclass(frozen=True)
class Move:
    """One job moved (tui/fleet/move.py, moves.json): A/j7 -> B/j3, with the checkpoint step
    it resumes from. The job ids are the boxes' words: made inert where shown."""

    src_host: str
    src_job: str
    dst_host: str
    dst_job: str
    step: int | None
    at: float
    # The source's copy still to be killed when its host answers again (the move was made
    # while it could not be reached): True until a poll shows it not live (Fleet fences it).
    fence: bool = False
    auto: bool = False  # a failover the fleet made, not a `queue move` someone asked for
    down_s: float | None = None  # a failover: how long the source host had been down
    why: str | None = None  # a failover of a box that came back wiped: what was seen
    fenced_at: float | None = None  # when a poll of the source showed its copy ended
    src_queue: str | None = None  # the source job's queue identity: fenced only in that queue
    dst_queue: str | None = None

    @property
    def line(self) -> str:
        step = f"from ckpt step {self.step}" if self.step is not None else \
            "no checkpoint: it starts from the beginning"
        return f"{self.src_host}/{self.src_job} -> {self.dst_host}/{self.dst_job} ({step})"


@dataclass(frozen=True)
class HeldFailover:
    """A failover the fleet did not make: the box says a new boot and its checkpoint dir lost
    the step the mirror brought home, but this jump host saw no outage to back that word
    (tui/fleet/live.py _failover_wiped); the doctor says it (tui/rules/moves.py)."""

    job: str
    step: int  # the step the mirror has home
    boot: str  # the boot id the box reports
    at: float


@dataclass
class HostState:
    """One host as the jump host last saw it."""

    name: str
    # (raw, its view): the raw document is parsed once, however many panes read it.
    _parsed: tuple[Snapshot, SnapshotView] | None = field(default=None, init=False, repr=False,
                                                         compare=False)
    profile: str = "generic-ssh"
    state: LinkState = LinkState.DOWN
    error: str | None = None
    # "unknown" or "changed" while the last poll was refused at the box's host key (T6):
    # a refusal to check, not a dropped poll.
    host_key: str | None = None
    snapshot: Snapshot | None = None
    last_ok: float | None = None  # time.time() of the last good snapshot
    last_try: float | None = None
    next_try: float | None = None  # when the fleet polls it again; None: no poll is planned
    price_per_hour: float | None = None
    rented_at: float | None = None  # epoch seconds billing started, when not at boot
    stall_after_s: float | None = None  # hosts.toml stall_after_min: a hung job's threshold
    # hosts.toml cpu_training_after_min: how long a GPU job may have no process on its GPUs.
    cpu_training_after_s: float | None = None
    mtbf_s: float | None = None  # hosts.toml mtbf_hours: the box's mean time to interruption
    code: str | None = None  # hosts.toml code: the user's own tree of the box's code (U42)
    local_code: LocalCode | None = None  # that tree as read after the last good poll
    spot: str | None = None  # hosts.toml spot: the cloud of a spot box (U45)
    polls_ok: int = 0
    polls_failed: int = 0
    pending: list[PendingAction] = field(default_factory=list)
    mirrored: dict[str, MirrorHome] = field(default_factory=dict)  # by job id
    moves: dict[str, str] = field(default_factory=dict)  # job id: "moved to B/j3", "from A/j7"
    moved: list[Move] = field(default_factory=list)  # the moves from or to this host
    held: list[HeldFailover] = field(default_factory=list)  # failovers not made, said

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since the last good snapshot, None if there never was one."""
        if self.last_ok is None:
            return None
        return (now if now is not None else time.time()) - self.last_ok

    @property
    def view(self) -> SnapshotView | None:
        """The latest snapshot, read (None before the first good poll).

        Cached by the raw document's identity: the fleet replaces the dict on every poll and
        never edits one in place.
        """
        raw = self.snapshot
        if raw is None:
            return None
        if self._parsed is None or self._parsed[0] is not raw:
            self._parsed = (raw, read_snapshot(raw))
        return self._parsed[1]
