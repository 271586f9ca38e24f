"""The teardown gate (principle 9): is it safe to stop paying for this host?

Pure: it reads the latest snapshot, the box's current manifests of each job's checkpoint dir
and the pull records, and answers a checklist. gpuroom never stops or deletes anything on
its own; "safe" only lets the user's own teardown step be offered.

``job_pull`` is the one answer to "are this job's outputs home?": the gate asks it with the
box's full manifest, the danger clock (tui/rules/clock.py) with what a poll shows of the dir,
so the two never disagree about a pull the user made.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.rules.gate_items import GateItem, gpu_work_item, outputs_item, rundirs_item
from gpuroom.tui.rules.job_leftovers import survivors_item
from gpuroom.tui.rules.survival import WipedMount, wiped_by_destroy
from gpuroom.tui.snapshot import RunDirs, Snapshot

TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")
LOAD_ITEM = "checkpoints load-checked (an extra: an exact copy is home)"
TORCH_EXTRA = "pip install 'gpuroom[torch]'"  # tui/transport/pull.py's, for the same advice


@dataclass
class GateResult:
    host: str
    safe: bool
    items: list[GateItem] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "safe": self.safe,
                "items": [{"name": i.name, "ok": i.ok, "detail": i.detail} for i in self.items]}


def _queue_item(snapshot: Snapshot | None) -> GateItem:
    name = "queue finished or stopped"
    if snapshot is None:
        return GateItem(name, False, "no snapshot from this host yet")
    if snapshot.queue is None:
        return GateItem(name, False, "the snapshot has no queue section")
    live = [f"{j.key} {j.state}" for j in snapshot.jobs if j.state not in FINAL_STATES]
    if live:
        return GateItem(name, False, "not final: " + ", ".join(live[:5])
                        + (f" (+{len(live) - 5})" if len(live) > 5 else ""))
    return GateItem(name, True, f"{len(snapshot.jobs)} jobs, all final")


Record = Mapping[str, Any]  # one entry of pulls.json (tui/transport/pull.py record_pull)


def _latest_record(records: Sequence[Record], host: str, job: str,
                   queue_id: str | None) -> Record | None:
    # Job ids start again at j1 in a new queue: a pull of an earlier queue's job of that id
    # (or one recorded before queues had identities) is not this job's.
    mine = [r for r in records if r.get("host") == host and str(r.get("job")) == job
            and r.get("queue_id") == queue_id]
    return max(mine, key=lambda r: float(r.get("time") or 0)) if mine else None


@dataclass(frozen=True)
class JobPull:
    """One job's files on the box against its latest pull record."""

    job: str
    files: int  # files in the job's checkpoint dir on the box
    record: Record | None
    pulled: tuple[tuple[str, Record], ...]  # (path, the record's entry) of each file home
    stale: tuple[str, ...]  # on the box, and not home as it is there now

    @property
    def needs_pull(self) -> bool:
        """Something on the box is not home: never pulled, or written since the pull."""
        return self.files > 0 and (self.record is None or bool(self.stale))


def _home(entry: Mapping[str, Any], got: Record | None, pulled_at: float | None) -> bool:
    """Is the box's file ``entry`` the one the record ``got`` says was pulled?

    A manifest entry carries its sha256: equal hashes or not home. A poll's entry carries
    size and mtime only: the same size, and not modified after the pull (a box clock ahead
    of this one can only make it say "not pulled", never hide a file).
    """
    if got is None:
        return False
    if "sha256" in entry:
        return bool(got.get("sha256") == entry["sha256"])
    size = entry.get("size")
    if size is not None and got.get("size") != size:
        return False
    mtime = entry.get("mtime")
    return mtime is None or pulled_at is None or float(mtime) <= pulled_at


def job_pull(host: str, job: str, entries: Sequence[Mapping[str, Any]],
             records: Sequence[Record], queue_id: str | None = None) -> JobPull:
    """Which of ``entries`` (the box's files of ``job``'s checkpoint dir, paths relative to
    it) the pull records of ``job`` in the queue ``queue_id`` have home; no files means
    nothing to pull."""
    files = [e for e in entries if e.get("kind") == "file"]
    record = _latest_record(records, host, job, queue_id)
    if record is None:
        return JobPull(job, len(files), None, (), tuple(str(e.get("path")) for e in files))
    have = {f.get("path"): f for f in record.get("files") or [] if isinstance(f, Mapping)}
    time_ = record.get("time")
    pulled_at = float(time_) if isinstance(time_, (int, float)) else None
    pulled: list[tuple[str, Record]] = []
    stale: list[str] = []
    for e in files:
        path = str(e.get("path"))
        got = have.get(e.get("path"))
        if got is not None and _home(e, got, pulled_at):
            pulled.append((path, got))
        else:
            stale.append(path)
    return JobPull(job, len(files), record, tuple(pulled), tuple(stale))


