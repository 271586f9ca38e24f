"""What will not survive: a spot box's preemption notice (U45), checkpoints on a disk the
platform wipes on stop (U46), and the mounts a destroy wipes (principle 4; the gate names the
unpulled checkpoints on them).

Pure. The queue's runner on the box asks the cloud's metadata endpoint (remote/preempt.py)
and records the notice; this says it at every poll of the boot that saw it, with the seconds
the cloud leaves and how many running jobs were sent SIGUSR1 (their Checkpointer saves at the
next step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuroom.profiles import Profile
from gpuroom.remote.queue_events import ACTIVE_STATES, preempt_over
from gpuroom.tui.present.format import fmt_text, fmt_utc
from gpuroom.tui.rules.finding import Finding, fix_for, path_under
from gpuroom.tui.snapshot import Snapshot

FIX = ("the cloud takes the box in seconds: the jobs were sent SIGUSR1 to save; pull the "
       "newest checkpoint now (gpuroom pull {host}), then re-rent and relaunch: the job resumes "
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
        out.append(Finding("U45", "critical", host, title, seen, fix_for(FIX, host)))
    return out


def stop_surviving_paths(profile: Profile | None, survives: bool = True) -> list[str]:
    """The profile's mounts that survive a stop (``survives=False``: that a stop wipes, such
    as Slurm's node-local $TMPDIR), by a path the box can expand ("unknown" left out)."""
    if profile is None:
        return []
    return [m.path for m in profile.mounts
            if m.survives_stop is survives and m.path.startswith(("/", "~", "$"))]


def stop_only_paths(profile: Profile | None) -> list[str]:
    """The profile's mounts that survive a stop but not a destroy (RunPod's /workspace), by
    a path the box can expand."""
    if profile is None:
        return []
    surviving = stop_surviving_paths(profile)
    return [m.path for m in profile.mounts if m.survives_destroy is False
            and m.path in surviving]


def _resolved(snap: Snapshot | None) -> dict[str, str]:
    """Each watched mount's path as the profile names it -> where the probe resolved it on
    the box (tui/fleet/live.py watched_mounts; ~ expanded there)."""
    if snap is None:
        return {}
    return {d.path: d.where for d in snap.disks if d.path and not d.missing and d.where}


def _root(path: str, resolved: dict[str, str]) -> str | None:
    """A profile mount's path on the box: itself when absolute, else as the probe resolved
    it; None when it did not (a $VAR, not watched): no claim is made about it."""
    return path if path.startswith("/") and "$" not in path else resolved.get(path)


def ckpt_survival_findings(host: str, snap: Snapshot, profile: Profile | None) -> list[Finding]:
    """A running job whose checkpoint dir is under none of the profile's mounts that survive
    a stop (as the probe resolved them): its checkpoints go with the next stop (U46)."""
    wanted = stop_surviving_paths(profile)
    # The probe watches each of them (tui/fleet/live.py watched_mounts) and resolves ~; a
    # path it could not resolve ($VAR, not watched) leaves the question open: no claim.
    resolved = _resolved(snap)
    roots = [_root(p, resolved) for p in wanted]
    if not roots or profile is None or None in roots:
        return []
    out = []
    for job in snap.jobs:
        path = job.ckpt_dir
        if job.state not in ACTIVE_STATES or not path \
                or any(path_under(path, r) for r in roots if r):
            continue
        name = profile.title or profile.platform
        out.append(Finding(
            "U46", "warn", host,
            f"job {fmt_text(job.key)}: checkpoints on a disk a stop wipes",
            f"{fmt_text(path)} is under none of {', '.join(wanted)} ({name}: "
            f"{'only these survive' if len(wanted) > 1 else 'only it survives'} a stop)",
            fix_for(f"relaunch with --durable-dir {wanted[0]}/runs (or gpuroom queue config "
                    f"{{host}} --durable-dir {wanted[0]}/runs for every job) so "
                    "GPUROOM_CKPT_DIR is there", host)))
    return out


# Words of a teardown command (hosts.toml teardown_command) that only stop the box: its
# disks that survive a stop stay. Any other command, or none, is taken as a destroy.
STOP_WORDS = frozenset({"stop", "halt", "pause", "suspend", "hibernate", "deallocate"})
DESTROY_WORDS = frozenset({"remove", "rm", "delete", "terminate", "destroy", "kill",
                           "terminate-instances", "delete-instance"})


def teardown_destroys(teardown: Sequence[str] | None) -> bool:
    """Does the user's teardown destroy the box (principle 4)? Unknown counts as yes: a
    checkpoint is at risk until the command says it only stops."""
    words = {w.lower() for w in teardown or ()}
    return not (words & STOP_WORDS) or bool(words & DESTROY_WORDS)


@dataclass(frozen=True)
class WipedMount:
    """A profile mount a destroy wipes: its path as the profile names it, where the probe
    resolved it on the box, and whether it survives a stop (a volume disk: RunPod /workspace)."""

    path: str
    root: str
    survives_stop: bool


def destroy_wiped_mounts(profile: Profile | None, snap: Snapshot | None) -> list[WipedMount]:
    """The profile's mounts that do not survive a destroy, by a path resolved on the box
    ("unknown" paths and ones the probe did not resolve are left out: no claim)."""
    if profile is None:
        return []
    resolved = _resolved(snap)
    out = []
    for m in profile.mounts:
        if m.survives_destroy is not False or not m.path.startswith(("/", "~")):
            continue
        root = _root(m.path, resolved)
        if root:
            out.append(WipedMount(m.path, root, m.survives_stop is True))
    return out


def wiped_by_destroy(path: str | None, mounts: Sequence[WipedMount]) -> WipedMount | None:
    """The mount a destroy wipes that ``path`` (a job's checkpoint dir on the box) is on."""
    if not path:
        return None
    return next((m for m in mounts if path_under(path, m.root)), None)
