"""Issue 18 items 1-3 against the box's queue: hostile text in its events, wrongly typed
events, and a full filesystem (a real small tmpfs: bytes and inodes), through the real CLI
and runner processes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.queuebox import Box, alive, queue_box, wait_until

from gpuroom.remote.queue import queue_view
from gpuroom.remote.queue_events import EventWriter, read_events

PAGE = 4096

# What a job on the box can write into the exit fields: OSC 52 (clipboard), OSC 2 (window
# title), CSI 2J (clear screen), and Rich markup.
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
OSC2 = "\x1b]2;pwned\x07"
CLEAR = "\x1b[2J"
MARKUP = "[bold red]FAKE[/bold red]"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    yield from queue_box(tmp_path)


@pytest.fixture
def tmpfs_box(tmp_path: Path) -> Iterator[Box]:
    """A queue whose root is a real 8 MiB tmpfs with 200 inodes (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    b = Box(tmp_path)
    b.root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,nr_inodes=200,mode=0700", "tmpfs",
                    str(b.root)], check=True, capture_output=True, timeout=30)
    try:
        yield b
    finally:
        b.cleanup()
        subprocess.run(["umount", "-l", str(b.root)], check=False, capture_output=True,
                       timeout=30)


def _live_runner(box: Box) -> int:
    """A runner that stays (idle-exit 30 s), after one job ran to its end: its pid."""
    box.json("config", "--idle-exit", "30")
    first = box.add(sys.executable, "-c", "pass")
    box.wait_state(first, ("succeeded",))
    return box.wait_runner()


def _forge(qdir: Path, ev: str, **fields: Any) -> None:
    """An event as a job on the box could write it (it runs as the helper's user)."""
    writer = EventWriter(str(qdir))
    try:
        writer.append(ev, **fields)
    finally:
        writer.close()


def _printed(doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    from gpuroom.tui.cli.queue import _print_jobs

    _print_jobs(doc)
    return capsys.readouterr().out


# ----------------------------------------------------------------------------- 18.1


@pytest.mark.attack("hostile text", "OSC 52 / OSC 2 / CSI 2J and markup in an exited event's "
                    "exit_code and signal, through queue ls")
def test_escape_sequences_in_exit_fields_never_reach_the_terminal(
        box: Box, capsys: pytest.CaptureFixture[str]) -> None:
    job = box.add(sys.executable, "-c", "pass")
    box.wait_state(job, ("succeeded",))
    _forge(box.qdir, "exited", job=job, attempt=1, exit_code=OSC52 + MARKUP,
           signal=OSC2 + CLEAR + MARKUP)
    view = queue_view(str(box.root), "default")
    # The fold refused the event (wrong types), named it, and kept the job as it was.
    assert [j["state"] for j in view["jobs"]] == ["succeeded"]
    assert any(w.startswith(f"event seq {view['last_seq']} (exited) skipped: ValueError")
               for w in view["warnings"])
    out = _printed(view, capsys)
    for seq in ("\x1b", "\x07", "FAKE[/"):
        assert seq not in out
    assert "skipped" in out


@pytest.mark.attack("bad answers", "a helper answer whose queue name, exit code and signal "
                    "carry escapes and Rich markup, printed by queue ls")
def test_queue_ls_prints_every_box_string_as_inert_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"queue": "q" + MARKUP + OSC2, "jobs": [
        {"id": "j1", "name": "n" + CLEAR, "state": "failed", "argv": ["x", OSC52],
         "attempts": [{"attempt": 1, "exit_code": OSC52, "signal": MARKUP + CLEAR}]},
        {"id": "j2", "name": "n", "state": "failed", "argv": ["y"],
         "attempts": [{"attempt": 1, "exit_code": None, "signal": "[blink]SIGKILL[/blink]"}]},
    ], "warnings": [MARKUP + OSC52]}
    out = _printed(doc, capsys)
    assert "\x1b" not in out and "\x07" not in out
    # Markup is shown as the characters it is, in the title and the warning alike.
    assert out.count(MARKUP) == 2
    # Neither exit field is a number or a signal name: shown as unknown, never as given.
    assert "blink" not in out


