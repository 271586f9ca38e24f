"""One stuck file, one odd name or one hostile job never stalls a pull, a poll or a kill.

Over the real sshd: a checkpoint swapped for a FIFO between the manifest and its fetch, a
job that turns its own log into a FIFO, a file name of 252 characters and a file beside a
directory named like its partial download, and a daemon a job started with ``setsid``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import (
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
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.rules.gate import evaluate
from gpuroom.tui.snapshot import read_snapshot
from gpuroom.tui.transport import pull as transfer
from gpuroom.tui.transport.link import HostLink

pytestmark = pytest.mark.sshd
needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
FIFO_WAITS = ("wait_for_partner", "fifo_open", "pipe_read", "pipe_wait", "anon_pipe_read")
PULL_BOUND_S = 120.0  # far below "for ever", above the per-request deadlines


@pytest.fixture
def box(sshd_box: Any, tmp_path: Path) -> Any:
    sshd_box.fault_config = hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                                       sshd_box.ssh_config)
    yield sshd_box
    end_user_processes(sshd_box.identity.user.uid)


def own(box: Any, path: Path) -> None:
    uid, gid = box.identity.user.uid, box.identity.user.gid
    for dirpath, dirs, names in os.walk(path):
        for n in [dirpath, *(os.path.join(dirpath, x) for x in dirs + names)]:
            os.lchown(n, uid, gid)


def box_dir(box: Any, name: str) -> Path:
    d = box.home / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


def user_pids(uid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
            except OSError:
                continue
    return out


def stuck_on_fifo(uid: int) -> list[str]:
    """The test user's processes asleep in a FIFO's open or read, with their command."""
    out = []
    for pid in user_pids(uid):
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if wchan in FIFO_WAITS:
            out.append(f"{pid} {wchan} {cmd.decode(errors='replace')}")
    return out


def helpers(uid: int) -> list[int]:
    """The test user's gpuroom helper processes (probe, serve, manifest...)."""
    out = []
    for pid in user_pids(uid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"remote-" in cmd and b".pyz" in cmd and b"runner" not in cmd and b"_exec" not in cmd:
            out.append(pid)
    return out


# ------------------------------------------------------------------------------ 30.1

@pytest.mark.attack("faults", "a checkpoint swapped for a FIFO after the manifest listed it "
                    "(sftp and ssh's sftp): that file fails with its path and 'FIFO', the other "
                    "files are pulled, and no process on the box stays blocked on the FIFO")
@pytest.mark.parametrize("method", ["sftp", pytest.param("openssh", marks=needs_ssh)])
async def test_checkpoint_swapped_for_a_fifo_fails_alone(box: Any, tmp_path: Path,
                                                         method: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src = box_dir(box, "ckpt_fifo")
    for name in ("a.bin", "b.pt.bin", "c.bin"):
        (src / name).write_bytes(os.urandom(70_000))
    own(box, src)
    listed = transfer.take_manifest

    async def then_swap(*args: Any, **kwargs: Any) -> Any:
        doc = await listed(*args, **kwargs)
        if not kwargs.get("only"):
            (src / "b.pt.bin").unlink()
            os.mkfifo(src / "b.pt.bin")
            os.lchown(src / "b.pt.bin", box.identity.user.uid, box.identity.user.gid)
        return doc

    monkeypatch.setattr(transfer, "take_manifest", then_swap)
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)
    try:
        result = await asyncio.wait_for(
            transfer.pull(link, str(src), tmp_path / "out", method=method,
                          state_path=tmp_path / "pulls.json"), PULL_BOUND_S)
    finally:
        await link.close()
    by = {f.path: f for f in result.files}
    assert by["a.bin"].status == by["c.bin"].status == "verified", by
    assert by["b.pt.bin"].status == "failed", by["b.pt.bin"]
    assert "FIFO" in by["b.pt.bin"].detail and "b.pt.bin" in by["b.pt.bin"].detail
    assert not result.ok
    time.sleep(0.5)
    assert stuck_on_fifo(box.identity.user.uid) == []


@pytest.mark.attack("faults", "a checkpoint dir holding a FIFO and a name of 252 "
                    "characters beside ordinary files: `gpuroom pull HOST` "
                    "names each refused file with its cause, pulls the rest and the next job, "
                    "and exits non-zero")
def test_pull_verb_reports_each_file_and_goes_on(box: Any, tmp_path: Path) -> None:
    long_name = "w" * 252
    config = box.fault_config
    first = add_job(config, "--", "sh", "-c",
                    'cd "$GPUROOM_CKPT_DIR" && head -c 5000 /dev/urandom > ok.bin && '
                    f'head -c 5000 /dev/urandom > {long_name} && mkfifo pipe.pt')
    second = add_job(config, "--", "sh", "-c",
                     'head -c 5000 /dev/urandom > "$GPUROOM_CKPT_DIR/model.bin"')
    ids = [first, second]
    wait_for(lambda: all(queue_jobs(config).get(i, {}).get("state") == "succeeded"
                         for i in ids), "both jobs to end")
    out = tmp_path / "p"
    done = gpuroom(config, "pull", "box", "--to", str(out))
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "check free space" not in text, text
    assert f"{first}/{long_name}: verified" in text, text
    assert f"{first}/pipe.pt: refused" in text and "FIFO" in text, text
    assert f"{first}/ok.bin: verified" in text, text
    assert f"{second}/model.bin: verified" in text, text
    [src] = list((box.home / ".gpuroom").rglob(long_name))
    assert (out / "box" / first / long_name).read_bytes() == src.read_bytes()


# ------------------------------------------------------------------------------ 30.3

@pytest.mark.attack("faults", "box names that meet gpuroom's partial-download names: a file "
                    "of 252 characters (NAME.part would pass 255) and a file `w` beside a "
                    "directory `w.part/`: every file comes home, no error says 'free space'")
@pytest.mark.parametrize("method", ["sftp", pytest.param("openssh", marks=needs_ssh)])
async def test_part_names_never_collide_or_overflow(box: Any, tmp_path: Path,
                                                    method: str) -> None:
    src = box_dir(box, "ckpt_names")
    long_name = "x" * 252
    (src / long_name).write_bytes(os.urandom(3000))
    (src / "w").write_bytes(os.urandom(3000))
    (src / "w.part").mkdir()
    (src / "w.part" / "inner.bin").write_bytes(os.urandom(3000))
    own(box, src)
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)
    try:
        result = await asyncio.wait_for(
            transfer.pull(link, str(src), tmp_path / "out", method=method,
                          state_path=tmp_path / "pulls.json"), PULL_BOUND_S)
    finally:
        await link.close()
    assert result.ok, [(f.path, f.status, f.detail) for f in result.files]
    for rel in (long_name, "w", "w.part/inner.bin"):
        assert (tmp_path / "out" / rel).read_bytes() == (src / rel).read_bytes()


