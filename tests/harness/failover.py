"""Issue 21's failover scenario on two real boxes (netns.TwoBoxTopology), for the test
(tests/system/test_failover_netns.py) and the bench (bench/failover.py): the resumable example
runs on box a with --failover boxb and the mirror; a is lost (sshd and sessions killed, link
down, everything on it stopped); the fleet moves the job to b from the newest mirrored step;
a comes back and the fleet fences its copy. Returns what happened and when.

The fence needs a's copy still running when a answers again, and a toy run of a few seconds
can end first: each mirrored checkpoint is load-checked on this machine (a torch import in a
subprocess, ~1 s idle, 5 to 8 s measured on a loaded 2-core machine), so the mirror may bring
the cut step home only after the job's last step. With ``hold_until_home`` the training
process on a is stopped the moment it has saved the cut step, and continues with a's other
processes when a comes back: the job is still live at the cut, whatever the mirror's pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import MirrorOutcome
from gpuroom.tui.fleet.move import Lineage

from .boxenv import job_python, python_with_env
from .netns import TwoBoxTopology

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_resumable.py"
WAIT_S = 120.0
_STEP_RE = re.compile(r"^step (\d+)", re.M)
_CKPT_RE = re.compile(r"ckpt-(\d+)\.pt")
HOLD_CHECK_S = 0.02  # how often the hold looks for the cut step's checkpoint (0.1 s a step)


def box_config(topo: TwoBoxTopology, work: Path, failover_after_s: float) -> Path:
    """hosts.toml for boxa and boxb: each its own GPUROOM_HOME and tmux socket dir, so each
    box's runner and jobs start inside its own namespace."""
    user = topo.identity.user
    hosts: dict[str, Any] = {}
    for box in TwoBoxTopology.BOXES:
        root = user.home / f"failover-{box}"
        for d in (root, root / "tmux"):
            d.mkdir(exist_ok=True)
            os.chown(d, user.uid, user.gid)
        (root / "tmux").chmod(0o700)
        wrapper = python_with_env(root / "python3", {"GPUROOM_HOME": str(root / "home"),
                                                     "TMUX_TMPDIR": str(root / "tmux")})
        os.chown(wrapper, user.uid, user.gid)
        hosts[topo.alias(box)] = {"ssh": topo.alias(box), "python": str(wrapper),
                                  "pull_to": str(work / "home")}
    config = work / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(topo.ssh_config), "failover_after_s": failover_after_s,
                     "down_after_s": min(1.0, failover_after_s)},
        "hosts": hosts}).encode())
    config.chmod(0o600)
    return config


def cli_json(*argv: str) -> dict[str, Any]:
    """A gpuroom verb's --json answer (its last line)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    if rc != 0:
        raise RuntimeError(f"gpuroom {' '.join(argv)}: exit {rc}")
    doc: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    return doc


def job_doc(config: Path, host: str, job: str) -> dict[str, Any]:
    """The box's own record of the job (`queue show --json`)."""
    jobs: list[dict[str, Any]] = cli_json("--config", str(config), "queue", "show", "--json",
                                          host, job)["jobs"]
    return jobs[0]


def wait_state(config: Path, host: str, job: str, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = job_doc(config, host, job)
        if doc["state"] in states:
            return doc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{host}/{job} not {states} after {WAIT_S:.0f} s: {doc}")
        time.sleep(0.2)


def add_job(config: Path, python: str, site: str, *, steps: int, save_every: int,
            step_sleep_s: float) -> str:
    """The resumable example on boxa with --failover boxb."""
    return str(cli_json(
        "--config", str(config), "queue", "add", "--json", "--failover", "boxb", "--env",
        f"PYTHONPATH={site}", "--cwd", str(ROOT), "boxa", "--", python, str(EXAMPLE),
        "--steps", str(steps), "--save-every", str(save_every), "--sleep-per-step",
        str(step_sleep_s))["job"])


def start(topo: TwoBoxTopology, work: Path, *, failover_after_s: float, steps: int,
          save_every: int, step_sleep_s: float) -> tuple[Path, str, Path]:
    """hosts.toml, the job added on boxa and its log's path once it runs."""
    config = box_config(topo, work, failover_after_s)
    python, site = job_python(topo)
    job = add_job(config, python, site, steps=steps, save_every=save_every,
                  step_sleep_s=step_sleep_s)
    return config, job, Path(wait_state(config, "boxa", job, ("running",))["log"])


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def last_step(log: str) -> int | None:
    steps = _STEP_RE.findall(log)
    return int(steps[-1]) if steps else None


def newest_saved(ckpt_dir: Path) -> int:
    """The newest step the example has saved in ``ckpt_dir`` (its saves are renamed into
    place whole), -1 for none."""
    names = (_CKPT_RE.fullmatch(p.name) for p in ckpt_dir.glob("ckpt-*.pt"))
    return max((int(m.group(1)) for m in names if m), default=-1)


def training_pids(topo: TwoBoxTopology, box: str) -> list[int]:
    """The processes in ``box``'s namespace running the example: the job, not its runner."""
    pids = []
    for pid in topo.pids(box):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile
        if str(EXAMPLE).encode() in argv:
            pids.append(pid)
    return pids


async def _hold_at(topo: TwoBoxTopology, box: str, ckpt_dir: Path, step: int,
                   held: list[int]) -> None:
    """SIGSTOP ``box``'s training process once it has saved ``step``; its pids go in
    ``held`` (the caller continues them)."""
    while newest_saved(ckpt_dir) < step:
        await asyncio.sleep(HOLD_CHECK_S)
    pids = training_pids(topo, box)
    if not pids:
        raise RuntimeError(f"box {box}: no process runs {EXAMPLE.name} to hold at step {step}")
    held.extend(pids)
    signal_all(pids, signal.SIGSTOP)


@dataclass
class Failover:
    """What one failover did; times are time.monotonic()."""

    job: str
    heard: list[MirrorOutcome] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)
    step_at_loss: int | None = None  # the last step a printed before it was lost
    home_step: int = 0  # the newest step the mirror had home then
    home_bytes: int = 0  # its size: what the move pushes to b

    @property
    def move(self) -> MirrorOutcome:
        [failover] = [o for o in self.heard if o.status == "failover"]
        return failover

    @property
    def new_job(self) -> str:
        return self.move.line.split("-> boxb/")[1].split()[0]

    @property
    def mirrored_bytes(self) -> int:
        return sum(o.received or 0 for o in self.heard if o.status == "home")


