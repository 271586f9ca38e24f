"""The control room end to end: the real `gpuroom` binary in a real tmux, against the test sshd.

Issue 17: a box replaying the throttle captures shows their reasons in the GPU pane; a host
that stops answering behind a ProxyJump says why, with the fix, the hop, a ticking age and the
next try, and `s` on it leaves ssh's own error on screen.

Issue 6: keys must work inside tmux (TERM=screen-256color, and a 16-colour TERM=screen), and
a job added with `a` shows its log, dies with `K` and comes back with `R`. The screen is read
with `tmux capture-pane`, keys go in with `tmux send-keys`; the box's own queue (`gpuroom queue
ls --json`) and /proc confirm that what the screen says really happened.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness.sshd import box_python
from harness.tmux import ScreenTimeout, TmuxPane, find_tmux

from gpuroom.tui.cli.main import main

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.skipif(find_tmux() is None, reason="tmux not installed: apt-get install tmux"),
]

GPUROOM_BIN = Path(sys.executable).with_name("gpuroom")
STEP_S = 20.0  # one screen change; a poll is 0.5 s, so this only bounds a broken run
JOB_NAME = "e2e-ticker"
# $$ is the job shell's pid: a line names the attempt that wrote it, so attempt 2's lines
# are told apart from attempt 1's on screen. 600 * 0.2 s outlives the test; teardown kills it.
TICKER = (
    "sh -c 'i=0; while [ $i -lt 600 ]; do echo tick-$$-$i; i=$((i+1)); sleep 0.2; done'"
)
TICK_RE = re.compile(r"tick-(\d+)-(\d+)")
# 256-colour and truecolor SGR parameters (38/48;5;N and 38/48;2;R;G;B), as capture-pane -e
# writes what the program drew. A 16-colour terminal must never be sent them.
WIDE_COLOUR_RE = re.compile(r"\x1b\[(?:[0-9]*;)*[34]8;[25];")
BASIC_FG_RE = re.compile(r"\x1b\[(?:[0-9]*;)*(?:3[0-7]|9[0-7])[;m]")


def _write_hosts(path: Path, ssh_config: Path, aliases: tuple[str, ...]) -> Path:
    """hosts.toml naming the aliases, polled every 0.5 s so each step shows quickly."""
    path.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(ssh_config), "poll_interval_s": 0.5},
        "hosts": {alias: {"ssh": alias} for alias in aliases},
    }).encode())
    return path


@pytest.fixture
def room_config(sshd_box: Any, tmp_path: Path) -> Iterator[Path]:
    """hosts.toml with the box only."""
    yield _write_hosts(tmp_path / "hosts.toml", sshd_box.ssh_config, (sshd_box.alias,))
    # The runner lives in the test user's tmux, outside sshd's tree, and jobs in their own
    # sessions: end the jobs first (the runner does the kill), then the runner.
    _kill_every_live_job(tmp_path / "hosts.toml")
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def _queue_json(config: Path, *verb: str) -> dict[str, Any]:
    """`gpuroom queue VERB... --json`-style call in this process; its stdout's last line."""
    out = StringIO()
    with redirect_stdout(out):
        rc = main(["--config", str(config), "queue", *verb])
    lines = out.getvalue().strip().splitlines()
    assert rc == 0, f"gpuroom queue {' '.join(verb)} exited {rc}: {out.getvalue()}"
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def _jobs(config: Path) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = _queue_json(config, "ls", "box", "--json")["jobs"]
    return jobs


