"""A host's outputs: pull every job's checkpoint dir home and check the teardown gate.

Shared by the CLI (`gpuroom pull`, `gpuroom gate`) and the room (keys P and T); the bytes
move through tui/transport/pull.py over the host's link.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import platformdirs

from gpuroom.profiles import Profile, ProfileError, load_profile
from gpuroom.tui.config import HostConfig
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.localpath import UnsafePath, job_dir
from gpuroom.tui.present.format import fmt_bytes
from gpuroom.tui.rules.gate import GateResult, JobUnits, evaluate, units_key
from gpuroom.tui.rules.survival import (
    WipedMount,
    destroy_wiped_mounts,
    teardown_destroys,
    wiped_by_destroy,
)
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import (
    Job,
    RunDirs,
    load_answer,
    read_queue_view,
    read_rundirs,
    read_snapshot,
    with_jobs,
)
from gpuroom.tui.transport.link import HostLink, LinkError
from gpuroom.tui.transport.pull import (
    Progress,
    PullError,
    PullResult,
    load_records,
    pull,
    state_file,
    take_manifest,
)


def pull_root(host: HostConfig, to: str | None = None) -> Path:
    """Where pulls of ``host`` land: --to, else the host's pull_to, else the user data dir."""
    return Path(to or host.pull_to
                or Path(platformdirs.user_data_dir("gpuroom")) / "pulls").expanduser()


async def queue_jobs(link: HostLink, units: bool = False) -> tuple[Job, ...]:
    """The box's full job list (the probe's queue view is bounded); ``units``: with each
    job's checkpoint units and --output files (a bounded walk of each cwd on the box)."""
    result = await link.helper("queue", "ls", *(["--units"] if units else []))
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise LinkError(link.name, f"queue ls failed ({result.failure()})") from None
    return read_queue_view(doc).jobs


class NoSuchJob(GpuroomError, LookupError):
    """The job asked for has no checkpoint dir on the host (still a LookupError, as it was)."""


async def pull_jobs(link: HostLink, root: Path, job: str | None = None, *,
                    on_progress: Callable[[str, Progress], None] | None = None,
                    method: str = "auto") -> list[tuple[str, PullResult]]:
    """Pull each job's checkpoint dir (or only ``job``'s) into ``root/<host>/<job>/``, and
    its own program's checkpoint units and --output files from its cwd into ``cwd/`` there."""
    listed = [j for j in await queue_jobs(link, units=True) if job is None or j.id == job]
    jobs = [(j.id, j.ckpt_dir, j.queue_id) for j in listed if j.ckpt_dir]
    if job is not None and not listed:
        raise NoSuchJob(f"{link.name} has no job {job!r} with a checkpoint dir")
    out: list[tuple[str, PullResult]] = []
    for j in listed:
        files = unit_files(j)
        if not files or j.ckpt_units is None or not j.ckpt_units.cwd:
            continue
        cwd = j.ckpt_units.cwd
        try:
            local = job_dir(root, link.name, j.id) / "cwd"
        except UnsafePath as exc:
            out.append((j.id, PullResult(link.name, j.id, cwd, "", refused=str(exc))))
            continue
        try:
            out.append((j.id, await pull(link, cwd, local, job=units_key(j.id), only=files,
                                         queue_id=j.queue_id, method=method)))
        except PullError as exc:
            out.append((j.id, PullResult(link.name, j.id, cwd, str(local),
                                         manifest_complete=False, manifest_reason=str(exc))))
    for jid, ckpt_dir, queue_id in jobs:

        def progress(p: Progress, jid: str = jid) -> None:
            if on_progress is not None:
                on_progress(jid, p)

        try:
            local = job_dir(root, link.name, jid)  # the id is the box's text
        except UnsafePath as exc:
            # Said in the pull's report, the others still pull; nothing written or recorded.
            out.append((jid, PullResult(link.name, jid, ckpt_dir, "", refused=str(exc))))
            continue
        try:
            out.append((jid, await pull(link, ckpt_dir, local, job=jid, queue_id=queue_id,
                                        on_progress=progress, method=method)))
        except PullError as exc:  # this job's manifest or dir: the next job is still pulled
            out.append((jid, PullResult(link.name, jid, ckpt_dir, str(local),
                                        manifest_complete=False, manifest_reason=str(exc))))
    return out


async def check_gate(link: HostLink, mounts: Sequence[str] = ()) -> GateResult:
    """I/O for the gate: one snapshot, the job list, each job's manifest, the records.
    ``mounts``: the host's watched mounts (tui/fleet/live.py watched_mounts), so the probe
    resolves the profile's ~ paths for the destroy check."""
    snapshot = read_snapshot(await link.poll({"mounts": list(mounts)}))
    jobs = await queue_jobs(link, units=True)
    wiped = destroy_wiped_mounts(_profile(link.host), snapshot) \
        if teardown_destroys(link.host.teardown_command) else ()
    outputs: dict[str, list[dict[str, Any]] | None] = {}
    units: dict[str, JobUnits] = {}
    for job in jobs:
        if any(a.start is not None for a in job.attempts):
            units[job.id] = await _job_units(link, job, wiped)
        if not job.ckpt_dir:
            continue
        doc = await take_manifest(link, job.ckpt_dir)
        if doc.get("complete"):
            outputs[job.id] = doc["files"]
        elif str(doc.get("reason") or "").startswith("not a directory"):
            outputs[job.id] = []  # the job never wrote a checkpoint dir
        else:
            outputs[job.id] = None
    if not snapshot.jobs and jobs:
        # The probe's queue view is bounded; fall back to the full list for finality.
        snapshot = with_jobs(snapshot, jobs)
    return evaluate(link.name, snapshot, load_records(), outputs,
                    queues={j.id: j.queue_id for j in jobs},
                    expected_helper_sha=link.archive.sha256,
                    run_dirs=await run_dirs(link, jobs), wiped=wiped, units=units)