async def _poll_until(fleet: Fleet, hosts: tuple[str, ...], done: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {WAIT_S:.0f} s")
        for host in hosts:
            await fleet.poll_host(host)
        await asyncio.sleep(0.2)


async def lose_box_a(config: Path, topo: TwoBoxTopology, job: str, *, cut_after_step: int,
                     log_path: Path, hold_until_home: bool = False) -> Failover:
    """Mirror until ``cut_after_step`` is home, lose a, wait for the failover, bring a back
    (its runner and job continue) and wait for the fence. ``hold_until_home``: stop the
    training process at ``cut_after_step`` until a is lost (the module doc says why)."""
    run = Failover(job)
    fleet = Fleet(cfg.load(config), mirror=True, on_mirror=run.heard.append)
    mirror = fleet.mirror
    assert mirror is not None
    frozen: list[int] = []
    held: list[int] = []
    hold: asyncio.Task[None] | None = None
    try:
        await fleet.poll_host("boxb")
        if hold_until_home:
            view = (await fleet.poll_host("boxa")).view
            spec = view.job(job) if view is not None else None
            if spec is None or not spec.ckpt_dir:
                raise RuntimeError(f"boxa/{job}: no checkpoint dir in a's poll: {spec}")
            hold = asyncio.create_task(_hold_at(topo, "a", Path(spec.ckpt_dir),
                                                cut_after_step, held))

        def home_step() -> int:
            home = mirror.homes("boxa").get(job)
            return home.step if home is not None else -1

        async def mirrored() -> None:
            deadline = time.monotonic() + WAIT_S
            while home_step() < cut_after_step:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"step {cut_after_step} not home: {run.heard}")
                await fleet.poll_host("boxa")
                await mirror.idle()
                await asyncio.sleep(0.2)

        await mirrored()
        if hold is not None:
            await asyncio.wait_for(hold, WAIT_S)  # done by now: the step it waits for is home
        topo.cut("a")
        frozen = topo.pids("a")
        signal_all(frozen, signal.SIGSTOP)
        run.times["lost"] = time.monotonic()
        run.home_step = home_step()
        run.home_bytes = Path(mirror.homes("boxa")[job].local_path).stat().st_size
        run.step_at_loss = last_step(log_path.read_text())
        if "done at step" in log_path.read_text():
            raise RuntimeError(
                f"boxa/{job} had finished (step {run.step_at_loss}) before step "
                f"{run.home_step} came home: nothing on a is left to fail over or fence "
                "(hold_until_home keeps it running)")
        await _poll_until(fleet, ("boxb", "boxa"),
                          lambda: any(o.status == "failover" for o in run.heard), "failover")
        run.times["moved"] = time.monotonic()
        await _resumed(fleet, run)
        topo.restore("a")
        signal_all(frozen, signal.SIGCONT)
        frozen = []
        await _poll_until(fleet, ("boxa",), lambda: _fenced(fleet, run), "fence")
    finally:
        if hold is not None:
            hold.cancel()
        signal_all(frozen + held, signal.SIGCONT)  # never leave a stopped tree behind
        await fleet.close()
    return run


def _fenced(fleet: Fleet, run: Failover) -> bool:
    """Whether the fence was sent to a's copy; raises when a answered with the copy already
    ended, so that nothing is left to fence (waiting on would only time out)."""
    if any(o.status == "fenced" for o in run.heard):
        return True
    assert fleet.mirror is not None
    ended = [m for m in Lineage(fleet.mirror.state).load()
             if m.src_host == "boxa" and m.src_job == run.job and m.fenced_at is not None]
    if ended:
        state = fleet.state("boxa")
        job = state.view.job(run.job) if state.view is not None else None
        raise RuntimeError(f"boxa/{run.job} had already ended ({job.state if job else '?'}) "
                           "when a answered again: nothing was left to fence")
    return False


async def _resumed(fleet: Fleet, run: Failover) -> None:
    """Wait for b's job to print "resumed from step" (its log, as b's poll names it)."""
    deadline = time.monotonic() + WAIT_S
    while "resumed" not in run.times:
        if time.monotonic() > deadline:
            raise TimeoutError(f"boxb/{run.new_job} never resumed")
        view = (await fleet.poll_host("boxb")).view
        job = view.job(run.new_job) if view is not None else None
        if job is not None and job.log_path and Path(job.log_path).exists() \
                and "resumed from step" in Path(job.log_path).read_text():
            run.times["resumed"] = time.monotonic()
        await asyncio.sleep(0.05)
