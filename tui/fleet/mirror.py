"""The mirror: while a job runs, its newest committed checkpoint is pulled home (issue 21).

A box rented as spot or interruptible can vanish with its disk; the copy that counts is the
one on the jump host. Each poll that shows a mirrored job's checkpoint dir changed starts one
cycle for that host (never two at once on one host): list the dir without hashing, take the
newest committed ``ckpt-<step>.pt`` (remote/checkpoint.py's names; a save in progress is a
dot-named temp file and never matches), and pull only that file with tui/transport/pull.py,
which resumes, checks the box's sha256 and load-tests it. Only a verified file is recorded
in ``mirror.json`` as home; a pull cut short leaves its ``.part`` and no record, so nothing
half-copied is ever counted. The newest ``mirror_keep`` checkpoints of each job stay home.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import platformdirs

from gpuroom.profiles import ProfileError, load_profile
from gpuroom.remote.checkpoint import checkpoint_step
from gpuroom.tui.config import HostConfig, Settings
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.intent import INTENTS_FILE, Intent, IntentBook
from gpuroom.tui.fleet.outputs import pull_root
from gpuroom.tui.localpath import job_dir, safe_local_path
from gpuroom.tui.model import MirrorHome
from gpuroom.tui.present.format import fmt_bytes
from gpuroom.tui.snapshot import Job, QueueSpec, load_answer, queue_identity, read_queue_spec
from gpuroom.tui.snapshot import Snapshot as SnapshotView
from gpuroom.tui.statefile import locked, write_private
from gpuroom.tui.transport.link import HostLink, LinkError
from gpuroom.tui.transport.pull import pull, take_manifest

LIST_DEADLINE_S = 30.0

log = logging.getLogger(__name__)


def mirror_default(host: HostConfig) -> bool:
    """Whether ``host``'s jobs are mirrored without being asked: the host's ``mirror``
    setting, else its ``spot`` cloud (a spot instance), else whether its profile's
    platform rents boxes that can vanish (spot_available = true)."""
    if host.mirror is not None:
        return host.mirror
    if host.spot:  # hosts.toml spot = "aws" | "gcp" | ...: a spot instance
        return True
    try:
        return load_profile(host.profile).spot_available is True
    except (ProfileError, GpuroomError, OSError):
        return False  # the doctor reports a broken profile; no mirror is the quiet side


def wants_mirror(host: HostConfig, job: Job, intent: Intent | None,
                 default: bool | None = None) -> bool:
    """Whether ``job`` is mirrored: only a job added from this jump host (``intent``, its
    record), when `queue add --mirror`/`--failover` asked or the host mirrors by default;
    what the box says of the job's env is never asked. ``default``: ``mirror_default(host)``
    when the caller has it already."""
    if intent is None or not job.ckpt_dir:
        return False
    if intent.wants_mirror:
        return True
    return mirror_default(host) if default is None else default


# (inode, mtime, size) and the parsed document of each state file last read: the fleet
# asks for homes and moves several times a poll of every host, and the files change only
# when a pull or a move lands (written by rename, so a new inode and mtime).
_READ: dict[Path, tuple[tuple[int, int, int], Any]] = {}


def read_state(path: Path, what: str) -> Any:
    """The JSON document of one of the mirror's state files; None when it does not exist or
    cannot be read (said in the log). Read-only: the document may be shared."""
    try:
        st = path.stat()
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit = _READ.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: %s unreadable (%s)", what, path, exc)
        return None
    _READ[path] = (key, doc)
    return doc


def state_file(path: Path | None = None) -> Path:
    return path or Path(platformdirs.user_state_dir("gpuroom")) / "mirror.json"


def mirror_dir(host: HostConfig, job: str, queue_id: str) -> Path:
    """Where the mirror keeps ``job``'s checkpoints: beside `gpuroom pull`'s dirs, never in
    one (pruning to the newest K must not delete what a full pull brought home), one dir per
    queue identity (a new queue's j1 is another job than an old one's). The job id is the
    box's text: one the helper would not mint (``../..``), or a symlink there leading out, is
    refused (UnsafePath, a GpuroomError naming the host and the job)."""
    if queue_identity(queue_id) is None:
        raise GpuroomError(f"{host.name}/{job}: its queue has no identity, so nothing of it is "
                           "kept here", f"gpuroom queue ls {host.name} (a current helper gives "
                           "each queue one)")
    return job_dir(pull_root(host) / "mirror" / queue_id, host.name, job)


class MirrorState:
    """mirror.json: the newest verified checkpoint home per host/job, written atomically."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = state_file(path)
        # pull()'s own records of the mirror's pulls: apart from pulls.json, where a record
        # of one checkpoint would replace a full `gpuroom pull` of the job (the gate's view)
        self.pulls = self.path.with_name("mirror-pulls.json")
        # What the user asked for at add (tui/fleet/intent.py): the jobs mirrored and moved,
        # and the command `queue move` re-adds, never the box's word.
        self.intents = IntentBook(self.path.with_name(INTENTS_FILE))

    def load(self) -> dict[tuple[str, str | None, str], MirrorHome]:
        """Every home by (host, queue identity, job); one from before identities has None."""
        doc = read_state(self.path, "mirror")
        out: dict[tuple[str, str | None, str], MirrorHome] = {}
        for raw in doc.get("homes", []) if isinstance(doc, dict) else []:
            try:
                home = MirrorHome(**raw)
            except TypeError:
                continue  # an entry of another shape: skipped, the next pull writes it anew
            out[(home.host, home.queue_id, home.job)] = home
        return out

    def home(self, host: str, queue_id: str | None, job: str) -> MirrorHome | None:
        """``job``'s home in the queue ``queue_id``; a queue without an identity owns none."""
        return None if queue_id is None else self.load().get((host, queue_id, job))

    def host(self, host: str, jobs: Iterable[Job]) -> dict[str, MirrorHome]:
        """The homes of ``jobs`` (a poll of ``host``), by job id, each in its own queue."""
        homes = self.load()
        return {j.id: h for j in jobs if j.queue_id is not None
                and (h := homes.get((host, j.queue_id, j.id))) is not None}

    def put(self, home: MirrorHome) -> None:
        """Add (or replace) ``home``: under the file's lock, re-read there, as the room and
        `gpuroom watch` may both be mirroring."""
        with locked(self.path):
            homes = self.load()
            homes[(home.host, home.queue_id, home.job)] = home
            write_private(self.path,
                          {"version": 1, "homes": [asdict(h) for h in homes.values()]})