UNITS_SUFFIX = " units"  # the pull record of a job's own checkpoints, beside its ckpt dir's


def units_key(job: str) -> str:
    """The pull records' job key for ``job``'s units (pulled from its cwd, not its ckpt dir)."""
    return job + UNITS_SUFFIX


@dataclass(frozen=True)
class JobUnits:
    """What a job that ran left on the box besides gpuroom's dir: its program's checkpoint
    units (declared or discovered) and its --output files, with the box's manifest of their
    files under the cwd (None: it could not be taken)."""

    source: str | None
    units: tuple[tuple[str, int | None, tuple[str, ...]], ...]  # (path, step, its files)
    outputs: tuple[str, ...]
    entries: list[dict[str, Any]] | None
    writing: tuple[str, ...] = ()
    outputs_kept: bool = False  # synced to a durable dir the teardown does not wipe
    cut: str | None = None


def _listed_short(parts: Sequence[str], n: int = 8) -> str:
    return "; ".join(parts[:n]) + (f" (+{len(parts) - n})" if len(parts) > n else "")


def _units_item(host: str, units: Mapping[str, JobUnits], records: Sequence[Record],
                job_outputs: Mapping[str, list[dict[str, Any]] | None],
                queues: Mapping[str, str | None]) -> GateItem:
    """Per job: each checkpoint unit and --output file, and whether it is home. A job with
    nothing seen is said, never counted as safe: gpuroom cannot tell "wrote nothing" from
    "wrote it where nobody looked"."""
    name = "every job's checkpoints and outputs home (declared, discovered or gpuroom's)"
    bad: list[str] = []
    good: list[str] = []
    for job, seen in sorted(units.items()):
        own = [e for e in job_outputs.get(job) or [] if e.get("kind") == "file"]
        if seen.entries is None:
            bad.append(f"{job}: its checkpoints could not be listed")
            continue
        if not seen.units and not seen.outputs:
            if own:
                good.append(f"{job}: {len(own)} file(s) in $GPUROOM_CKPT_DIR (gpuroom's)")
            else:
                bad.append(f"{job}: no checkpoint seen (name it with queue add --ckpt PATH, "
                           "or write it under the job's cwd or $GPUROOM_CKPT_DIR)")
            continue
        state = job_pull(host, units_key(job), seen.entries, records, queues.get(job))
        listed = {str(e.get("path")) for e in seen.entries if e.get("kind") == "file"}
        stale = set(state.stale)
        parts: list[str] = []
        missing = False
        for path, step, files in seen.units:
            home = bool(files) and all(f in listed and f not in stale for f in files)
            missing = missing or not home
            what = f"step {step}" if step is not None else "step ?"
            parts.append(f"{path} ({seen.source}, {what}) {'home' if home else 'NOT home'}")
        for path in seen.outputs:
            home = path in listed and path not in stale
            kept = not home and seen.outputs_kept
            missing = missing or not (home or kept)
            parts.append(f"--output {path} " + ("home" if home else "synced to a kept durable "
                                                 "dir" if kept else "NOT home"))
        for path in seen.writing:
            missing = True
            parts.append(f"{path} still being written")
        if seen.cut:
            missing = True
            parts.append(f"the search was cut ({seen.cut}): name them with --ckpt")
        (bad if missing else good).append(f"{job}: " + ", ".join(parts))
    if bad:
        return GateItem(name, False, _listed_short(bad) + f"; gpuroom pull {shlex.quote(host)} "
                        "brings them home")
    return GateItem(name, True, _listed_short(good) or "no job ran")


def _destroyed(snapshot: Snapshot | None, jobs: Sequence[str],
               wiped: Sequence[WipedMount]) -> list[str]:
    """``jobs`` whose checkpoint dir is on a mount the teardown wipes, as "dir (job, on
    mount, which survives a stop only)"."""
    ckpt = {j.id: j.ckpt_dir for j in snapshot.jobs} if snapshot is not None else {}
    out = []
    for job in jobs:
        mount = wiped_by_destroy(ckpt.get(job), wiped)
        if mount is not None:
            kind = "which survives a stop, not a destroy" if mount.survives_stop else \
                "which survives neither a stop nor a destroy"
            out.append(f"{ckpt.get(job)} of {job} (on {mount.path}, {kind})")
    return out