# ----------------------------------------------------------------------------- 18.2


@pytest.mark.attack("bad answers", "wrongly typed events in the runner's own paths: a kill "
                    "with grace 'x', a job with gpus 'x', slots 'x'")
def test_the_runner_never_dies_on_a_wrongly_typed_event(box: Box) -> None:
    box.json("config", "--idle-exit", "30")
    sleeper = box.add(sys.executable, "-c", "import time; time.sleep(60)")
    box.wait_state(sleeper, ("running",))
    pid = box.wait_runner()
    _forge(box.qdir, "kill_requested", job=sleeper, grace="x")
    _forge(box.qdir, "added", argv=["true"], cwd=str(box.work), gpus="x", job="j2")
    _forge(box.qdir, "configured", slots="x")
    marker = box.work / "ran"
    job = box.add(sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')",
                  opts=("--gpus", "0"))
    box.run("kill", sleeper, "--grace", "1")
    box.wait_state(job, ("succeeded",))
    assert alive(pid) and box.runner_pid() == pid
    assert marker.read_text() == "x"
    warnings = box.ls()["warnings"]
    assert sum("skipped: ValueError" in w for w in warnings) == 3, warnings


@pytest.mark.attack("faults", "queue add when no runner can start (runner.lock is a "
                    "directory)")
def test_add_is_ok_only_when_a_live_runner_will_see_the_job(box: Box) -> None:
    (box.qdir / "runner.lock").mkdir()
    before = (box.qdir / "events.jsonl").read_bytes()
    proc = box.run("add", "--", "true", check=False)
    assert proc.returncode == 1, proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["recorded"] is False
    assert "runner.log" in doc["fix"]
    # Not recorded: a retry after the fix cannot run it twice.
    assert (box.qdir / "events.jsonl").read_bytes() == before


# ----------------------------------------------------------------------------- 18.3


def _pad_to_page(events: Path) -> None:
    """Append one harmless event so the file ends on a page boundary: on a full tmpfs the next
    append then needs a new page (within the last page it would still fit)."""
    evs, _ = read_events(str(events.parent))
    seq = max(e["seq"] for e in evs) + 1
    line = json.dumps({"ev": "configured", "pad": "", "seq": seq, "t": 1.0},
                      separators=(",", ":")) + "\n"
    pad = (-(events.stat().st_size + len(line))) % PAGE
    with open(events, "a") as f:
        f.write(line.replace('"pad":""', '"pad":"' + "x" * pad + '"'))
    assert events.stat().st_size % PAGE == 0


def _pad_to_page_locked(events: Path) -> None:
    """_pad_to_page under the events file's lock: a live runner may append beside us."""
    writer = EventWriter(str(events.parent))
    try:
        writer.lock()
        try:
            _pad_to_page(events)
        finally:
            writer.unlock()
    finally:
        writer.close()