def _kill_every_live_job(config: Path) -> None:
    try:
        for job in _jobs(config):
            if job["state"] in ("running", "queued", "launching"):
                _queue_json(config, "kill", "box", job["id"], "--json")
    except (AssertionError, OSError, ValueError, KeyError):
        pass  # teardown of a failed test: the box reset wipes ~/.gpuroom anyway


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """Nothing of the runner's own HOME, config or agent reaches the app."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_RUNTIME_DIR": str(home / "run"),
    }
    if "PYTHONPATH" in os.environ:  # the app must import the same gpuroom as this test
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.fixture
def start_room(room_config: Path, tmp_path: Path) -> Iterator[Any]:
    """start_room(term, config, width) -> TmuxPane running gpuroom; the tmux server dies at
    teardown."""
    panes: list[TmuxPane] = []
    pids: list[int] = []

    def start(term: str, config: Path = room_config, width: int = 120) -> TmuxPane:
        conf_dir = tmp_path / f"tmux-{len(panes)}"
        conf_dir.mkdir()
        pane = TmuxPane.start(
            [str(GPUROOM_BIN), "--config", str(config)],
            env=_isolated_env(tmp_path), cwd=tmp_path, config_dir=conf_dir,
            width=width, height=40, default_terminal=term,
        )
        panes.append(pane)
        pid = pane.pane_pid()
        if pid is not None:
            pids.append(pid)
        return pane

    try:
        yield start
    finally:
        for pane in panes:
            pane.kill()
        for pid in pids:  # kill-server HUPs it; make sure the app we started is gone
            _reap(pid)


def _reap(pid: int) -> None:
    """SIGKILL the app we started if it outlives its tmux server by 3 s."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            if b"gpuroom" not in cmdline.read_bytes():
                return  # gone (a zombie's cmdline is empty), or the pid is someone else's now
        except OSError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------- screen


def _wait_cursor_moves(pane: TmuxPane, before: tuple[int, int], what: str) -> tuple[int, int]:
    """Keys typed right after Tab can reach the old field before the focus moves (Textual
    forwards keys to the focused widget and handles Tab only once it bubbles up), so wait
    for the terminal cursor, which follows the focused Input, to leave its row."""
    deadline = time.monotonic() + STEP_S
    while True:
        now = pane.cursor()
        if now[1] != before[1]:
            return now
        if time.monotonic() >= deadline:
            raise ScreenTimeout(f"focus did not move to {what}; last screen:\n{pane.capture()}")
        time.sleep(0.05)


def _queue_row(screen: str, job_id: str) -> list[str] | None:
    """The queue pane's row for job_id, split into words (id name state try ...)."""
    for line in screen.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == job_id and words[1] == JOB_NAME:
            return words
    return None


def _ticks(screen: str) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for m in TICK_RE.finditer(screen)]


def _fill_add_form(pane: TmuxPane) -> None:
    pane.send_keys("a")
    pane.wait_for("Add a job on box", STEP_S)
    pane.wait_for("command, e.g. python train.py", STEP_S)
    pane.send_text(TICKER)
    pane.wait_for("sleep 0.2; done'", STEP_S)  # the field shows the command's tail
    # Read where the caret is only now: the frame that shows the text also placed it.
    cursor = pane.cursor()
    pane.send_keys("Tab")
    _wait_cursor_moves(pane, cursor, "the name field")
    pane.send_text(JOB_NAME)
    pane.wait_for(JOB_NAME, STEP_S)
    cursor = pane.cursor()
    pane.send_keys("Tab")
    _wait_cursor_moves(pane, cursor, "the GPUs field")
    # The form offers 1 GPU; the box has none, so that job would be unschedulable.
    # BSpace empties the field whether focus selected its text or put the caret after it.
    pane.send_keys("BSpace")
    pane.send_text("0")
    pane.send_keys("Enter")
    pane.wait_until(lambda s: "Add a job on box" not in s, STEP_S, "the form to close")