def unit_files(job: Job) -> list[str]:
    """The files of ``job``'s checkpoint units and --output matches, relative to its cwd."""
    found = job.ckpt_units
    if found is None:
        return []
    return list(dict.fromkeys([*(f for u in found.units for f in u.files), *found.outputs]))


async def _job_units(link: HostLink, job: Job, wiped: Sequence[WipedMount]) -> JobUnits:
    """The gate's view of one job's own checkpoints: the box's manifest of their files."""
    found = job.ckpt_units
    if found is None:
        return JobUnits(None, (), (), [])
    files = unit_files(job)
    entries: list[dict[str, Any]] | None = []
    if files and found.cwd:
        try:
            doc = await take_manifest(link, found.cwd, files)
            entries = doc["files"] if doc.get("complete") else None
        except PullError:
            entries = None
    synced = job.sync is not None and job.sync.state == "synced"
    return JobUnits(found.source, tuple((u.path, u.step, u.files) for u in found.units),
                    found.outputs, entries, found.writing,
                    outputs_kept=synced and wiped_by_destroy(job.ckpt_dir, wiped) is None,
                    cut=found.cut)


def _profile(host: HostConfig) -> Profile | None:
    try:
        return load_profile(host.profile)
    except ProfileError:
        return None  # "local" and unknown names: no mounts to judge


def run_dir_args(jobs: Sequence[Job]) -> list[str]:
    """``CWD SINCE`` for each cwd a job ran in, since its earliest start there."""
    since: dict[str, float] = {}
    for job in jobs:
        starts = [a.start for a in job.attempts if a.start is not None]
        if job.cwd and starts:
            since[job.cwd] = min(since.get(job.cwd, float("inf")), *starts)
    return [a for cwd, t in sorted(since.items()) for a in (cwd, repr(t))]


async def run_dirs(link: HostLink, jobs: Sequence[Job]) -> RunDirs | str:
    """The tracker run dirs the jobs wrote under their cwds (U20), or why there is no answer."""
    args = run_dir_args(jobs)
    if not args:
        return RunDirs.read({})
    result = await link.helper("rundirs", "--", *args)  # a cwd is never read as an option
    try:
        answer = read_rundirs(load_answer(result.stdout))
    except ValueError:
        answer = None
    if answer is None or not answer.ok:
        return f"rundirs failed ({result.failure()})"
    return answer


def result_lines(jid: str, result: PullResult) -> list[str]:
    """What a pull of one job did: where its files went, then a line per file, for the CLI
    and the room. Inert: file names, reasons and errors in them are the box's."""
    if result.refused:
        return [sanitize_line(f"{jid}: {result.refused}")]
    if not result.files and (result.manifest_reason or "").startswith("not a dir"):
        return [sanitize_line(f"{jid}: nothing to pull ({result.manifest_reason})")]
    verified = sum(f.status == "verified" for f in result.files)
    counted = f"{verified} file(s)" if verified == len(result.files) else \
        f"{verified} of {len(result.files)} file(s)"
    # Where the files went and what really crossed the wire (resumed and verified bytes
    # already here do not count).
    lines = [f"{jid}: {counted} verified in {result.local_dir} "
             f"({fmt_bytes(result.bytes_transferred)} received)"]
    lines += [f"{jid}/{f.path}: {f.status}"
             f"{' by ' + f.verified_by if f.verified_by else ''}"
             f"{': ' + f.detail if f.detail else ''}" for f in result.files]
    if result.note:
        lines.append(f"{jid}: {result.note}")
    if not result.manifest_complete:
        lines.append(f"{jid}: manifest cut ({result.manifest_reason}): pull again")
    return [sanitize_line(line) for line in lines]


def pull_fix(host: str, results: Sequence[tuple[str, PullResult]]) -> str:
    """What to do about pulls that did not bring everything home, by what went wrong: a
    refused file (a symlink, a path outside the pull dir) is never pulled again, a failed or
    cut transfer is, and resumes."""
    bad = [r for _, r in results if not r.ok]
    refused = any(f.status == "refused" for r in bad for f in r.files)
    again = any(not r.manifest_complete or any(f.status == "failed" for f in r.files)
                for r in bad)
    fixes = []
    if again:
        fixes.append(f"P (or gpuroom pull {shlex.quote(host)}) again: it resumes; a file still "
                     "being written differs until its job stops writing it")
    if refused:
        fixes.append("a symlink or a path outside the pull dir is never pulled: remove it from "
                     "the job's checkpoint dir on the box, then pull again")
    return "; ".join(fixes)


class PullRecords:
    """The pull records (pulls.json) for the danger clock, re-read only when the file
    changes: a `gpuroom pull` in another terminal counts as soon as it is written."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = state_file(path)
        self._seen: tuple[int, int] | None = None
        self._records: list[dict[str, Any]] = []

    def current(self) -> list[dict[str, Any]]:
        """The records as the file holds them now; none when it is missing or unreadable
        (the clock then says "not pulled", the safe side; the gate reports the file)."""
        try:
            st = self.path.stat()
        except OSError:
            self._seen, self._records = None, []
            return []
        key = (st.st_mtime_ns, st.st_size)
        if key != self._seen:
            try:
                self._records = load_records(self.path)
            except (GpuroomError, OSError):
                self._records = []
            self._seen = key
        return self._records
