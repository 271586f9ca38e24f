"""Hostile text from the box through every CLI verb (issue 18), on a real terminal.

A real sshd box whose job has an escape-laden name, argv and log (ANSI, OSC 52 and OSC 2, DCS,
C1, bidi, invalid UTF-8, NUL, a 5 MB line), whose watched mount is a folder with the same
characters in its name, and whose helper answers (through a stand-in interpreter) a hostname
made of them. Each verb runs as the installed `gpuroom` command with its stdout and stderr on a
pseudo-terminal, as a user would run it, so what is checked is exactly what reached the
terminal: Rich's own colour codes (SGR) are allowed, nothing else with an ESC, no BEL, no NUL,
no C1 control, no bidi override, no markup read as markup, no traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib
from harness.hostile import (
    GPUROOM,
    TERMINAL_CONTROLS,
    add_job,
    end_user_processes,
    gpuroom,
    gpuroom_json,
    hosts_toml,
    queue_jobs,
    wait_for,
)

from gpuroom.tui.cli.queue import LogWriter

pytestmark = pytest.mark.sshd

VERB_TIMEOUT_S = 90.0

OSC52 = "\x1b]52;c;ZXZpbA==\x07"  # writes the user's clipboard
TITLE = "\x1b]2;pwned-title\x07"  # renames the terminal window
BLINK = "\x1b[5;31;47m"  # an SGR Rich never writes: told apart from Rich's own colours
PAYLOAD = (f"ev{OSC52}{TITLE}\x1b[2J{BLINK}\x1bPq#0~~\x1b\\\x9b31m\x9d0;t\x9c\u202e"
           "[@click=app.quit]x[/]il")
# Bytes a job may write that are not even text.
RAW = b"\xff\xfe\x00\x9b2J \x1b]52;c;cm0gLXJm\x07 tail"
HUGE_LINE_BYTES = 5_000_000

# What the helper is made to answer as its hostname (the rest of the snapshot is real).
FAKE_PYTHON = """#!/usr/bin/env python3
import json, os, subprocess, sys
HOSTNAME = json.loads(%r)

def tamper(doc):
    snap = doc.get("snapshot", doc)
    if isinstance(snap, dict) and isinstance(snap.get("host"), dict):
        snap["host"]["hostname"] = HOSTNAME
    return doc