def test_add_kill_relaunch_in_tmux(start_room: Any, room_config: Path) -> None:
    pane = start_room("screen-256color")
    pane.wait_until(_host_up("box"), STEP_S, "host box UP")
    assert pane.env_of_program().get("TERM") == "screen-256color"
    # Issue 6's 256-colour terminal: the app really draws with the 256-colour palette here
    # (the 16-colour test below checks the opposite).
    assert WIDE_COLOUR_RE.search(pane.capture(escapes=True))

    _fill_add_form(pane)
    # The form closes when the add is sent; the box records it once a runner is live, so the
    # queue is read until it holds the job (bounded), not once.
    deadline = time.monotonic() + STEP_S
    while not (jobs := _jobs(room_config)):
        assert time.monotonic() < deadline, "the added job never reached the box's queue"
        time.sleep(0.2)
    [job] = jobs
    job_id = job["id"]
    # What the form sent is what the box queued: argv split once, never through a shell.
    assert job["name"] == JOB_NAME, job
    assert job["argv"] == shlex.split(TICKER), job
    assert job["gpus"] == 0, job

    def running(attempt: int) -> Any:
        def check(screen: str) -> bool:
            row = _queue_row(screen, job_id)
            return row is not None and row[2] == "running" and row[3] == str(attempt)
        return check

    def confirmed(screen: str) -> bool:  # the box's state replaced the pending "sent…"
        row = _queue_row(screen, job_id)
        return row is not None and row[3] == "1"

    screen = pane.wait_until(confirmed, STEP_S, f"{job_id} confirmed by the box")
    row = _queue_row(screen, job_id)
    assert row is not None
    # A column sized for "sent…" must widen for "running", never cut it to "runni".
    assert row[2] == "running" or not "running".startswith(row[2]), screen
    screen = pane.wait_until(running(1), STEP_S, f"{job_id} running, try 1")
    # The running job is the one shown below; its lines arrive while it runs.
    screen = pane.wait_until(lambda s: len(_ticks(s)) >= 3, STEP_S, "tick- lines in the log")
    assert f"log box/{job_id}" in screen
    first_pid = _ticks(screen)[0][0]
    [job] = _jobs(room_config)
    assert job["state"] == "running"

    # Select the job in the queue pane (Tab from hosts), then K.
    pane.send_keys("Tab")
    pane.send_keys("K")
    screen = pane.wait_for("Kill (y)", STEP_S)
    question = f"Kill job {job_id} ({JOB_NAME}) on box?"
    assert question in screen, f"the dialog must name host and job; screen:\n{screen}"
    pane.send_keys("y")
    screen = pane.wait_until(
        lambda s: (row := _queue_row(s, job_id)) is not None and row[2] == "killed",
        STEP_S, f"{job_id} killed",
    )
    assert "Kill (y)" not in screen
    # The box agrees, and the job's shell is really gone (the box is this machine).
    [job] = _jobs(room_config)
    assert job["state"] == "killed", job
    assert job["attempts"][-1]["end_reason"] == "killed", job["attempts"]
    assert not Path(f"/proc/{first_pid}").exists(), f"job shell {first_pid} outlived K"
    shown = {pid for pid, _ in _ticks(screen)}
    assert shown == {first_pid}, f"only attempt 1 has run so far: {shown}"

    pane.send_keys("R")
    pane.wait_until(lambda s: ("Relaunch (y)" in s and "resumes from" in s) or
                    ("Relaunch (y)" in s and "no checkpoint seen" in s), STEP_S, "R's confirm")
    pane.send_keys("y")
    screen = pane.wait_until(running(2), STEP_S, f"{job_id} running, try 2")
    screen = pane.wait_until(
        lambda s: any(pid != first_pid for pid, _ in _ticks(s)), STEP_S,
        "attempt 2's tick- lines in the log",
    )
    second_pid = next(pid for pid, _ in _ticks(screen) if pid != first_pid)
    [job] = _jobs(room_config)
    assert [a["attempt"] for a in job["attempts"]] == [1, 2]
    assert job["state"] == "running"
    assert Path(f"/proc/{second_pid}").exists()

    pane.send_keys("q")
    status = pane.wait_exit(STEP_S)
    assert status == 0, f"gpuroom exited with {status}; last screen:\n{pane.last_screen}"
    # Quitting the room leaves the box's job running: the queue finishes on its own.
    [job] = _jobs(room_config)
    assert job["state"] == "running", job


def _host_up(name: str) -> Any:
    return lambda s: re.search(rf"^\s*{re.escape(name)}\s+UP\b", s, re.M) is not None