def _fill_bytes(where: Path) -> Path:
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, PAGE):
            while True:
                try:
                    f.write(b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    return filler


def _fill_inodes(where: Path) -> list[Path]:
    where.mkdir()
    made = []
    for n in range(100000):
        path = where / str(n)
        try:
            path.touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return made
        made.append(path)
    raise AssertionError("the inode table never filled")


def _queue_findings(doc: dict[str, Any]) -> list[Any]:
    from gpuroom.tui.model import LinkState
    from gpuroom.tui.rules.doctor import diagnose
    from gpuroom.tui.snapshot import read_snapshot

    snap = read_snapshot({"queue": {"queues": {"default": doc}}})
    return [f for f in diagnose(None, snap, LinkState.UP, None, 0.0, host="box")
            if "queue" in f.title]


@pytest.mark.attack("faults", "queue add on a full filesystem (ENOSPC), then the user's retry")
def test_add_on_a_full_disk_is_not_recorded_and_the_retry_runs_once(tmpfs_box: Box) -> None:
    box = tmpfs_box
    box.json("config", "--idle-exit", "1")
    events = box.qdir / "events.jsonl"
    _pad_to_page(events)
    filler = _fill_bytes(box.root)
    before = events.read_bytes()
    # With a runner to start (its environment file is refused) and without (the event
    # itself is refused and cut back): not recorded, said with the cause and the fix.
    for opts in ((), ("--no-start",)):
        proc = box.run("add", *opts, "--", "true", check=False)
        assert proc.returncode == 1, proc.stdout
        assert b"Traceback" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["ok"] is False and doc["recorded"] is False, doc
        assert "No space left on device" in doc["error"] and "df -h" in doc["fix"], doc
        assert events.read_bytes() == before
    # Every other verb that writes the events file says so too, in its JSON, no traceback.
    for verb in (("config", "--slots", "2"), ("kill", "j1", "--wait", "1")):
        proc = box.run(*verb, check=False)
        assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
        assert json.loads(proc.stdout)["ok"] is False
        assert events.read_bytes() == before
    filler.unlink()
    marker = box.work / "ran"
    job = box.add(sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")
    box.wait_state(job, ("succeeded",))
    assert marker.read_text() == "x"


@pytest.mark.attack("faults", "the inode table runs out while the runner launches a job")
def test_the_runner_survives_an_exhausted_inode_table_and_runs_the_job_once(
        tmpfs_box: Box) -> None:
    box = tmpfs_box
    pid = _live_runner(box)
    fillers = _fill_inodes(box.root / "fill")
    marker = box.work / "ran"
    # Appending to the events file needs no inode, and a runner holds its lock: recorded, ok.
    job = box.add(sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")
    # The job's log needs an inode: the runner backs off, says so, and lives.
    error = wait_until(lambda: box.ls()["runner"].get("write_error"), 15, "the runner's error")
    assert "No space left on device" in error, error
    assert alive(pid)
    # The doctor says it from the queue's answer (the probe's queue section has its shape).
    [finding] = _queue_findings(box.ls())
    assert (finding.id, finding.severity) == ("U7", "critical")
    assert finding.title == "queue default: the runner cannot write its files"
    assert "No space left on device" in finding.seen
    for path in fillers:
        path.unlink()
    box.wait_state(job, ("succeeded",), timeout=30)
    assert marker.read_text() == "x"
    assert box.runner_pid() == pid and alive(pid)
    wait_until(lambda: box.ls()["runner"].get("write_error") is None, 15, "the error cleared")
    assert _queue_findings(box.ls()) == []
    assert [e["ev"] for e in box.events(job)].count("started") == 1


@pytest.mark.attack("faults", "the queue directory deleted and made again under a live runner")
def test_a_runner_whose_queue_was_replaced_leaves_and_no_job_runs_twice(box: Box) -> None:
    import shutil

    old = _live_runner(box)
    shutil.rmtree(box.root)
    box.json("config", "--idle-exit", "30")
    marker = box.work / "ran"
    job = box.add(sys.executable, "-c",
                  f"import time; open({str(marker)!r}, 'a').write('x'); time.sleep(1)")
    box.wait_state(job, ("succeeded",))
    # The runner of the deleted queue left instead of running the new queue's jobs too.
    wait_until(lambda: not alive(old), 10, "the old runner gone")
    assert box.runner_pid() != old
    assert marker.read_text() == "x"


@pytest.mark.attack("faults", "a job ends while the queue's filesystem is full (its exit "
                    "cannot be recorded)")
def test_an_end_on_a_full_disk_is_recorded_once_space_is_back(tmpfs_box: Box) -> None:
    box = tmpfs_box
    box.json("config", "--idle-exit", "30")
    marker, go = box.work / "ran", box.work / "go"
    job = box.add(sys.executable, "-c",
                  f"import os, time\nopen({str(marker)!r}, 'a').write('x')\n"
                  f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
                  "raise SystemExit(3)")
    box.wait_state(job, ("running",))
    wait_until(marker.exists, 10, "the job itself running")
    pid = box.wait_runner()
    _pad_to_page_locked(box.qdir / "events.jsonl")
    filler = _fill_bytes(box.root)
    go.touch()
    error = wait_until(lambda: box.ls()["runner"].get("write_error"), 15, "the runner's error")
    assert "No space left on device" in error and alive(pid), error
    assert box.job(job)["state"] == "running"  # not on record yet, and not said otherwise
    filler.unlink()
    done = box.wait_state(job, ("failed",))
    # The job's own code (the wrapper could not write its status file either), one attempt.
    assert [a["exit_code"] for a in done["attempts"]] == [3]
    assert marker.read_text() == "x" and box.runner_pid() == pid


@pytest.mark.sshd
@pytest.mark.attack("faults", "the room's add (the fleet over ssh) on a box whose queue "
                    "filesystem is full")
def test_the_rooms_add_on_a_full_disk_says_the_cause_and_the_fix(
        sshd_box: Any, tmp_path: Path) -> None:
    import asyncio
    import pwd

    import tomli_w

    from gpuroom.tui import config as cfg
    from gpuroom.tui.fleet.live import Fleet
    from gpuroom.tui.transport.link import LinkError

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    user = pwd.getpwnam(sshd_box.user)
    qdir = sshd_box.home / ".gpuroom" / "queues" / "default"
    qdir.mkdir(parents=True, exist_ok=True)
    for path in (qdir.parent.parent, qdir.parent, qdir):
        os.chown(path, user.pw_uid, user.pw_gid)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64k,mode=0700,uid={user.pw_uid},"
                    f"gid={user.pw_gid}", "tmpfs", str(qdir)], check=True, timeout=30)
    try:
        _fill_bytes(qdir)
        config = tmp_path / "hosts.toml"
        config.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config)},
            "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
        fleet = Fleet(cfg.load(config))

        async def add() -> str:
            try:
                return await fleet.queue_add("box", ["true"])
            finally:
                await fleet.close()

        with pytest.raises(LinkError) as caught:
            asyncio.run(add())
        assert "No space left on device" in caught.value.message, caught.value
        assert caught.value.fix is not None and "df -h" in caught.value.fix
    finally:
        subprocess.run(["umount", "-l", str(qdir)], check=False, timeout=30)


