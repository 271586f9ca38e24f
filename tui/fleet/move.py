"""`gpuroom queue move HOST JOB --to HOST2` (issue 21 item 2): the job goes on on another box.

Only a job added from this jump host moves, and its command (argv, env, cwd, GPUs) is the
one recorded when it was added (tui/fleet/intent.py), never the box's answer: a job any
process on HOST added itself, or whose queue files were rewritten, cannot carry its command
to HOST2 or to this machine. A ``local`` host receives no moved job unless hosts.toml says
``accept_moves = true`` for it.

In order: check the job's record and HOST2; kill the job on HOST and wait for it to end
(its last SIGTERM save is then on disk); bring its newest committed checkpoint home through
the mirror (tui/fleet/mirror.py, the verified pull); on HOST2, pause the queue so nothing
starts early, add the identical command (paths under HOST's ``workdir`` mapped to HOST2's),
push the checkpoint into the new job's checkpoint dir (tui/transport/push.py, sha256-checked
on arrival), resume the queue. The lineage (A/j7 -> B/j3) is recorded in ``moves.json``
beside mirror.json and shown in both queues.

Where HOST cannot be reached, the move goes on from the job's record and the newest
checkpoint the mirror verified;
the move is recorded with a fence, and the fleet (room, `gpuroom watch`) kills HOST's copy at
its first good poll, before any dead runner there is restarted (tui/fleet/live.py _fence).
The new job is recorded with the same intent (paths mapped), naming the job it continues.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

from gpuroom.remote.queue_events import LIVE_STATES, ckpt_dir_of
from gpuroom.tui.config import HostConfig, Settings
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.intent import (
    Intent,
    accept_moves_fix,
    check_job_id,
    move_target_refusal,
)
from gpuroom.tui.fleet.mirror import MirrorState, mirror_job, read_spec, read_state
from gpuroom.tui.model import MirrorHome, Move
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import JobSpec, load_answer, queue_identity
from gpuroom.tui.statefile import locked, write_private
from gpuroom.tui.transport.link import HostLink, LinkError, env_on_stdin
from gpuroom.tui.transport.push import push_file

KILL_WAIT_S = 120.0  # past the queue's default 30 s kill grace, and a slow last save
POLL_S = 0.5

log = logging.getLogger(__name__)


class MoveError(GpuroomError):
    """The move stopped; what was done so far is in the message."""


def map_path(value: str, old: str | None, new: str | None) -> str:
    """``value`` with a leading ``old`` workdir replaced by ``new`` (both hosts must set
    one); any other value as it is."""
    if not old or not new or old == new:
        return value
    if value == old:
        return new
    prefix = old.rstrip("/") + "/"
    return new.rstrip("/") + "/" + value[len(prefix):] if value.startswith(prefix) else value


class Lineage:
    """moves.json: every move, written atomically (tmp, fsync, rename)."""

    def __init__(self, state: MirrorState) -> None:
        self.path = state.path.with_name("moves.json")

    def load(self) -> list[Move]:
        doc = read_state(self.path, "moves")
        out = []
        for raw in doc.get("moves", []) if isinstance(doc, dict) else []:
            try:
                out.append(Move(**raw))
            except TypeError:
                continue
        return out

    def add(self, move: Move) -> None:
        with locked(self.path):
            self._write([*self.load(), move])

    def _write(self, moves: list[Move]) -> None:
        """Under ``locked(self.path)``, with ``moves`` read there."""
        write_private(self.path, {"version": 1, "moves": [asdict(m) for m in moves]})

    def fences(self, host: str) -> list[Move]:
        """Moves away from ``host`` whose old copy may still run there."""
        return [m for m in self.load() if m.fence and m.src_host == host]

    def fenced(self, move: Move, at: float) -> None:
        """``move``'s old copy is seen ended at ``at``: no more fencing."""
        with locked(self.path):
            self._write([dataclasses.replace(m, fence=False, fenced_at=at) if m == move
                         else m for m in self.load()])

    def involving(self, host: str) -> list[Move]:
        """The moves from or to ``host``, oldest first (the doctor's, through HostState)."""
        return [m for m in self.load() if host in (m.src_host, m.dst_host)]

    def for_host(self, host: str) -> dict[str, str]:
        """Each of ``host``'s moved jobs: "moved to B/j3" or "from A/j7" (the newest)."""
        return lineage_text(host, self.load())