def test_keys_with_16_colours(start_room: Any, sshd_box: Any, tmp_path: Path) -> None:
    # A second alias for the same box, so j / k have somewhere to move.
    sshd_box.write_ssh_config({"box2": {}})
    config = _write_hosts(tmp_path / "two.toml", sshd_box.ssh_config, ("box", "box2"))
    pane = start_room("screen", config)
    screen = pane.wait_until(lambda s: _host_up("box")(s) and _host_up("box2")(s), STEP_S,
                             "box and box2 UP")
    # Read once the app draws: earlier, the pane's pid may not have exec'd it yet.
    assert pane.env_of_program().get("TERM") == "screen"
    assert "queue box─" in screen  # the first host is shown below at start
    drawn = pane.capture(escapes=True)
    assert not WIDE_COLOUR_RE.search(drawn), "256-colour or truecolor sent to TERM=screen"
    assert BASIC_FG_RE.search(drawn), "no 16-colour foreground at all"

    pane.send_keys("?")
    screen = pane.wait_for("gpuroom keys", STEP_S)
    assert "kill the selected job (asks first)" in screen
    pane.send_keys("Escape")
    pane.wait_until(lambda s: "gpuroom keys" not in s, STEP_S, "the help to close")

    # j moves down the hosts table, enter shows that host below; k moves back up.
    pane.send_keys("j", "Enter")
    pane.wait_for("queue box2─", STEP_S)
    pane.send_keys("k", "Enter")
    pane.wait_for("queue box─", STEP_S)

    # / opens the filter, typed text filters, escape clears it.
    pane.send_keys("/")
    pane.wait_for("filter hosts", STEP_S)
    pane.send_text("box2")
    pane.wait_until(lambda s: not _host_up("box")(s) and _host_up("box2")(s), STEP_S,
                    "only box2 left by the filter")
    pane.send_keys("Escape")
    pane.wait_until(lambda s: _host_up("box")(s) and "filter hosts" not in s, STEP_S,
                    "filter cleared")

    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0


# ------------------------------------------------------------------ issue 17: items 4 and 10

# A python3 for hosts.toml that runs the helper with the NVML stand-in of tests/fakes/nvml.py
# (two GPUs answering what the real `nvidia-smi -q` captures in fixtures/throttle/ say: the A10
# in HW slowdown and power brake, the RTX 2080 at its SW power cap). Only the GPU boundary is
# replaced; the helper, sshd, the link and the room are the real ones.
_NVML_PYTHON = """#!/usr/bin/python3
import os, runpy, sys, types
# argv: -I (the helper starts isolated), then the helper, or -c for the hash check.
if len(sys.argv) < 3 or not sys.argv[2].endswith(".pyz"):
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
helper = sys.argv[2]
sys.path[:0] = [helper, {fakes!r}]
import pynvml as real  # the helper's own copy, shipped in its zipapp
from nvml import FakeNvml
fake, board = FakeNvml(), types.ModuleType("pynvml")
board.__dict__.update(real.__dict__)
board.__dict__.update({{n: getattr(fake, n) for n in dir(fake) if n.startswith("nvml")}})
board.nvmlInit = lambda: None
sys.modules["pynvml"] = board
sys.path.remove({fakes!r})
sys.argv = sys.argv[2:]
runpy.run_path(helper, run_name="__main__")
"""


@pytest.fixture
def nvml_python(sshd_box: Any) -> Iterator[Path]:
    """The wrapper above, in the test user's home with the stand-in beside it."""
    from fakes import FAKES

    root = sshd_box.home / "gpuroom-e2e-nvml"
    shutil.rmtree(root, ignore_errors=True)
    (root / "fakes").mkdir(parents=True)
    shutil.copyfile(FAKES / "nvml.py", root / "fakes" / "nvml.py")
    try:
        yield box_python(root, _NVML_PYTHON.format(fakes=str(root / "fakes")), sshd_box.user)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_throttle_reasons_in_the_gpu_pane(start_room: Any, sshd_box: Any, tmp_path: Path,
                                          nvml_python: Path) -> None:
    """Issue 17 item 4: the throttle capture's active reasons reach the GPU pane."""
    config = tmp_path / "gpu.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5},
        "hosts": {"box": {"ssh": sshd_box.alias, "python": str(nvml_python)}},
    }).encode())
    # 160 columns: the GPU pane has room for both reasons whole (narrower, they end in "…").
    pane = start_room("screen-256color", config, width=160)
    screen = pane.wait_until(lambda s: "HwSlow,PwrBrake" in s and "SwPwrCap" in s, STEP_S,
                             "the throttle reasons in the GPU pane")
    rows = {line.split()[0]: line for line in screen.splitlines()
            if line.split()[:1] in (["0"], ["1"]) and "/" in line}
    assert "HwSlow,PwrBrake" in rows["0"] and "SwPwrCap" in rows["1"], screen
    assert "2x mixed" in screen  # the hosts table counts both boards
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0


