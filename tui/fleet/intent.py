"""What the user asked for when a job was added from this jump host: the only source of a
moved job's command and of whether it is mirrored or failed over.

A box's answers are never trusted (any job there can rewrite what its helper says), so the
jump host keeps its own record, ``intents.json`` beside mirror.json (mode 0600: env values may
be tokens), written atomically under a lock by every path that adds a job from here: `queue
add`, the room's ``a`` key, `queue move` and a failover (the new job inherits the intent and
names the job it continues). Mirror, move and failover act only on jobs in this record and
take argv, cwd, env and GPUs from it; a job the box merely reports is shown, never moved.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from gpuroom.tui.config import HostConfig
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job, queue_identity
from gpuroom.tui.statefile import locked, write_private

INTENTS_FILE = "intents.json"
# Shown on the box beside the user's env, so `queue show` there says what was asked; the jump
# host never reads them back (a job can set them on a job it adds itself).
MIRROR_ENV = "GPUROOM_MIRROR"
FAILOVER_ENV = "GPUROOM_FAILOVER"
# The helper's job ids (jN, jN_i, a queue's "name/jN"); anything else is not recorded.
_JOB_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Intent:
    """One job as the user added it from this jump host (or as a move re-added it)."""

    host: str
    job: str  # the id the box answered at add: the record's key, never its command
    argv: tuple[str, ...]
    added_at: float
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    gpus: int | None = None
    vram_mib: int | None = None
    retries: int = 0
    retry_on_exit: bool = False
    outputs: tuple[str, ...] = ()
    ckpts: tuple[str, ...] = ()  # --ckpt: the program's own checkpoint paths
    durable_dir: str | None = None
    priority: int | None = None
    mirror: bool = False
    failover: tuple[str, ...] = ()  # the hosts --failover named, in the user's order
    moved_from: str | None = None  # "A/j7": the job this one continues (move, failover)
    # the identity of the queue the box added it to (tui/snapshot.py queue_identity): a new
    # queue's j1 is another job; a record without one belongs to no queue there is now
    queue_id: str | None = None

    @property
    def wants_mirror(self) -> bool:
        return self.mirror or bool(self.failover)

    def box_env(self) -> dict[str, str]:
        """The env the job is added with: the user's, and the wishes for display."""
        flags = {MIRROR_ENV: "1"} if self.wants_mirror else {}
        if self.failover:
            flags[FAILOVER_ENV] = ",".join(self.failover)
        return {**self.env, **flags}

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["argv"], doc["outputs"], doc["failover"] = (list(self.argv), list(self.outputs),
                                                        list(self.failover))
        doc["ckpts"] = list(self.ckpts)
        return doc

    @classmethod
    def from_json(cls, raw: Any) -> Intent | None:
        """None for an entry of another shape (skipped, said in the log)."""
        if not isinstance(raw, dict):
            return None
        names = {f.name for f in fields(cls)}
        try:
            doc = {k: v for k, v in raw.items() if k in names}
            for key in ("argv", "outputs", "failover", "ckpts"):
                value = doc.get(key, [])
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    return None
                doc[key] = tuple(value)
            env = doc.get("env", {})
            if not isinstance(env, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                return None
            doc["queue_id"] = queue_identity(doc.get("queue_id"))
            intent = cls(**doc)
        except TypeError:
            return None
        ok = isinstance(intent.host, str) and isinstance(intent.job, str) and bool(intent.argv)
        return intent if ok else None


def check_job_id(host: str, job: Any) -> str:
    """The id a box answered for a job just added, if it is one of the helper's ids."""
    if isinstance(job, str) and _JOB_ID_RE.fullmatch(job):
        return job
    raise GpuroomError(f"{host} answered {sanitize_line(str(job))!r} as the id of the job it "
                       "added: not a job id, so it is not recorded here and never mirrored "
                       "or moved", f"gpuroom queue ls {host}")


def move_target_refusal(host: HostConfig) -> str | None:
    """Why ``host`` may not receive a moved or failed-over job (None: it may). This machine
    runs nothing a box's job could have asked for unless hosts.toml says so in its words."""
    if host.local and not host.accept_moves:
        return (f"{host.name} is this machine (local = true): jobs are never moved or failed "
                "over onto it")
    return None


def accept_moves_fix(host: str) -> str:
    return (f"pick another host (gpuroom hosts list), or write accept_moves = true under "
            f"[hosts.{host}] in hosts.toml if jobs may run on this machine")


class IntentBook:
    """intents.json: each job added from this jump host, keyed by host and job id."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or Path(platformdirs.user_state_dir("gpuroom")) / INTENTS_FILE
        self._cache: tuple[tuple[int, int, int], dict[tuple[str, str | None, str], Intent]] \
            | None = None

    def _load(self) -> dict[tuple[str, str | None, str], Intent]:
        try:
            st = self.path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("intents: %s unreadable (%s)", self.path, exc)
            return {}
        out: dict[tuple[str, str | None, str], Intent] = {}
        for raw in doc.get("jobs", []) if isinstance(doc, dict) else []:
            intent = Intent.from_json(raw)
            if intent is None:
                log.warning("intents: %s: an entry of another shape skipped", self.path)
                continue
            out[(intent.host, intent.queue_id, intent.job)] = intent
        self._cache = (key, out)
        return out

    def get(self, host: str, job: str, queue_id: str | None) -> Intent | None:
        """``job``'s record in the queue ``queue_id``; a queue without an identity has none."""
        return None if queue_id is None else self._load().get((host, queue_id, job))

    def host(self, host: str) -> list[Intent]:
        """Every record of ``host``, of any queue (the doctor's; never to act on a job by)."""
        return [i for i in self._load().values() if i.host == host]

    def newest(self, host: str, job: str) -> Intent | None:
        """The newest record of any ``host``'s queue under the id ``job`` (the host cannot be
        asked which queue it has now)."""
        found = [i for (h, q, j), i in self._load().items()
                 if (h, j) == (host, job) and q is not None]
        return max(found, key=lambda i: i.added_at, default=None)

    def for_jobs(self, host: str, jobs: Iterable[Job]) -> dict[str, Intent]:
        """The records of ``jobs`` (a poll of ``host``), by job id, each in its own queue."""
        book = self._load()
        return {j.id: i for j in jobs if j.queue_id is not None
                and (i := book.get((host, j.queue_id, j.id))) is not None}

    def record(self, intent: Intent) -> None:
        """Add (or replace) ``intent``: under a lock, as `queue add` in a shell and the room
        or `gpuroom watch` may write at once."""
        check_job_id(intent.host, intent.job)
        with locked(self.path):
            self._cache = None
            jobs = dict(self._load())
            jobs[(intent.host, intent.queue_id, intent.job)] = intent
            write_private(self.path, {"version": 1,
                                       "jobs": [i.to_json() for i in jobs.values()]})
