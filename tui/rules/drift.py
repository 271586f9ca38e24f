"""A running job's script changed under it (U2, U42): a warning while it runs.

Pure. The runner recorded each script argument at launch and the probe compares them
(remote/drift.py); bash reads a replaced script at the old byte offset, and a Python job runs
the code it loaded while the file says otherwise.
"""

from __future__ import annotations

from gpuroom.remote.queue_events import ACTIVE_STATES
from gpuroom.tui.present.format import fmt_text
from gpuroom.tui.rules.finding import Finding
from gpuroom.tui.snapshot import Snapshot

SHOWN = 3

FIX = ("never rewrite a file a live run reads (principle 6): write the new version under a new "
       "name, or let the job end first; relaunch to run the new code on purpose")


def drift_findings(host: str, snap: Snapshot) -> list[Finding]:
    out = []
    for job in snap.jobs:
        if job.state not in ACTIVE_STATES or not job.code_changed:
            continue
        paths = ", ".join(fmt_text(p) for p in job.code_changed[:SHOWN])
        more = f" (+{len(job.code_changed) - SHOWN})" if len(job.code_changed) > SHOWN else ""
        out.append(Finding("U2", "warn", host,
                           f"job {fmt_text(job.key)}: its script changed while it runs",
                           f"{paths}{more} differs from the file it launched with", FIX))
    return out