def _state_cell(screen: str, host: str) -> str | None:
    found = re.search(rf"^\s*{re.escape(host)}\s+(STALE \S+|DOWN(?: \S+)?|UP)\b", screen, re.M)
    return found.group(1) if found else None


def _flat(screen: str) -> str:
    """The screen's words in one line: a pane wraps a long error at its own width."""
    return " ".join(screen.replace("│", " ").split())


@pytest.mark.netns
@pytest.mark.attack("faults", "the box behind a ProxyJump stops answering, then the jump "
                              "itself: each failure is named by its hop, with a fix")
def test_unreachable_host_in_tmux(start_room: Any, jump_topology: Any, tmp_path: Path) -> None:
    """Issue 17 item 10 against real sshds behind a real ProxyJump: the panes say why with the
    fix and the failing hop, the age ticks, the next try is announced, and `s` leaves ssh's
    own words on screen."""
    topo = jump_topology
    config = _write_hosts(tmp_path / "far.toml", topo.ssh_config, (topo.box_alias,))
    pane = start_room("screen-256color", config)
    pane.wait_until(_host_up(topo.box_alias), STEP_S, "the box behind the jump UP")

    topo.box_sshd.kill_all()  # the box's sshd and its sessions: the link drops
    behind = f"the jump host 'jump' answered, but '{topo.box_alias}' behind it did not"
    screen = pane.wait_until(lambda s: behind in _flat(s), STEP_S * 2,
                             "the error naming the hop that failed")
    flat = _flat(screen)
    assert "Fix: check the box from the jump host (ssh jump" in flat, screen
    assert re.search(r"next try (in \d+ s|now)", flat), screen
    first = _state_cell(screen, topo.box_alias)
    assert first is not None and first.startswith("STALE "), screen
    # Nothing answers and nothing polls in between: only the room's own tick moves the age.
    screen = pane.wait_until(lambda s: (c := _state_cell(s, topo.box_alias)) is not None
                             and c != first and c.startswith("STALE "), 5.0,
                             "the STALE age to tick")

    topo.jump_sshd.kill_all()
    pane.wait_until(lambda s: "cannot reach the jump host 'jump' (ProxyJump of "
                    f"'{topo.box_alias}')" in _flat(s), STEP_S * 4, "the jump named as failing")

    # `s`: the real ssh fails; its own last words stay on screen once the room is back.
    pane.send_keys("s")
    pane.wait_until(lambda s: f"ssh {topo.box_alias} exited with status 255: " in _flat(s),
                    STEP_S * 2, "ssh's own error after s")
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0


@pytest.mark.skipif(Path("/workspace").exists(), reason="this machine has a /workspace")
def test_profile_mount_not_there_in_tmux(start_room: Any, sshd_box: Any, tmp_path: Path) -> None:
    """Issue 17 item 14 on the real helper: the RunPod profile's /workspace, never listed in
    hosts.toml, is watched; on this box it does not exist, which the disk pane says in one line
    and the banner explains."""
    config = tmp_path / "pod.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5},
        "hosts": {"box": {"ssh": sshd_box.alias, "profile": "runpod"}},
    }).encode())
    pane = start_room("screen-256color", config)
    screen = pane.wait_until(lambda s: "/workspace: not mounted" in s, STEP_S,
                             "the missing mount in the disk pane")
    assert "FileNotFoundError" not in screen
    assert "/workspace: not mounted, but the RunPod profile expects its volume" in screen
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0
