"""A running job's script changed under it (U2, U42): a warning while it runs.

Pure. The runner recorded each script argument at launch and the probe compares them
(remote/drift.py); bash reads a replaced script at the old byte offset, and a Python job runs
the code it loaded while the file says otherwise.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuroom.remote.queue_events import ACTIVE_STATES
from gpuroom.tui.present.format import fmt_text
from gpuroom.tui.rules.finding import Finding, fix_for
from gpuroom.tui.snapshot import CodeFacts, Job, Snapshot

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


@dataclass(frozen=True)
class LocalCode:
    """The user's own tree on the jump host (tui/transport/localcode.py reads it): its git
    HEAD and dirty flag, and the sha256 of each relative script path (None: not there)."""

    tree: str
    head: str | None = None
    dirty: bool | None = None
    sha256: Mapping[str, str | None] = field(default_factory=dict)


def launch_code(job: Job) -> CodeFacts | None:
    """What the job's newest attempt launched with, when the runner recorded it."""
    last = job.last_attempt
    return last.code if last is not None else None


def _rel(job: Job, path: str) -> str:
    rel = posixpath.relpath(path, job.cwd) if job.cwd else path
    return rel if not rel.startswith("..") else posixpath.basename(path)


def script_rel_paths(job: Job) -> list[str]:
    """The job's recorded scripts as paths relative to its cwd (the same paths in the user's
    tree); a script outside the cwd keeps its base name."""
    code = launch_code(job)
    return [_rel(job, s.path) for s in (code.scripts if code is not None else ()) if s.path]


def tree_paths_to_read(snap: Snapshot) -> list[str] | None:
    """The script paths the U42 rule will compare, or None when no running job has launch
    code: then the user's tree need not be read at all (git runs per poll otherwise)."""
    jobs = [j for j in snap.jobs if j.state in ACTIVE_STATES and launch_code(j) is not None]
    if not jobs:
        return None
    return sorted({p for job in jobs for p in script_rel_paths(job)})


def _state(head: str | None, dirty: bool | None) -> str:
    return f"HEAD {fmt_text(head[:12]) if head else '?'}" + (" (dirty)" if dirty else "")


def code_verdict(job: Job, local: LocalCode) -> tuple[bool | None, list[str]]:
    """Whether the box runs the user's code: (True, ...) matches, (False, why...) differs,
    (None, why) when nothing was recorded to compare. One line per difference (U42)."""
    code = launch_code(job)
    if code is None or (code.git is None and not code.scripts):
        return None, ["the runner recorded no code facts for this job (an older helper, or "
                      "no script argument and no git repo in its cwd)"]
    lines: list[str] = []
    box = code.git
    if box is not None and box.head and local.head:
        if box.head != local.head:
            lines.append(f"the box runs {_state(box.head, box.dirty)}, your tree is at "
                         f"{_state(local.head, local.dirty)}: the fix you committed is not on "
                         "the box")
        elif bool(box.dirty) != bool(local.dirty):
            side = "the box's tree" if box.dirty else "your tree"
            lines.append(f"both are at {_state(box.head, None)} but {side} has uncommitted "
                         "changes")
    for script in code.scripts:
        if not script.path:
            continue
        rel = _rel(job, script.path)
        mine = local.sha256.get(rel)
        if mine is None:
            lines.append(f"script {fmt_text(rel)} is not in your tree")
        elif script.sha256 and mine != script.sha256:
            lines.append(f"script {fmt_text(rel)} differs from yours")
    if lines:
        return False, lines
    parts = [_state(box.head, box.dirty)] if box is not None and box.head else []
    parts += [f"{len(code.scripts)} script(s) identical"] if code.scripts else []
    return True, ["matches: " + ", ".join(parts)]


TREE_FIX = ("push the tree to the box (git pull there, or rsync) and relaunch the job: "
            "`gpuroom queue verify {host} {job}` says what differs")


def tree_drift_findings(host: str, snap: Snapshot, local: LocalCode) -> list[Finding]:
    """A running job whose launch code differs from the host's ``code`` tree (U42)."""
    out = []
    for job in snap.jobs:
        if job.state not in ACTIVE_STATES:
            continue
        same, lines = code_verdict(job, local)
        if same is False:
            out.append(Finding("U42", "warn", host,
                               f"job {fmt_text(job.key)}: the box does not run your code",
                               f"{'; '.join(lines)} (tree {fmt_text(local.tree)})",
                               fix_for(TREE_FIX, host, job.id)))
    return out