def _load_item(loaded: int, not_loaded: Sequence[str], failed: Sequence[str]) -> GateItem:
    """The load check is an extra: the gate needs exact copies (the hash item), so this item
    holds whatever it says, and says what was not checked or failed and what to do."""
    parts = [f"{loaded} loaded on this machine"] if loaded else []
    if failed:
        parts.append("load check refused or failed (the box has the same bytes; `gpuroom pull` "
                     "says why and what to do): " + "; ".join(failed[:5])
                     + (f" (+{len(failed) - 5})" if len(failed) > 5 else ""))
    if not_loaded:
        parts.append("hash-verified, not load-verified: " + ", ".join(not_loaded[:5])
                     + (f" (+{len(not_loaded) - 5})" if len(not_loaded) > 5 else "")
                     + f" ({TORCH_EXTRA} on this machine, then pull again, to check them)")
    return GateItem(LOAD_ITEM, True, "; ".join(parts) or "no .pt/.pth/.ckpt pulled")


def evaluate(host: str, snapshot: Snapshot | None, records: Sequence[Record],
             job_outputs: dict[str, list[dict[str, Any]] | None], *,
             expected_helper_sha: str | None = None,
             run_dirs: RunDirs | str | None = None,
             wiped: Sequence[WipedMount] = (),
             units: Mapping[str, JobUnits] | None = None,
             queues: Mapping[str, str | None] | None = None) -> GateResult:
    """The checklist for one host.

    ``job_outputs``: job id -> the box's current manifest entries of that job's checkpoint
    dir (None when the manifest could not be taken or was cut). Jobs with no files need no
    pull. ``run_dirs``: the box's tracker run dirs under the jobs' cwds, or why they could not
    be listed; None leaves that item out. ``wiped``: the profile's mounts the host's teardown
    destroys (tui/rules/survival.py destroy_wiped_mounts; empty when it only stops): a job
    whose checkpoints there are not home is named with the mount (principle 4). ``units``:
    each job that ran, its own program's checkpoints and --output files (None leaves that
    item out). ``queues``: each job's queue identity (default: as ``snapshot`` shows them).
    """
    items = [_queue_item(snapshot)]
    missing, stale, unverified, not_loaded, load_failed = [], [], [], [], []
    loaded = 0
    pulled_files = 0
    not_home: list[str] = []  # jobs with a file on the box that is not home as it is there
    if queues is None:
        queues = {j.id: j.queue_id for j in snapshot.jobs} if snapshot is not None else {}
    for job, entries in sorted(job_outputs.items()):
        if entries is None:
            missing.append(f"{job} (its outputs could not be listed)")
            continue
        state = job_pull(host, job, entries, records, queues.get(job))
        if not state.files:
            continue
        if state.record is None or state.stale:
            not_home.append(job)
        if state.record is None:
            missing.append(job)
            continue
        # Written or changed on the box since the pull: the local copy is not it.
        stale += [f"{job}/{path}" for path in state.stale]
        for path, got in state.pulled:
            pulled_files += 1
            if got.get("verified_by") not in ("hash", "load"):
                unverified.append(f"{job}/{path}")
            if not path.endswith(TORCH_SUFFIXES):
                continue
            if got.get("verified_by") == "load":
                loaded += 1
            elif got.get("load_error"):
                load_failed.append(f"{job}/{path} ({str(got.get('load_error'))[:120]})")
            else:
                not_loaded.append(f"{job}/{path}")
    doomed = _destroyed(snapshot, not_home, wiped)
    detail = "not pulled: " + ", ".join(missing) if missing else f"{len(job_outputs)} jobs checked"
    if doomed:
        detail += "; the teardown destroys " + "; ".join(doomed[:5]) + (
            f" (+{len(doomed) - 5})" if len(doomed) > 5 else "") + \
            f": gpuroom pull {shlex.quote(host)} first"
    items.append(GateItem("every job's outputs pulled", not missing and not doomed, detail))
    bad_hash = stale + unverified
    items.append(GateItem("every pulled file hash-verified", not bad_hash and not missing,
                          "differs from the box or unverified: " + ", ".join(bad_hash[:5])
                          if bad_hash else f"{pulled_files} files match the box's sha256"))
    items.append(_load_item(loaded, not_loaded, load_failed))
    if units is not None:
        items.append(_units_item(host, units, records, job_outputs, queues))
    items.append(gpu_work_item(snapshot))
    jobs = snapshot.jobs if snapshot is not None else ()
    items.append(outputs_item(jobs))
    if run_dirs is not None:
        items.append(rundirs_item(jobs, run_dirs))
    if (left := survivors_item(snapshot)) is not None:
        items.append(left)
    if expected_helper_sha is not None:
        got_sha = snapshot.helper.sha256 if snapshot is not None else None
        items.append(GateItem("deployed helper matches", got_sha == expected_helper_sha,
                              f"box runs {str(got_sha)[:12]}, expected "
                              f"{expected_helper_sha[:12]}"))
    return GateResult(host, all(i.ok for i in items), items)
