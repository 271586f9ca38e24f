"""A spot box's preemption notice as a finding (U45).

Pure. The queue's runner on the box asks the cloud's metadata endpoint (remote/preempt.py)
and records the notice; this says it at every poll of the boot that saw it, with the seconds
the cloud leaves and how many running jobs were sent SIGUSR1 (their Checkpointer saves at the
next step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuroom.tui.present.format import fmt_text, fmt_utc
from gpuroom.tui.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuroom.tui.rules.doctor import Finding

FIX = ("the cloud takes the box in seconds: the jobs were sent SIGUSR1 to save; pull the "
       "newest checkpoint now (gpuroom pull HOST), then re-rent and relaunch: the job resumes "
       "from it")


def preempt_findings(host: str, snap: Snapshot, now: float) -> list[Finding]:
    """Critical while a notice of this boot stands; a notice of an earlier boot is history."""
    from gpuroom.tui.rules.doctor import Finding  # doctor imports this module

    out = []
    for queue in snap.queue.queues if snap.queue is not None else ():
        notice = queue.preempt
        if notice is None or (snap.host.boot_id and notice.boot_id != snap.host.boot_id):
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
