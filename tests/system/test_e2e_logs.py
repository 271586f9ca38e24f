"""The log pane end to end: the real `gpuroom` in a real tmux, against the test sshd.

Issue 17 items 1 and 2, issue 18 item 5: a job that ended before the room opened shows the
tail of its log at once (and older bytes on scroll-back), `queue logs -n N` prints the last N
lines, a running job's pane keeps its last line in view until the user scrolls up, and a very
long line blanks nothing. The screen is read with `tmux capture-pane`; the box's own queue
(`gpuroom queue ls --json`) says when the jobs are where the test needs them.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

# The tmux room harness of the add/kill/relaunch test: its fixtures and helpers, imported
# rather than copied.
import test_e2e_tmux
from harness.tmux import TmuxPane, find_tmux
from test_e2e_tmux import GPUROOM_BIN, STEP_S, _host_up, _isolated_env, _jobs

from gpuroom.tui.cli.main import main

room_config = test_e2e_tmux.room_config
start_room = test_e2e_tmux.start_room

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.skipif(find_tmux() is None, reason="tmux not installed: apt-get install tmux"),
]

JOB_END_S = 30.0  # a job of a few thousand echo lines ends in well under a second
LINES = 9000  # ~135 KB: more than one 64 KiB tail, so the tail and scroll-back both matter


def _add(config: Path, *argv: str) -> str:
    """`gpuroom queue add box -- ARGV`; the new job's id, read back from the box."""
    config.chmod(0o600)  # no "readable by others" toast over the log pane
    before = {j["id"] for j in _jobs(config)}
    with redirect_stdout(StringIO()) as out:
        rc = main(["--config", str(config), "queue", "add", "box", "--gpus", "0", "--", *argv])
    assert rc == 0, f"queue add exited {rc}: {out.getvalue()}"
    [new] = [j["id"] for j in _jobs(config) if j["id"] not in before]
    return str(new)