async def read_spec(link: HostLink, job: str) -> QueueSpec:
    """``queue show``'s answer for ``job``: its queue's dir and config, and the job with its
    env values (``--with-env``: the box redacts them in every other view, U34)."""
    result = await link.helper("queue", "show", "--with-env", "--", job, timeout_s=60.0)
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise LinkError(link.name, f"queue show {job} failed ({result.failure()})") from None
    spec = read_queue_spec(doc)
    if not spec.jobs or spec.jobs[0].id != job:
        raise GpuroomError(f"{link.name} has no job {job!r}", f"see gpuroom queue ls "
                           f"{link.name}")
    return spec


@dataclass(frozen=True)
class MirrorOutcome:
    """What one mirror cycle of a job did; ``line`` is for `gpuroom watch` and the log."""

    host: str
    job: str
    # home | current | nothing | busy (another process pulls it now) | failed |
    # fenced, failover (tui/fleet/live.py _fence, _failover)
    status: str
    step: int | None = None
    detail: str = ""
    received: int = 0  # bytes that crossed the link (a resumed pull: only the rest)

    @property
    def line(self) -> str:
        where = f"{self.host}/{self.job}"
        if self.status == "home":
            return f"{where}: ckpt step {self.step} home ({self.detail})"
        if self.status == "failed":
            return f"{where}: mirror failed: {self.detail}"
        if self.status in ("fenced", "failover"):
            return f"{where}: {self.status} ({self.detail})"
        if self.status == "busy":
            return f"{where}: ckpt step {self.step} {self.detail}"
        if self.status == "current":
            return f"{where}: ckpt step {self.step} already home"
        return f"{where}: no committed checkpoint yet"