def moved_away(lineage: Lineage, host: str) -> set[tuple[str | None, str]]:
    """(queue identity, job) of each job moved away from ``host``."""
    return {(m.src_queue, m.src_job) for m in lineage.load() if m.src_host == host}


def lineage_text(host: str, moves: list[Move]) -> dict[str, str]:
    """Each of ``host``'s jobs in ``moves``: "moved to B/j3" or "from A/j7" (the newest)."""
    out: dict[str, str] = {}
    for m in moves:
        if m.src_host == host:
            out[m.src_job] = f"moved to {m.dst_host}/{m.dst_job}"
        if m.dst_host == host:
            out[m.dst_job] = f"from {m.src_host}/{m.src_job}"
    return out


async def _ask(link: HostLink, *args: str, check: bool = True,
               stdin: bytes | None = None) -> dict[str, object]:
    result = await link.helper("queue", *args, stdin=stdin, timeout_s=60.0)
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise LinkError(link.name, f"queue {args[0]} failed ({result.failure()})") from None
    if not isinstance(doc, dict) or (check and not doc.get("ok")):
        why = doc.get("error") if isinstance(doc, dict) else None
        raise MoveError(f"{link.name}: queue {args[0]} refused: {why or result.failure()}",
                        "see gpuroom queue ls " + link.name)
    return doc


async def _ended(link: HostLink, job: str, deadline_s: float) -> JobSpec:
    """Poll ``job`` until it is no longer live (bounded)."""
    deadline = time.monotonic() + deadline_s
    while True:
        spec = (await read_spec(link, job)).jobs[0]
        if spec.state not in LIVE_STATES:
            return spec
        if time.monotonic() > deadline:
            raise MoveError(f"{link.name}/{job} still {spec.state} {deadline_s:.0f} s after "
                            "the kill: not moved", "kill it again, then move")
        await asyncio.sleep(POLL_S)


def moved_intent(intent: Intent, src: HostConfig, dst: HostConfig) -> Intent:
    """``intent`` as it is re-added on ``dst``: paths under ``src``'s workdir mapped to
    ``dst``'s, and the job it continues named (its new id is set once ``dst`` answers)."""
    def mapped(value: str) -> str:
        return map_path(value, src.workdir, dst.workdir)

    return dataclasses.replace(
        intent, host=dst.name, job="", argv=tuple(mapped(a) for a in intent.argv),
        cwd=mapped(intent.cwd) if intent.cwd else intent.cwd,
        env={k: mapped(v) for k, v in intent.env.items()},
        durable_dir=mapped(intent.durable_dir) if intent.durable_dir else intent.durable_dir,
        moved_from=f"{src.name}/{intent.job}")


def add_argv(intent: Intent, src: HostConfig, dst: HostConfig) -> tuple[list[str], bytes | None]:
    """`queue add`'s options and argv for the identical job on ``dst``, and its stdin: the
    env values travel there, never on the box's command line (U34)."""
    new = moved_intent(intent, src, dst)
    opts = [f"--name={new.name}"] if new.name else []
    if new.cwd:
        opts.append(f"--cwd={new.cwd}")
    env_opts, stdin = env_on_stdin(new.box_env())
    opts += env_opts
    if new.gpus is not None:
        opts += ["--gpus", str(new.gpus)]
    if new.vram_mib is not None:
        opts += ["--vram-mib", str(new.vram_mib)]
    opts += ["--retries", str(new.retries or 0)]
    if new.retry_on_exit:
        opts.append("--retry-on-exit")
    if new.priority is not None:
        opts += ["--priority", str(new.priority)]
    opts += [f"--output={o}" for o in new.outputs]
    opts += [f"--ckpt={c}" for c in new.ckpts]
    if new.durable_dir:
        opts.append(f"--durable-dir={new.durable_dir}")
    return [*opts, "--", *new.argv], stdin