@pytest.mark.attack("faults", "the queue's logs directory replaced by a file under a live "
                    "runner (a failure of its own, not of the disk)")
def test_a_failing_tick_is_said_and_retried_never_fatal(box: Box) -> None:
    import shutil

    pid = _live_runner(box)
    logs = box.qdir / "logs"
    shutil.rmtree(logs)
    logs.write_text("not a directory")
    marker = box.work / "ran"
    job = box.add(sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")
    error = wait_until(lambda: box.ls()["runner"].get("error"), 15, "the runner's error")
    assert "NotADirectoryError" in error and alive(pid), error
    assert box.ls()["runner"]["write_error"] is None
    assert _queue_findings(box.ls()) == []  # not a full disk: no U7
    logs.unlink()
    logs.mkdir()
    box.wait_state(job, ("succeeded",))
    assert marker.read_text() == "x" and box.runner_pid() == pid
    wait_until(lambda: box.ls()["runner"].get("error") is None, 15, "the error cleared")


@pytest.mark.sshd
@pytest.mark.attack("hostile text", "a job on the box forges an exited event with OSC 52 / "
                    "OSC 2 / CSI 2J and markup, read by gpuroom queue ls over ssh")
def test_forged_exit_fields_through_queue_ls_over_ssh(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tomli_w

    from gpuroom.tui.cli.main import main

    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config)},
        "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
    try:
        assert main(["--config", str(config), "queue", "add", "box", "--", "true"]) == 0
        qdir = sshd_box.home / ".gpuroom" / "queues" / "default"
        wait_until(lambda: any(e["ev"] == "exited" for e in read_events(str(qdir))[0]), 30,
                   "the job's end")
        # What the job itself could have appended (it runs as the helper's user).
        _forge(qdir, "exited", job="j1", attempt=1, exit_code=OSC52 + MARKUP,
               signal=OSC2 + CLEAR + MARKUP)
        capsys.readouterr()
        monkeypatch.setenv("COLUMNS", "300")  # rich's width: no line wrapped mid-word
        assert main(["--config", str(config), "queue", "ls", "box"]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "FAKE[/" not in out
        assert "succeeded" in out and "skipped: ValueError" in out
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
