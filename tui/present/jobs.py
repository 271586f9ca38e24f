"""The queue pane's rows and the actions still awaiting the box's confirmation.

The snapshot is read by gpuroom.tui.snapshot; the other panes have their own modules here
(gpus, disks, log, hosts, banner), the formatter is format.py. Every string the box wrote
goes through sanitize_line. Pure functions: time comes in as ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuroom.remote.queue_events import (
    ACTIVE_STATES,
    FAILED_STATES,
    FINAL_STATES,
    LIVE_STATES,
)
from gpuroom.tui.model import HostState, PendingAction
from gpuroom.tui.present.format import fmt_age, fmt_text
from gpuroom.tui.present.levels import Level
from gpuroom.tui.present.resume import newest_checkpoint
from gpuroom.tui.present.slurm import slurm_summary, task_summary
from gpuroom.tui.snapshot import Job, RawSnapshot, Snapshot, read_snapshot

# The queue pane's colour per job state (remote/queue_events.py STATES): work in progress
# green, waiting cyan, a failure red, an end on request yellow, a clean end dim.
STATE_STYLE: dict[str, str] = {
    "queued": "cyan",
    **dict.fromkeys(ACTIVE_STATES, "green"),
    **dict.fromkeys(FAILED_STATES, "bold red"),
    "killed": "yellow",
    "succeeded": "dim",
    "removed": "dim",
}


def box_now(host: HostState, now: float) -> float:
    """The box's clock now, as extrapolated from its last snapshot.

    Ages of jobs and checkpoints are differences of box timestamps; comparing them to the
    jump host's clock would add the clock skew between the two machines.
    """
    snap = host.view
    t = snap.host.time if snap is not None else None
    if t is None or host.last_ok is None:
        return now
    last_ok: float = host.last_ok
    return t + max(0.0, now - last_ok)


# ----------------------------------------------------------------------------- queue & jobs

@dataclass(frozen=True)
class JobRow:
    """One job of the selected host's queue."""

    id: str
    name: str
    state: str
    attempt: int | None
    runtime_s: float | None
    exit_code: int | None
    command: str
    ckpt_age_s: float | None
    pending: str | None = None  # "kill", "relaunch", "add" while the box has not confirmed
    slurm: str = ""  # Slurm id, state, reason, time left (slurm_summary); "" for a box job
    # The queue records a signalled end as exit_code None and the signal's name
    # (remote/queue_runner.py), so the exit column alone read "-" for a SIGKILLed job.
    signal: str = ""
    # Why a queued job waits (a slot, GPUs held by pid N (GEN7), the job ahead, no runner)
    waiting: str = ""
    position: int | None = None  # a queued job's place in line (0: next to start)
    # The newest checkpoint the mirror brought home, verified (tui/fleet/mirror.py), and its
    # age on the box's clock (the training a lost box would cost); None: nothing home
    home_step: int | None = None
    home_age_s: float | None = None
    # `queue move`'s lineage (tui/fleet/move.py): "moved to B/j3" or "from A/j7"; "" if none
    lineage: str = ""

    @property
    def name_text(self) -> str:
        """The queue's name cell: the job's name, and where it moved to or came from."""
        return f"{self.name} ({self.lineage})" if self.lineage else self.name

    @property
    def home_text(self) -> str:
        """"ckpt step 500 home, 3m"; "" when the mirror has nothing home for the job."""
        if self.home_step is None:
            return ""
        return f"ckpt step {self.home_step} home, {fmt_age(self.home_age_s)}"

    @property
    def ckpt_text(self) -> str:
        """The queue's ckpt cell: the newest checkpoint's age on the box, and what is home."""
        home = f" ({self.home_text})" if self.home_step is not None else ""
        return fmt_age(self.ckpt_age_s) + home

    @property
    def ckpt_short(self) -> str:
        """The ckpt cell where the pane is narrow: "35s (12000 home)", so the command keeps
        its room ("ckpt step 12000 home, 2m" took 28 columns and left the command 3)."""
        home = f" ({self.home_step} home)" if self.home_step is not None else ""
        return fmt_age(self.ckpt_age_s) + home

    @property
    def state_text(self) -> str:
        """The state, and for a waiting job why it waits: "queued: GPU 0 held by pid 7"."""
        return f"{self.state}: {self.waiting}" if self.waiting else self.state

    @property
    def ended_by(self) -> str:
        """The exit column: the exit code, else the signal that ended the attempt, else "-"."""
        if self.exit_code is not None:
            return str(self.exit_code)
        return self.signal or "-"

    @property
    def level(self) -> Level:
        if self.pending:
            return "warn"
        return "crit" if self.state in FAILED_STATES else "ok"