# argv: -I (the helper starts isolated), the helper's path, its subcommand.
if len(sys.argv) > 3 and sys.argv[3] == "serve":
    real = subprocess.Popen([sys.executable, *sys.argv[1:3], "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for line in sys.stdin.buffer:
        real.stdin.write(line)
        real.stdin.flush()
        sys.stdout.write(json.dumps(tamper(json.loads(real.stdout.readline()))) + "\\n")
        sys.stdout.flush()
    sys.exit(0)
if len(sys.argv) > 3 and sys.argv[3] == "probe":
    out = subprocess.run([sys.executable, *sys.argv[1:]], stdout=subprocess.PIPE).stdout
    sys.stdout.write(json.dumps(tamper(json.loads(out))))
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""

JOB = f"""import sys
import tempfile
out = sys.stdout.buffer
out.write({PAYLOAD!r}.encode() + b"\\n")
out.write({RAW!r} + b"\\n")
if "--hold" not in sys.argv:  # the room's log pane and a 5,000-character line: issue 18 item 5
    out.write(b"x" * {HUGE_LINE_BYTES} + b"\\n")
out.write(b"job done\\n")
out.flush()
if "--hold" in sys.argv:  # stay running, so the room selects the job and shows its log
    import time
    time.sleep(40)
"""

# What gpuroom itself writes on a terminal: Rich's colours, and `queue logs` redrawing a
# progress line in place (LogWriter.CLEAR_LINE). The box's own bytes never carry an ESC.
SGR = re.compile(r"\x1b\[[0-9;]*m|" + re.escape(LogWriter.CLEAR_LINE))
FORBIDDEN = TERMINAL_CONTROLS


def in_a_terminal(argv: list[str], env: dict[str, str],
                  keys: list[tuple[float, bytes]] | None = None) -> tuple[int, str]:
    """Run ``argv`` on a 160x50 pty (stdin too when ``keys`` are typed: (after seconds,
    bytes)); its exit status and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave if keys else subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=env, close_fds=True, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    start = time.monotonic()
    deadline = start + VERB_TIMEOUT_S
    pending = list(keys or [])
    try:
        while time.monotonic() < deadline:
            if pending and time.monotonic() - start >= pending[0][0]:
                os.write(master, pending.pop(0)[1])
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            raise AssertionError(f"{argv} still running after {VERB_TIMEOUT_S} s")
        rc = proc.wait(timeout=30)
    finally:
        os.close(master)
    return rc, b"".join(chunks).decode("utf-8", errors="replace")


def assert_inert(verb: str, rc: int, shown: str) -> None:
    assert rc != 70 and "Traceback" not in shown and "internal error" not in shown, (verb, shown)
    assert BLINK not in shown, (verb, "the box's SGR reached the terminal")
    rest = SGR.sub("", shown)
    for c in FORBIDDEN:
        assert c not in rest, (verb, repr(c), repr(rest[max(0, rest.find(c) - 80):][:200]))


@pytest.fixture
def hostile_box(sshd_box: Any, tmp_path: Path) -> Any:
    box = sshd_box
    fake = box.home / "python-hostile-hostname"
    fake.write_text(FAKE_PYTHON % json.dumps(PAYLOAD))
    fake.chmod(0o755)
    # Its own small filesystem, so the disk pane shows it rather than folding it into ~'s; a
    # short path, so the pane's mount column shows the hostile part.
    parent = Path(tempfile.mkdtemp(prefix="m", dir="/tmp"))
    parent.chmod(0o755)
    mount = parent / PAYLOAD.replace("/", "_")
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                             capture_output=True, check=False).returncode == 0
    (box.home / "job.py").write_text(JOB)
    box.hostile_config = hosts_toml(
        tmp_path / "hosts.toml",
        {"box": {"ssh": box.alias, "python": str(fake), "mounts": [str(mount)]}}, box.ssh_config)
    box.hostile_mount = mount
    box.hostile_mounted = mounted  # False where mount(8) is not allowed (no CAP_SYS_ADMIN)
    yield box
    # The runner may be detached with setsid, out of reach of tmux kill-session.
    end_user_processes(box.identity.user.uid)
    if mounted:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)
    shutil.rmtree(parent, ignore_errors=True)


def terminal_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TMUX")}
    env.update({"TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50",
                "XDG_STATE_HOME": str(tmp_path / "state"), "FORCE_COLOR": "1"})
    return env


def hostile_job(box: Any, *, until: tuple[str, ...] = ("succeeded", "failed"),
                hold: bool = False) -> str:
    """The hostile job, added through the CLI and run on the box until its state is one of
    ``until`` (and its log is written, when it holds); its id."""
    config = box.hostile_config
    job = add_job(config, "--name", PAYLOAD, "--", "python3", str(box.home / "job.py"), PAYLOAD,
                  *(["--hold"] if hold else []))

    def reached() -> bool:
        state = queue_jobs(config)[job]["state"]
        logs = list((box.home / ".gpuroom").rglob(f"{job}*.log"))
        written = not hold or any(b"job done" in p.read_bytes()[-100:] for p in logs)
        return state in until and written

    wait_for(reached, f"job {job} to be {until}")
    return job


@pytest.mark.attack("hostile text", "OSC 52, OSC 2, CSI 2J, SGR, DCS, C1, bidi, invalid UTF-8, "
                    "NUL, markup and a 5 MB line in a job's name, argv and log, a mount's name "
                    "and the hostname, through status, status --json, doctor, probe, queue ls "
                    "(--json), queue logs, gate, hosts list and the answers of queue add, kill "
                    "and relaunch on a real terminal")
def test_box_text_reaches_a_terminal_inert_through_every_verb(
        hostile_box: Any, tmp_path: Path) -> None:
    config = hostile_box.hostile_config
    job = hostile_job(hostile_box)
    env = terminal_env(tmp_path)
    said: dict[str, str] = {}
    for verb in (["status"], ["status", "--json"], ["doctor"], ["probe", "box"],
                 ["queue", "ls", "box"], ["queue", "ls", "box", "--json"],
                 ["queue", "logs", "box", job], ["gate", "box"], ["hosts", "list"],
                 # The one-line answers of the acting verbs quote the box's words and names.
                 ["queue", "add", "box", "--name", PAYLOAD, "--", "true"],
                 ["queue", "kill", "box", job], ["queue", "relaunch", "box", "--", PAYLOAD]):
        rc, shown = in_a_terminal([GPUROOM, "--config", str(config), *verb], env)
        assert_inert(" ".join(verb), rc, shown)
        said[" ".join(verb)] = shown
    # The attack really reached each verb: the text around the sequences is there.
    assert "job done" in said["queue logs box " + job]
    assert "xxxxxxxx" in said["queue logs box " + job]
    for verb in ("status", "probe box", "queue ls box", "status --json"):
        assert "ev" in said[verb] and "il" in said[verb], verb


# What Textual itself writes (measured on its LinuxDriver): SGR colours, cursor moves, private
# modes on and off, a mode query, the kitty keyboard protocol and the pointer shape (OSC 22).
TEXTUAL_OWN = re.compile(r"\x1b\[[0-9;]*[mH]|\x1b\[\?[0-9;]*[hl]|\x1b\[\?[0-9]+\$p"
                         r"|\x1b\[[<>][0-9]*u|\x1b\]22;[a-z-]+\x07")
BOX_MARKERS = ("ZXZpbA", "cm0gLXJm", "pwned-title", "5;31;47", "Pq#0", "\x1b[2J")


def assert_room_inert(rc: int, shown: str) -> str:
    """The room exited cleanly and wrote no byte sequence of the box's; what it wrote, less
    Textual's own sequences, for the caller to find the attack's text in."""
    assert rc == 0, shown[-2000:]
    for marker in BOX_MARKERS:
        assert marker not in shown, marker
    rest = TEXTUAL_OWN.sub("", shown)
    for c in FORBIDDEN:
        assert c not in rest, (repr(c), repr(rest[max(0, rest.find(c) - 80):][:200]))
    return rest


@pytest.mark.attack("hostile text", "the same job, mount and hostname in the open room (the real "
                    "app on a pty): no byte sequence from the box in what Textual writes to the "
                    "terminal, markup shown as text")
def test_the_room_writes_no_escape_from_the_box(hostile_box: Any, tmp_path: Path) -> None:
    config = hostile_box.hostile_config
    job = hostile_job(hostile_box, until=("running",), hold=True)
    try:
        rc, shown = in_a_terminal([GPUROOM, "--config", str(config)], terminal_env(tmp_path),
                                  keys=[(10.0, b"q")])
    finally:
        gpuroom_json(config, "queue", "kill", "--json", "box", job)
    rest = assert_room_inert(rc, shown)
    # The attack reached the screen: the job's name in the queue pane, its log in the log pane.
    assert "ev[@click=app.quit]x[/]il" in rest
    # The disk pane's row of the mount (its markup is tests/unit/tui/test_hostile_panes.py's);
    # without a filesystem of its own it shares ~'s row.
    if hostile_box.hostile_mounted:
        assert f"{hostile_box.hostile_mount.parent}/ev" in rest
    assert f"=== gpuroom {job} attempt 1" in rest


NOTIFIER = """#!/bin/sh
# Keeps the last argument, the notification's text, NUL-terminated.
for last; do :; done
printf '%s\\0' "$last" >> "$0.got"
"""


@pytest.mark.attack("hostile text", "a full disk mounted at the escape-laden path (a critical "
                    "U6 finding naming it), in the open room with notify_command set: the "
                    "notification's text is inert")
def test_a_notification_carries_the_box_text_inert(hostile_box: Any, tmp_path: Path) -> None:
    if not hostile_box.hostile_mounted:
        pytest.skip("mount -t tmpfs is not allowed here (needs CAP_SYS_ADMIN): no full disk")
    notifier = tmp_path / "notifier"
    notifier.write_text(NOTIFIER)
    notifier.chmod(0o755)
    doc = tomllib.loads(hostile_box.hostile_config.read_text())
    doc["settings"]["notify_command"] = [str(notifier)]
    hostile_box.hostile_config.write_bytes(tomli_w.dumps(doc).encode())
    with contextlib.suppress(OSError):  # ENOSPC: full is what is wanted
        (hostile_box.hostile_mount / "fill").write_bytes(b"\0" * (2 << 20))
    rc, shown = in_a_terminal([GPUROOM, "--config", str(hostile_box.hostile_config)],
                              terminal_env(tmp_path), keys=[(10.0, b"q")])
    assert rc == 0, shown[-2000:]
    got = Path(f"{notifier}.got")
    assert got.exists(), "no notification was sent"
    texts = got.read_text(encoding="utf-8", errors="replace").split("\0")[:-1]
    assert any("ev" in t and "il" in t for t in texts), texts
    for text in texts:
        for c in (*FORBIDDEN, "\n", "\r"):
            assert c not in text, (repr(c), text)


@pytest.mark.attack("hostile text", "a recording of the hostile box (gpuroom record) replayed in "
                    "the room on a pty: no byte sequence from the box in what Textual writes")
def test_a_replayed_recording_of_the_box_is_inert(hostile_box: Any, tmp_path: Path) -> None:
    config = hostile_box.hostile_config
    job = hostile_job(hostile_box, until=("running",), hold=True)
    recording = tmp_path / "fleet.jsonl"
    try:
        done = gpuroom(config, "record", str(recording), "--polls", "2", "--interval", "0.5")
        assert done.returncode == 0, done.stderr
    finally:
        gpuroom_json(config, "queue", "kill", "--json", "box", job)
    rc, shown = in_a_terminal([GPUROOM, "replay", str(recording), "--speed", "10"],
                              terminal_env(tmp_path), keys=[(6.0, b"q")])
    rest = assert_room_inert(rc, shown)
    assert "ev[@click=app.quit]x[/]il" in rest
    assert f"=== gpuroom {job} attempt 1" in rest
