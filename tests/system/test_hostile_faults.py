"""Faults over the real sshd (issue 18): sshd killed in the middle of a poll, the box's queue
runner killed -9 while a job runs, and garbage and torn lines in the queue's events.jsonl.

tests/system/test_link_ssh.py kills sshd between polls and freezes it; tests/system/test_queue.py
kills the runner on a local queue; here the same faults are met through the jump host's verbs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import (
    FINAL,
    GPUROOM,
    add_job,
    end_user_processes,
    gpuroom,
    hosts_toml,
    queue_jobs,
    wait_for,
)

from gpuroom.tui.config import Config, HostConfig, Settings
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import LinkState

pytestmark = pytest.mark.sshd


@pytest.fixture
def box(sshd_box: Any, tmp_path: Path) -> Any:
    sshd_box.fault_config = hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                                       sshd_box.ssh_config)
    for name in ("runs", "b-ran"):  # a file, or a dir another test left under that name
        shutil.rmtree(sshd_box.home / name, ignore_errors=True)
        (sshd_box.home / name).unlink(missing_ok=True)
    yield sshd_box
    # The runner may be detached with setsid, out of reach of tmux kill-session.
    end_user_processes(sshd_box.identity.user.uid)


def add(config: Path, *argv: str) -> str:
    return add_job(config, "--", *argv)


def wait_final(config: Path, *ids: str) -> dict[str, dict[str, Any]]:
    def final() -> dict[str, dict[str, Any]] | None:
        seen = queue_jobs(config)
        return seen if all(seen.get(i, {}).get("state") in FINAL for i in ids) else None

    return wait_for(final, f"jobs {ids} to end")


@pytest.mark.attack("faults", "sshd and every session killed while a poll waits for the "
                    "helper's answer: STALE within the deadline, the last snapshot kept, no "
                    "verdict on jobs, UP again once sshd is back")
async def test_sshd_killed_mid_poll(box: Any, tmp_path: Path) -> None:
    # The helper's serve channel answers only after 3 s, so the kill lands inside the poll.
    slow = box.home / "python-slow-serve"
    slow.write_text('#!/bin/sh\nif [ "$3" = serve ] && [ -e "$HOME/slow" ]; then sleep 3; fi\n'
                    'exec python3 "$@"\n')
    slow.chmod(0o755)
    config = Config(path=tmp_path / "h.toml", settings=Settings(ssh_config=str(box.ssh_config)))
    config.hosts["box"] = HostConfig(name="box", ssh=box.alias, python=str(slow))
    fleet = Fleet(config)
    try:
        assert (await fleet.poll_host("box")).state is LinkState.UP
        good = fleet.state("box").snapshot
        await fleet.close()  # the next poll opens a new serve channel, which is slow
        (box.home / "slow").write_text("")
        poll = asyncio.create_task(fleet.poll_host("box"))
        await asyncio.sleep(1.5)
        assert not poll.done()
        t0 = time.monotonic()
        box.kill_all()
        state = await asyncio.wait_for(poll, 30)
        assert time.monotonic() - t0 < 15.0
        assert state.state is LinkState.STALE, state.error
        assert state.snapshot is good
        assert "job" not in (state.error or "").lower()  # GEN8: no verdict about runs
        (box.home / "slow").unlink()
        box.start()
        state = await fleet.poll_host("box")
        assert state.state is LinkState.UP, state.error
    finally:
        await fleet.close()


def runner_pids(box: Any) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != box.identity.user.uid:
                continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"queue" in cmd and b"runner" in cmd:
            found.append(int(pid))
    return found


@pytest.mark.attack("faults", "the box's queue runner killed -9 while a job runs: the job "
                    "keeps running and ends once, recorded by the next runner; the queue goes on")
def test_runner_killed_with_a_job_running(box: Any) -> None:
    config = box.fault_config
    runs = box.home / "runs"
    first = add(config, "sh", "-c", f"echo start >> {runs}; sleep 5; echo end >> {runs}")
    wait_for(lambda: runs.exists() and "start" in runs.read_text(), "the job to start",
             every_s=0.05)
    pids = runner_pids(box)
    assert pids, "no runner found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    # With its runner dead the job is not declared dead (GEN8): it is still running.
    assert queue_jobs(config)[first]["state"] == "running"
    status = json.loads(gpuroom(config, "status", "--json").stdout)
    assert status["hosts"][0]["state"] == "up"
    wait_for(lambda: "end" in runs.read_text(), "the job to end on its own")
    second = add(config, "sh", "-c", f"echo second >> {runs}")  # starts a new runner
    seen = wait_final(config, first, second)
    assert runs.read_text() == "start\nend\nsecond\n"  # each ran once, none twice
    assert len(seen[first]["attempts"]) == 1, seen[first]
    assert seen[second]["state"] == "succeeded"


GARBAGE = [
    b"\x00\xff\xfe binary junk \x1b]52;c;ZXZpbA==\x07\n",
    b"not json at all\n",
    b"[1, 2, 3]\n",
    b'"just a string"\n',
    b"null\n",
    b'{"ev": "added", "se',  # torn, then the next line glued on
    b'\n{"ev": "no_such_event", "seq": 999999, "t": 1}\n',
    b"{" + b'"pad": "' + b"a" * 2_000_000 + b'"}\n',  # a 2 MB line
    b"\n\n   \n",
]


@pytest.mark.attack("faults", "binary junk, non-JSON, non-object, torn, unknown, blank and 2 MB "
                    "lines in events.jsonl: queue ls, status and doctor still answer, the "
                    "next job still runs once")
def test_garbage_event_lines_do_not_stop_the_queue(box: Any) -> None:
    config = box.fault_config
    done_before = add(config, "true")
    wait_final(config, done_before)
    [events] = list((box.home / ".gpuroom" / "queues").rglob("events.jsonl"))
    with events.open("ab") as f:
        for line in GARBAGE:
            f.write(line)
    seen = queue_jobs(config)
    assert seen[done_before]["state"] == "succeeded"
    marker = box.home / "b-ran"
    after = add(config, "sh", "-c", f"echo B >> {marker}")
    seen = wait_final(config, after)
    assert seen[after]["state"] == "succeeded" and marker.read_text() == "B\n"
    status = json.loads(gpuroom(config, "status", "--json").stdout)
    assert status["hosts"][0]["state"] == "up", status
    gpuroom(config, "doctor")


BIG_BYTES = 96 << 20  # big enough that a pull is caught mid-file on loopback


@pytest.mark.attack("faults", "gpuroom pull killed -9 mid-file (sftp, openssh, rsync), then a "
                    "byte flipped in the .part it left: the next pull detects it, fetches the "
                    "file again and ends with the box's exact bytes")
@pytest.mark.parametrize("method", ["sftp", "openssh", "rsync"])
def test_pull_killed_then_a_flipped_byte_in_the_part(box: Any, tmp_path: Path,
                                                     method: str) -> None:
    config = box.fault_config
    job = add(config, "sh", "-c", "mkdir -p \"$GPUROOM_CKPT_DIR\" && head -c "
              f"{BIG_BYTES} /dev/urandom > \"$GPUROOM_CKPT_DIR/big.bin\"")
    wait_final(config, job)
    [source] = list((box.home / ".gpuroom").rglob("big.bin"))
    out = tmp_path / "pulled"
    argv = [GPUROOM, "--config", str(config), "pull", "box", "--method", method, "--to", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def part_started() -> bool:
            parts = list(out.rglob("big.bin.part")) if out.exists() else []
            return bool(parts) and parts[0].stat().st_size > (4 << 20)

        wait_for(part_started, "the pull to write part of the file", every_s=0.01)
    finally:
        proc.kill()  # SIGKILL: no handler runs, the .part is left as it was
        proc.wait(timeout=30)
    [part] = list(out.rglob("big.bin.part"))
    size = part.stat().st_size
    assert 0 < size < BIG_BYTES, size
    with part.open("r+b") as f:
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    done = gpuroom(config, "pull", "box", "--method", method, "--to", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    [pulled] = list(out.rglob("big.bin"))
    assert pulled.read_bytes() == source.read_bytes()
    assert not list(out.rglob("*.part"))