def check_target(dst: HostConfig) -> None:
    """Refuse ``dst`` as a move's or failover's destination where hosts.toml does not let it
    receive one (this machine, unless accept_moves = true)."""
    why = move_target_refusal(dst)
    if why is not None:
        raise MoveError(f"{why}: not moved", accept_moves_fix(dst.name))


def unrecorded(src: HostConfig, dst: HostConfig, job: str,
               unreachable: LinkError | None = None) -> MoveError:
    """The refusal of a job with no record of its add on this jump host."""
    shown = sanitize_line(job)
    where = (f"{src.name} cannot be reached ({unreachable}): " if unreachable is not None
             else "")
    return MoveError(f"{where}{src.name}/{shown} was not added from this jump host, so its "
                     "command is only on that box and it is not moved (a job a box reports is "
                     "shown, never moved)",
                     f"read its command with gpuroom queue show {src.name} {shown}, then add "
                     f"it yourself: gpuroom queue add {dst.name} -- CMD ARGS...")


async def move_job(src_link: HostLink, dst_link: HostLink, job: str, *, settings: Settings,
                   state: MirrorState | None = None,
                   say: Callable[[str], None] = lambda _line: None,
                   down_s: float | None = None, why: str | None = None,
                   queue_id: str | None = None) -> Move:
    """Move ``job`` from ``src_link``'s host to ``dst_link``'s; see the module doc.
    ``down_s``, ``why``: a failover the fleet makes, after the source was down that long, or
    because of what ``why`` says (it came back wiped). ``queue_id``: the identity of the
    queue the job was last seen in (a failover; the box answers it otherwise)."""
    auto = down_s is not None or why is not None
    src, dst = src_link.host, dst_link.host
    state = state or MirrorState()
    check_target(dst)
    # The job as its box has it now, with its queue's identity: a record or a home of a job
    # of the same id in an earlier queue (another rental behind the alias) is another job.
    unreachable: LinkError | None = None
    spec: JobSpec | None = None
    try:
        if down_s is not None:
            # The fleet has had no answer for down_s: asking again would only wait out
            # another connect deadline before the failover could begin.
            raise LinkError(src.name, f"no answer for {down_s:.0f} s")
        shown = await read_spec(src_link, job)
        spec, queue_id = shown.jobs[0], shown.id
    except LinkError as exc:
        unreachable = exc
    except GpuroomError:
        if state.intents.newest(src.name, job) is None:
            raise unrecorded(src, dst, job) from None
        raise
    if spec is not None:
        intent = state.intents.get(src.name, job, queue_id)
    elif queue_id is not None:  # a failover: the queue its last good poll showed
        intent = state.intents.get(src.name, job, queue_id)
    else:  # `queue move` of a box that cannot be asked: its newest record under that id
        intent = state.intents.newest(src.name, job)
    if intent is None:
        raise unrecorded(src, dst, job, unreachable)
    # The new host first: a job is never killed for a move that cannot land.
    await _ask(dst_link, "ls", check=False)
    if spec is None:
        # The box is gone (or its link): the job's record and the newest checkpoint the
        # mirror verified are enough. The old copy is fenced when the host answers again.
        home = state.home(src.name, intent.queue_id, job)
        say(f"{src.name} cannot be reached ({unreachable}): moving {job} from its record"
            + (f" (ckpt step {home.step})" if home else " (no checkpoint)")
            + f"; its copy there is killed when {src.name} answers again")
        _check_home(home)
        new_job, new_queue = await _add_paused(dst_link, intent, src, home, state=state,
                                               say=say)
        move = Move(src.name, job, dst.name, new_job, home.step if home else None, time.time(),
                    fence=True, auto=auto, down_s=down_s, why=why,
                    src_queue=intent.queue_id, dst_queue=new_queue)
        Lineage(state).add(move)
        return move
    fenced_at = None
    if spec.state in LIVE_STATES:
        await _ask(src_link, "kill", "--", job)
        say(f"{src.name}/{job}: killed; waiting for it to end")
        spec = await _ended(src_link, job, KILL_WAIT_S)
        fenced_at = time.time()
    home = await _bring_home(src_link, spec, queue_id, settings=settings, state=state, say=say)
    new_job, new_queue = await _add_paused(dst_link, intent, src, home, state=state, say=say)
    move = Move(src.name, job, dst.name, new_job, home.step if home else None, time.time(),
                auto=auto, down_s=down_s, why=why, fenced_at=fenced_at,
                src_queue=queue_id, dst_queue=new_queue)
    Lineage(state).add(move)
    return move