# ------------------------------------------------------------------------------ 30.2

@pytest.mark.attack("bad answers", "a running job turns its own log into a FIFO: the host "
                    "stays UP with that job's error naming the FIFO, polls keep answering, "
                    "and no helper stays on the box once the jump side is gone")
async def test_job_log_made_a_fifo_is_the_jobs_error(box: Any, tmp_path: Path) -> None:
    config_path = box.fault_config
    jid = add_job(config_path, "--", "sh", "-c",
                  'log="$HOME/.gpuroom/queues/default/logs/$GPUROOM_JOB_ID.log"; '
                  'echo started; rm -f "$log"; mkfifo "$log"; exec sleep 300')
    log = box.home / ".gpuroom" / "queues" / "default" / "logs" / f"{jid}.log"
    wait_for(log.is_fifo, "the job to make its log a FIFO")
    config = Config(path=tmp_path / "h.toml",
                    settings=Settings(ssh_config=str(box.ssh_config)))
    config.hosts["box"] = HostConfig(name="box", ssh=box.alias)
    fleet = Fleet(config)
    try:
        for _ in range(3):
            state = await asyncio.wait_for(fleet.poll_host("box"), 30)
            assert state.state is LinkState.UP, state.error
        snap = read_snapshot(fleet.state("box").snapshot)
        job = snap.job(jid)
        assert job is not None and job.state == "running"
        assert job.probe_error and "FIFO" in job.probe_error, job
        findings = diagnose(None, snap, LinkState.UP, None, time.time(), host="box")
        assert any(jid in f.title and "FIFO" in f.seen for f in findings), findings
        assert not any(f.id == "GEN8" for f in findings)
    finally:
        await fleet.close()
    # One-shot verbs too: `queue logs` answers with the cause instead of hanging.
    logs = gpuroom(config_path, "queue", "logs", "box", jid)
    assert logs.returncode != 0 and "FIFO" in logs.stdout + logs.stderr
    uid = box.identity.user.uid
    wait_for(lambda: not helpers(uid), "every helper to leave once the jump side is gone",
             timeout_s=20)
    assert stuck_on_fifo(uid) == []


