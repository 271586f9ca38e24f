"""What will not survive: a spot box's preemption notice (U45) and checkpoints on a disk the
platform wipes on stop (U46).

Pure. The queue's runner on the box asks the cloud's metadata endpoint (remote/preempt.py)
and records the notice; this says it at every poll of the boot that saw it, with the seconds
the cloud leaves and how many running jobs were sent SIGUSR1 (their Checkpointer saves at the
next step).
"""

from __future__ import annotations

from gpuroom.profiles import Profile
from gpuroom.remote.queue_events import ACTIVE_STATES, preempt_over
from gpuroom.tui.present.format import fmt_text, fmt_utc
from gpuroom.tui.rules.finding import Finding
from gpuroom.tui.snapshot import Snapshot

FIX = ("the cloud takes the box in seconds: the jobs were sent SIGUSR1 to save; pull the "
       "newest checkpoint now (gpuroom pull HOST), then re-rent and relaunch: the job resumes "
       "from it")


def preempt_findings(host: str, snap: Snapshot, now: float) -> list[Finding]:
    """Critical while a notice of this boot stands; a notice of an earlier boot, or one long
    past its time with the box still up, is history."""
    out = []
    for queue in snap.queue.queues if snap.queue is not None else ():
        notice = queue.preempt
        if notice is None or (snap.host.boot_id and notice.boot_id != snap.host.boot_id) \
                or preempt_over(notice.at, notice.t, now):
            continue
        left = max(0.0, notice.at - now) if notice.at is not None else None
        when = f"in {left:.0f} s" if left is not None else "now"
        title = (f"{fmt_text(notice.cloud or 'the cloud')} preemption notice: the box goes "
                 f"{when}")
        seen = (f"{fmt_text(notice.action or 'preempt')} at "
                f"{fmt_utc(notice.at) if notice.at is not None else 'unknown time'}; "
                f"SIGUSR1 sent to {notice.signalled or 0} running job(s) of queue "
                f"{fmt_text(queue.name)}")
        out.append(Finding("U45", "critical", host, title, seen, FIX))
    return out


def stop_surviving_paths(profile: Profile | None, survives: bool = True) -> list[str]:
    """The profile's mounts that survive a stop (``survives=False``: that a stop wipes, such
    as Slurm's node-local $TMPDIR), by a path the box can expand ("unknown" left out)."""
    if profile is None:
        return []
    return [m.path for m in profile.mounts
            if m.survives_stop is survives and m.path.startswith(("/", "~", "$"))]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def ckpt_survival_findings(host: str, snap: Snapshot, profile: Profile | None) -> list[Finding]:
    """A running job whose checkpoint dir is under none of the profile's mounts that survive
    a stop (as the probe resolved them): its checkpoints go with the next stop (U46)."""
    wanted = stop_surviving_paths(profile)
    # The probe watches each of them (tui/fleet/live.py watched_mounts) and resolves ~; a
    # path it could not resolve ($VAR, not watched) leaves the question open: no claim.
    resolved = {d.path: d.where for d in snap.disks if d.path and not d.missing and d.where}
    roots = [p if p.startswith("/") and "$" not in p else resolved.get(p) for p in wanted]
    if not roots or profile is None or None in roots:
        return []
    out = []
    for job in snap.jobs:
        path = job.ckpt_dir
        if job.state not in ACTIVE_STATES or not path or any(_inside(path, r) for r in roots if r):
            continue
        name = profile.title or profile.platform
        out.append(Finding(
            "U46", "warn", host,
            f"job {fmt_text(job.key)}: checkpoints on a disk a stop wipes",
            f"{fmt_text(path)} is under none of {', '.join(wanted)} ({name}: "
            f"{'only these survive' if len(wanted) > 1 else 'only it survives'} a stop)",
            f"relaunch with --durable-dir {wanted[0]}/runs (or gpuroom queue config HOST "
            f"--durable-dir {wanted[0]}/runs for every job) so GPUROOM_CKPT_DIR is there"))
    return out