async def _bring_home(link: HostLink, spec: JobSpec, queue_id: str | None, *,
                      settings: Settings, state: MirrorState,
                      say: Callable[[str], None]) -> MirrorHome | None:
    host = link.host
    if spec.ckpt_dir and queue_id is not None:
        outcome = await mirror_job(link, host, spec.id, spec.ckpt_dir, queue_id,
                                   settings=settings, state=state)
        say(outcome.line)
        if outcome.status == "failed":
            raise MoveError(f"{host.name}/{spec.id}: its newest checkpoint did not come home "
                            f"({outcome.detail}): not moved", "move again (the pull resumes)")
    home = state.home(host.name, queue_id, spec.id)
    _check_home(home)
    return home


def _check_home(home: MirrorHome | None) -> None:
    if home is not None and not Path(home.local_path).is_file():
        raise MoveError(f"{home.local_path} (step {home.step}) is gone from this machine",
                        "move again after the job's checkpoint is pulled home")


async def _add_paused(link: HostLink, intent: Intent, src: HostConfig,
                      home: MirrorHome | None, *, state: MirrorState,
                      say: Callable[[str], None]) -> tuple[str, str | None]:
    """Add the recorded job on ``link``'s host with its queue paused, record it there, place
    the checkpoint in the new job's dir, then resume (unless the queue was paused before)."""
    dst = link.host
    before = await _ask(link, "ls", check=False)  # an empty queue's answer has no "ok"
    config = before.get("config")
    was_paused = isinstance(config, Mapping) and bool(config.get("paused"))
    if not was_paused:
        await _ask(link, "pause")
    new_job = ""
    try:
        argv, stdin = add_argv(intent, src, dst)
        added = await _ask(link, "add", *argv, stdin=stdin)
        new_job = check_job_id(dst.name, added.get("job"))
        new_queue = queue_identity(added.get("queue_id"))
        say(f"{dst.name}: added {new_job} ({src.name}/{intent.job}'s command)")
        if home is not None:
            where = await read_spec(link, new_job)
            root = posixpath.dirname(posixpath.dirname(where.dir or ""))
            ckpt_dir = ckpt_dir_of(root, where.queue, new_job, where.jobs[0].durable_dir,
                                   {"durable_dir": where.config.durable_dir})
            await push_file(link, Path(home.local_path), ckpt_dir, home.file, home.sha256)
            say(f"{dst.name}/{new_job}: ckpt step {home.step} in {ckpt_dir}, sha256 checked "
                "on arrival")
        # Its record before it can start: a failover of the new job takes its command here.
        state.intents.record(dataclasses.replace(moved_intent(intent, src, dst), job=new_job,
                                                 added_at=time.time(), queue_id=new_queue))
    except BaseException:
        # A job without its checkpoint would start from step 0: it goes, and the queue's
        # other jobs must not stay held by a failed move.
        await asyncio.shield(_undo(link, new_job, resume=not was_paused))
        raise
    if not was_paused:
        await _resume(link)
    return new_job, new_queue


async def _undo(link: HostLink, new_job: str, *, resume: bool) -> None:
    if new_job:
        try:
            await _ask(link, "remove", "--", new_job)
        except (LinkError, MoveError) as exc:
            log.warning("%s: removing %s after a failed move failed: %s", link.name, new_job,
                        exc)
    if resume:
        await _resume(link)


async def _resume(link: HostLink) -> None:
    try:
        await _ask(link, "resume")
    except (LinkError, MoveError) as exc:
        log.warning("%s: queue resume after a move failed: %s", link.name, exc)