def _wait_job(config: Path, job_id: str, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_END_S
    while True:
        jobs = _jobs(config)
        job = next((j for j in jobs if j["id"] == job_id), None)
        assert job is not None, f"{job_id} is not in the queue: {jobs}"
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"{job_id} never reached {states}: {job}"
        time.sleep(0.2)


def _cli_logs(config: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The real binary's `queue logs`, stdout a pipe (raw bytes)."""
    return subprocess.run(
        [str(GPUROOM_BIN), "--config", str(config), "queue", "logs", "box", *args],
        env=_isolated_env(tmp_path), capture_output=True, timeout=60, check=False)


def _numbers(screen: str, word: str) -> list[int]:
    return [int(n) for n in re.findall(rf"\b{word}-(\d+)\b", screen)]


def _log_pane(screen: str) -> str:
    """The screen's log pane: the left part of the rows below its title."""
    lines = screen.splitlines()
    top = next(i for i, line in enumerate(lines) if "log box/" in line)
    width = lines[top].index("log box/") + 60  # the log pane is 2/3 of the row; enough
    return "\n".join(line[:width] for line in lines[top:])


def _focus_log(pane: TmuxPane) -> None:
    """Tab from the hosts table to the queue, then to the log pane."""
    pane.send_keys("Tab")
    time.sleep(0.3)  # Textual moves the focus once the Tab bubbled up; keys after it wait
    pane.send_keys("Tab")
    time.sleep(0.3)


def test_an_ended_job_shows_its_tail_at_once_and_older_bytes_on_scroll_back(
        start_room: Callable[..., TmuxPane], room_config: Path, tmp_path: Path) -> None:
    failed = _add(room_config, "sh", "-c",
                  f'i=0; while [ $i -lt {LINES} ]; do echo "done-$i"; i=$((i+1)); done; exit 3')
    ok = _add(room_config, "sh", "-c", "echo ok-1; echo ok-2")
    _wait_job(room_config, failed, ("failed",))
    _wait_job(room_config, ok, ("succeeded",))

    pane = start_room("screen-256color")
    pane.wait_until(_host_up("box"), STEP_S, "host box UP")
    # The room selects the failed job; its log's last line shows, though the job ended
    # before the room opened and the room never had a cursor for it.
    screen = pane.wait_until(lambda s: f"done-{LINES - 1}" in s, STEP_S,
                             f"the tail of {failed}'s log")
    assert f"log box/{failed}" in screen
    assert "before this" not in _log_pane(screen)  # the view is at the end, not the top

    # Another ended job: Tab to the queue pane, j to the next job.
    pane.send_keys("Tab")
    time.sleep(0.3)
    pane.send_keys("j")
    screen = pane.wait_until(lambda s: "ok-2" in s, STEP_S, f"{ok}'s log")
    assert f"log box/{ok}" in screen
    pane.send_keys("k")
    pane.wait_until(lambda s: f"done-{LINES - 1}" in s, STEP_S, f"{failed}'s log again")

    # Scroll back: Home on the log pane goes to the top, which fetches older bytes, until
    # the log's first line is on screen.
    pane.send_keys("Tab")
    time.sleep(0.3)
    seen_tops: list[int] = []
    deadline = time.monotonic() + STEP_S
    while 0 not in _numbers(_log_pane(pane.capture()), "done"):
        assert time.monotonic() < deadline, \
            f"scroll-back never reached the first line; tops seen {seen_tops}:\n{pane.capture()}"
        pane.send_keys("Home")
        time.sleep(0.5)
        tops = _numbers(_log_pane(pane.capture()), "done")
        if tops:
            seen_tops.append(min(tops))
    assert "(paused" in pane.capture()  # scrolled away from the end: follow paused
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0

    # `queue logs -n N`: the last N lines, exactly; the last is how the attempt ended.
    done = _cli_logs(room_config, tmp_path, failed, "-n", "3")
    assert done.returncode == 0, done.stderr
    *tail, end = done.stdout.splitlines(keepends=True)
    assert tail == [b"done-%d\n" % i for i in range(LINES - 2, LINES)]
    assert end.startswith(b"=== gpuroom: attempt 1 ended: exit 3 after ")


def test_follow_keeps_the_last_line_in_view_until_the_user_scrolls_up(
        start_room: Callable[..., TmuxPane], room_config: Path, tmp_path: Path) -> None:
    # A burst bigger than the pane (the first chunk the room sees), then a slow tick.
    job = _add(room_config, "sh", "-c",
               'i=0; while [ $i -lt 3000 ]; do echo "burst-$i"; i=$((i+1)); done; '
               'j=0; while [ $j -lt 900 ]; do echo "beat-$j"; j=$((j+1)); sleep 0.2; done')
    _wait_job(room_config, job, ("running",))
    deadline = time.monotonic() + STEP_S
    while b"beat-" not in _cli_logs(room_config, tmp_path, job).stdout:
        assert time.monotonic() < deadline, "the job never reached its beats"
        time.sleep(0.2)
    latest = max(_numbers(_cli_logs(room_config, tmp_path, job).stdout.decode(), "beat"))

    pane = start_room("screen-256color")
    pane.wait_until(_host_up("box"), STEP_S, "host box UP")
    screen = pane.wait_until(lambda s: f"log box/{job} (follow)" in s, STEP_S, "the job's log")
    # Newer beats keep arriving at the bottom of the pane: the view follows them.
    want = latest + 10
    screen = pane.wait_until(lambda s: max(_numbers(s, "beat"), default=-1) >= want, STEP_S,
                             f"beat-{want} in view")

    # Scrolling up pauses: the title says so and the view stays put while the job writes.
    _focus_log(pane)
    pane.send_keys("Up", "Up", "Up")
    screen = pane.wait_until(lambda s: "(paused: f or End follows)" in s, STEP_S,
                             "the title to say follow is paused")
    # The title changes at the first Up; the view settles once all three are handled.
    deadline = time.monotonic() + STEP_S
    held = _numbers(_log_pane(screen), "beat")
    while True:
        time.sleep(0.5)  # more than a beat apart: a view that still followed would differ
        now = _numbers(_log_pane(pane.capture()), "beat")
        if now == held:
            break
        assert time.monotonic() < deadline, "the paused view never settled"
        held = now
    time.sleep(2.0)  # ten more beats on the box, four polls
    assert _numbers(_log_pane(pane.capture()), "beat") == held

    # End resumes: the newest beats come into view again.
    pane.send_keys("End")
    newest = max(held, default=0) + 8
    pane.wait_until(lambda s: "(follow)" in s and max(_numbers(s, "beat"), default=-1) >= newest,
                    STEP_S, "follow to resume with newer beats")
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0


@pytest.mark.attack("hostile text", "a 5,000-character line in the log the room shows, in tmux")
def test_a_5000_character_line_blanks_nothing(
        start_room: Callable[..., TmuxPane], room_config: Path) -> None:
    # The room is open and showing the job when the long line arrives (issue 18 item 5).
    job = _add(room_config, "sh", "-c",
               'j=0; while [ $j -lt 900 ]; do echo "beat-$j"; j=$((j+1)); '
               'if [ $j -eq 15 ]; then printf "%05000d\\n" 7; fi; sleep 0.2; done')
    pane = start_room("screen-256color")
    pane.wait_until(_host_up("box"), STEP_S, "host box UP")
    pane.wait_until(lambda s: f"log box/{job}" in s and _numbers(s, "beat"), STEP_S,
                    "the job's beats")
    screen = pane.wait_until(lambda s: max(_numbers(s, "beat"), default=-1) >= 25, STEP_S,
                             "beats after the long line")
    log = _log_pane(screen)
    assert "00000000000" in log, f"the long line is not shown:\n{screen}"
    assert len(_numbers(log, "beat")) >= 3, f"the log pane lost its lines:\n{screen}"
    pane.send_keys("q")
    assert pane.wait_exit(STEP_S) == 0