def _attempt_no(j: Job) -> int | None:
    last = j.last_attempt
    if last is not None and last.attempt is not None:
        return last.attempt
    return len(j.attempts)


def job_rows(host: HostState, now: float) -> list[JobRow]:
    """The snapshot's jobs plus the actions still waiting for confirmation."""
    t = box_now(host, now)
    rows = []
    ids = set()
    snap = host.view
    for j in snap.jobs if snap is not None else ():
        jid = fmt_text(j.id)
        ids.add(jid)
        last = j.last_attempt
        started = last.start if last is not None else None
        ended = last.end if last is not None else None
        # An ended job's newest checkpoint is the one its runner recorded at the end.
        newest = newest_checkpoint(j)
        ckpt = newest.mtime if newest is not None else None
        home = host.mirrored.get(j.id)
        home_at = None if home is None else (
            t - home.box_mtime if home.box_mtime is not None else now - home.home_at)
        pend = None
        for action in host.pending:
            if action.kind in ("kill", "relaunch") and action.job == jid:
                pend = action.kind
        rows.append(
            JobRow(
                id=jid,
                name=fmt_text(j.name),
                state=fmt_text(j.state) or "?",
                attempt=_attempt_no(j),
                runtime_s=None if started is None else (ended if ended is not None else t)
                - started,
                exit_code=last.exit_code if last is not None else j.exit_code,
                command=fmt_text(j.command),
                ckpt_age_s=None if ckpt is None else t - ckpt,
                pending=pend,
                slurm=slurm_summary(j),
                signal=fmt_text(last.signal) if last is not None else "",
                waiting=fmt_text(j.waiting),
                position=j.position,
                home_step=home.step if home is not None else None,
                home_age_s=home_at,
                lineage=fmt_text(host.moves.get(j.id, "")),
            )
        )
        for task in j.tasks:  # a Slurm array's tasks below it; K/logs take their jN_i
            rows.append(JobRow(fmt_text(task.id), f"└ task {fmt_text(task.task)}",
                               fmt_text(task.state) or "?", None, task.elapsed_s,
                               task.exit_code, "", None, slurm=task_summary(task)))
    for action in host.pending:
        if action.kind == "add" and action.job not in ids:
            rows.append(JobRow(action.job or "?", action.label, "sent", None, None, None, "",
                               None, pending="add"))
    return rows


def still_pending(action: PendingAction, snapshot: RawSnapshot | None) -> bool:
    """Whether ``action`` is not yet visible in ``snapshot``.

    Decided from what the box reports, not from timing, so a snapshot taken before the
    action reached the box can never confirm it.
    """
    if action.job is None:  # an add the box has not answered: nothing to look for yet
        return True
    snap = read_snapshot(snapshot) if snapshot is not None else None
    job = snap.job(action.job) if snap is not None else None
    if action.kind == "add":
        return job is None
    if job is None:
        # kill: a job that left the queue is gone; relaunch: nothing to confirm against.
        return False
    state = job.state
    if action.kind == "kill":
        return state not in FINAL_STATES
    attempt = _attempt_no(job)
    if action.attempt is not None and attempt is not None:
        return attempt <= action.attempt
    return state not in LIVE_STATES


def running_job(snapshot: Snapshot | None) -> str:
    for j in snapshot.jobs if snapshot is not None else ():
        if j.state == "running":
            return fmt_text(j.name) or fmt_text(j.id)
    return "-"