def committed(files: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The manifest's committed checkpoints (regular files named ckpt-<step>.pt at the top
    of the dir), oldest first."""
    out = []
    for entry in files:
        rel = entry.get("path")
        if entry.get("kind") != "file" or not isinstance(rel, str) or "/" in rel:
            continue
        step = checkpoint_step(rel)
        if step is not None:
            out.append((step, entry))
    return sorted(out, key=lambda se: se[0])


def prune(local: Path, keep: int) -> list[str]:
    """Keep the newest ``keep`` checkpoints home; older ones, and the .part of any step older
    than the newest (a pull that will never be resumed), go."""
    steps = sorted({s for p in local.glob("ckpt-*.pt") if (s := checkpoint_step(p)) is not None})
    if not steps:
        return []
    kept = set(steps[-keep:])
    removed = []
    for p in sorted(local.glob("ckpt-*.pt*")):
        part = p.name.endswith(".part")
        step = checkpoint_step(p.name.removesuffix(".part"))
        if step is None or (step in kept if not part else step >= steps[-1]):
            continue
        p.unlink(missing_ok=True)
        removed.append(p.name)
    return removed


async def mirror_job(link: HostLink, host: HostConfig, job: str, ckpt_dir: str,
                     queue_id: str, *, settings: Settings, state: MirrorState,
                     clock: Callable[[], float] = time.time) -> MirrorOutcome:
    """One cycle for one job: the newest committed checkpoint home, verified, or why not.

    A LinkError propagates (the host is gone; the next poll says so); the .part stays for
    the resume."""
    # defer_above=0: a listing, not a hashing; the pull asks the box for the one digest.
    doc = await take_manifest(link, ckpt_dir, defer_above=0, deadline_s=LIST_DEADLINE_S)
    found = committed(doc["files"])
    if not found:
        return MirrorOutcome(host.name, job, "nothing")
    step, entry = found[-1]
    have = state.home(host.name, queue_id, job)
    if have is not None and have.step >= step:
        return MirrorOutcome(host.name, job, "current", have.step)
    local = mirror_dir(host, job, queue_id)
    result = await pull(link, ckpt_dir, local, job=job, only=[str(entry["path"])],
                        bwlimit_kbps=settings.mirror_bwlimit_kbps, state_path=state.pulls,
                        queue_id=queue_id)
    if result.busy:
        return MirrorOutcome(host.name, job, "busy", step, result.refused)
    fr = next((f for f in result.files if f.path == entry["path"]), None)
    if fr is None or fr.status != "verified" or fr.sha256 is None:
        # A file that arrived but did not load must not sit home under a checkpoint's name.
        if fr is not None and fr.status == "failed" and \
                (home := safe_local_path(local, fr.path)) is not None:
            home.unlink(missing_ok=True)
        why = fr.detail if fr is not None else (result.manifest_reason or "not listed")
        return MirrorOutcome(host.name, job, "failed", step, why or (fr.status if fr else ""))
    mtime = entry.get("mtime")
    home = safe_local_path(local, fr.path)
    if home is None:  # pull() wrote it through this guard; something moved it out since
        return MirrorOutcome(host.name, job, "failed", step, f"{fr.path} left {local}")
    state.put(MirrorHome(host=host.name, job=job, step=step, file=fr.path,
                         local_path=str(home), sha256=fr.sha256,
                         verified_by=fr.verified_by or "hash",
                         box_mtime=float(mtime) if isinstance(mtime, (int, float)) else None,
                         home_at=clock(), queue_id=queue_id))
    prune(local, settings.mirror_keep)
    detail = f"verified by {fr.verified_by}, {fmt_bytes(result.bytes_transferred)} received" \
        + (f"; {result.note}" if result.note else "")
    return MirrorOutcome(host.name, job, "home", step, detail, result.bytes_transferred)


class Mirror:
    """The fleet's mirroring: fed every good snapshot, it starts at most one cycle per host.

    ``on_outcome`` hears each cycle's result (the room redraws, `gpuroom watch` prints it).
    """

    def __init__(self, hosts: Mapping[str, HostConfig], links: Mapping[str, HostLink],
                 settings: Settings, *, state: MirrorState | None = None,
                 on_outcome: Callable[[MirrorOutcome], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts = hosts
        self.links = links
        self.settings = settings
        self.state = state or MirrorState()
        self.on_outcome = on_outcome
        self.clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Each host's default, read once (a profile is a TOML file; polls come every seconds)
        self._defaults = {name: mirror_default(h) for name, h in hosts.items()}
        # (path, mtime) of each job's newest checkpoint file when last acted on
        self._seen: dict[tuple[str, str], tuple[str | None, float | None]] = {}
        self._views: dict[str, SnapshotView] = {}  # each host's last good poll

    def homes(self, host: str, view: SnapshotView | None = None) -> dict[str, MirrorHome]:
        """The homes of the jobs ``view`` (a poll of ``host``; by default the last one
        observed) shows, by job id."""
        view = view if view is not None else self._views.get(host)
        return self.state.host(host, view.jobs if view is not None else ())

    def observe(self, name: str, view: SnapshotView) -> None:
        """A good poll of ``name``: start a cycle for its first job whose checkpoint dir
        changed, unless one already runs there (one transfer per host at a time)."""
        self._views[name] = view
        host = self.hosts.get(name)
        task = self._tasks.get(name)
        if host is None or (task is not None and not task.done()):
            return
        intents = self.state.intents.for_jobs(name, view.jobs)
        for job in view.jobs:
            if not wants_mirror(host, job, intents.get(job.id), self._defaults.get(name)):
                continue
            try:
                mirror_dir(host, job.id, job.queue_id or "")
            except GpuroomError as exc:
                if (name, job.id) not in self._seen:  # said once, not at every poll
                    self._seen[(name, job.id)] = (None, None)
                    if self.on_outcome is not None:
                        self.on_outcome(MirrorOutcome(name, job.id, "failed", None, exc.message))
                continue
            ckpt = job.checkpoint
            if ckpt is not None and ckpt.source not in (None, "gpuroom's"):
                ckpt = None  # the mirror copies $GPUROOM_CKPT_DIR; a unit elsewhere is not in it
            sig = (ckpt.path, ckpt.mtime) if ckpt is not None else (None, None)
            key = (name, job.id)
            before = self._seen.get(key)
            self._seen[key] = sig
            # A job first seen finished is not chased; one seen running, or changing, is.
            if sig in ((None, None), before) or (before is None and job.state != "running"):
                continue
            assert job.ckpt_dir is not None and job.queue_id is not None
            self._tasks[name] = asyncio.ensure_future(
                self._cycle(host, job.id, job.ckpt_dir, job.queue_id))
            return

    async def _cycle(self, host: HostConfig, job: str, ckpt_dir: str, queue_id: str) -> None:
        try:
            outcome = await mirror_job(self.links[host.name], host, job, ckpt_dir, queue_id,
                                       settings=self.settings, state=self.state,
                                       clock=self.clock)
        except asyncio.CancelledError:
            raise
        except (GpuroomError, OSError) as exc:
            outcome = MirrorOutcome(host.name, job, "failed", None, str(exc))
        if outcome.status in ("failed", "busy"):
            self._seen.pop((host.name, job), None)  # tried again at the next poll
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    async def idle(self) -> None:
        """Wait for the cycles running now (tests, `gpuroom watch --once`)."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the cycles: a pull cut here keeps its .part and records nothing."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