def test_helper_stuck_on_a_fifo_leaves_by_its_own_deadline(tmp_path: Path) -> None:
    """A one-shot helper blocked in the kernel (a FIFO nobody writes) exits on its own."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    code = ("import sys; from gpuroom.remote import selfexit; selfexit.enable(); "
            "selfexit.exit_after(1); "
            f"open({str(fifo)!r}, 'rb')")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30,
                          check=False)
    assert proc.returncode == 124, proc
    assert time.monotonic() - started < 10
    assert b"deadline" in proc.stderr


def test_a_helper_called_in_process_arms_no_deadline() -> None:
    """Only a helper started as a program has a deadline of its own: the local host and the
    tests call its verbs in-process, and an alarm left armed there ended the whole test run
    (exit 124) two minutes after a queue verb was called."""
    code = ("import signal, sys; from gpuroom.remote import cli; "
            "cli.main(['queue', 'ls', '--queue', 'none-such']); "
            "print(signal.alarm(0))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          check=False, env={**os.environ, "HOME": "/nonexistent-gpuroom-test"})
    assert proc.stdout.strip().splitlines()[-1] == b"0", proc


# ------------------------------------------------------------------------------ 30.6

def _alive(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def _daemon_pid(box: Any, name: str) -> int:
    path = box.home / name
    wait_for(lambda: path.exists() and path.read_text().strip(), f"{name} to be written")
    return int(path.read_text())


@pytest.mark.attack("faults", "a job starts a daemon with setsid (out of its process group), "
                    "then is killed with `gpuroom queue kill`: the daemon is killed too")
def test_queue_kill_reaches_a_setsid_daemon(box: Any) -> None:
    config = box.fault_config
    (box.home / "daemon.pid").unlink(missing_ok=True)
    jid = add_job(config, "--", "sh", "-c",
                  'setsid sh -c \'echo $$ > "$HOME/daemon.pid"; exec sleep 600\' '
                  '</dev/null >/dev/null 2>&1 & exec sleep 600')
    daemon = _daemon_pid(box, "daemon.pid")
    assert _alive(daemon)
    killed = gpuroom(config, "queue", "kill", "box", jid)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    wait_for(lambda: not _alive(daemon), "the setsid daemon to be killed", timeout_s=15)


@pytest.mark.attack("faults", "a job that leaves a setsid daemon behind and exits 0: the "
                    "doctor and the teardown gate name the daemon's pid and command")
def test_doctor_and_gate_name_a_surviving_daemon(box: Any, tmp_path: Path) -> None:
    config = box.fault_config
    (box.home / "daemon2.pid").unlink(missing_ok=True)
    jid = add_job(config, "--", "sh", "-c",
                  'setsid sh -c \'echo $$ > "$HOME/daemon2.pid"; exec sleep 601\' '
                  '</dev/null >/dev/null 2>&1 &')
    daemon = _daemon_pid(box, "daemon2.pid")
    wait_for(lambda: queue_jobs(config).get(jid, {}).get("state") == "succeeded",
             "the job to end")
    assert _alive(daemon)
    try:
        doctor = gpuroom(config, "doctor", "box", "--json")
        assert f"pid {daemon} (sleep 601)" in doctor.stdout, doctor.stdout
        gate = gpuroom(config, "gate", "box")
        assert gate.returncode == 5, gate.stdout + gate.stderr
        assert f"[ ] no process of an ended job still running: {jid}: pid {daemon} (sleep 601)" \
            in gate.stdout, gate.stdout
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_gate_item_absent_without_survivors() -> None:
    """No marked survivors: no item claims anything (an old helper reports none)."""
    snap = read_snapshot({"schema": 1, "queue": {"queues": {}}})
    assert not any("ended job" in i.name for i in evaluate("h", snap, [], {}).items)
