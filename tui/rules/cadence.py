"""Checkpoint cadence (issue 19 item 7; principle 8: the Young/Daly interval).

On a box that can vanish, the work since the newest checkpoint is what an interruption costs.
Young/Daly says how often to save: every W = sqrt(2 * MTBF * C) seconds, with C the time one
save takes (the Checkpointer records it next to the checkpoint; the probe reports it) and MTBF
the box's mean time between interruptions (the profile's ``mtbf_s``, or hosts.toml
``mtbf_hours``). A running job whose newest checkpoint is older than W is told so; one that has
run an hour on such a box with no checkpoint at all is told louder.

Pure: the snapshot, the profile and the host's MTBF in; findings out.
"""

from __future__ import annotations

from gpuroom.profiles import Profile
from gpuroom.remote.checkpoint import young_daly_interval
from gpuroom.tui.present.format import fmt_duration
from gpuroom.tui.rules.finding import Finding, job_label
from gpuroom.tui.snapshot import Snapshot

NO_CHECKPOINT_S = 3600.0  # a run this long with nothing saved on a box that can vanish
FIX_LATE = ("save on the Young/Daly cadence: every W seconds of work (Checkpointer.save with "
            "should_save, or steps_between_checkpoints(MTBF, C, step_s) steps); an "
            "interruption now loses everything since the newest checkpoint")
FIX_NONE = ("this box can vanish (spot, reclaim, disconnect): checkpoint to "
            "$GPUROOM_CKPT_DIR with gpuroom's Checkpointer (resume with load_latest), or "
            "everything is lost with it")


def host_mtbf(profile: Profile | None, mtbf_s: float | None) -> float | None:
    """hosts.toml's mtbf_hours, else the profile's mtbf_s, else unknown (None)."""
    if mtbf_s is not None:
        return mtbf_s
    value = profile.mtbf_s if profile is not None else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) \
        and value > 0 else None


def can_vanish(profile: Profile | None, mtbf_s: float | None) -> bool:
    """A box taken away from under a job: spot-capable, a notebook, or one with an MTBF."""
    if host_mtbf(profile, mtbf_s) is not None:
        return True
    return profile is not None and (profile.spot_available is True
                                    or profile.kind == "notebook")



def cadence_findings(host: str, snap: Snapshot, profile: Profile | None,
                     mtbf_s: float | None = None) -> list[Finding]:
    out: list[Finding] = []
    t = snap.host.time
    if t is None or not can_vanish(profile, mtbf_s):
        return out
    mtbf = host_mtbf(profile, mtbf_s)
    for job in snap.jobs:
        if job.state != "running" or job.is_slurm:
            continue  # Slurm's walltime warning is SLURM2's story (doctor.slurm_findings)
        c = job.checkpoint
        attempt = job.last_attempt
        ran = t - attempt.start if attempt is not None and attempt.start is not None else None
        if c is None or c.mtime is None:
            if ran is not None and ran >= NO_CHECKPOINT_S:
                out.append(Finding(
                    "principle 8", "critical", host,
                    f"{job_label(job)}: no checkpoint after {fmt_duration(ran)}",
                    f"nothing in {job.ckpt_dir or 'its checkpoint dir'} on a box that can "
                    "vanish", FIX_NONE))
            continue
        if mtbf is None or not c.save_s:
            continue
        interval = young_daly_interval(mtbf, c.save_s)
        age = t - c.mtime
        if age > interval:
            out.append(Finding(
                "principle 8", "warn", host,
                f"{job_label(job)}: newest checkpoint {fmt_duration(age)} old",
                f"Young/Daly interval {fmt_duration(interval)} (MTBF {fmt_duration(mtbf)}, "
                f"save {c.save_s:g} s): at risk since {fmt_duration(age - interval)}",
                FIX_LATE))
    return out
