"""The local link: the same helper and the same poll path as a box, without SSH."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from gpuroom.tui.config import Config, HostConfig
from gpuroom.tui.fleet.live import Fleet, backoff_delay
from gpuroom.tui.model import LinkState
from gpuroom.tui.transport.helper_build import build_bytes, helper_archive
from gpuroom.tui.transport.link import HostLink, LinkError, cut_to, reader_env


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_archive_is_deterministic_and_named_by_hash() -> None:
    a = helper_archive()
    entries = [("b.py", b"x"), ("a.py", b"y")]
    assert build_bytes(entries) == build_bytes(entries)
    assert a.filename == f"remote-{a.sha256[:12]}.pyz"
    with zipfile.ZipFile(__import__("io").BytesIO(a.data)) as zf:
        names = zf.namelist()
        assert names == sorted(names)
        assert {"__main__.py", "gpuroom/remote/probe.py", "pynvml.py"} <= set(names)
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())


@pytest.mark.parametrize("mode", ["serve", "exec"])
async def test_local_poll_matches_this_machine(home: Path, mode: str) -> None:
    link = HostLink(HostConfig(name="local", local=True), mode=mode)
    try:
        snap = await link.poll({"mounts": [str(home)]})
        again = await link.poll({})
    finally:
        await link.close()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert snap["host"]["boot_id"] == boot_id
    assert snap["host"]["hostname"] == os.uname().nodename
    assert snap["helper"]["sha256"] == link.archive.sha256
    st = os.statvfs(home)
    [disk] = [d for d in snap["disks"] if d["path"] == str(home)]
    assert disk["total_inodes"] == st.f_files
    assert again["schema"] == snap["schema"]
    assert link.uploads == 1
    deployed = home / link.archive.remote_path
    assert deployed.read_bytes() == link.archive.data


async def test_second_link_reuses_deployed_helper(home: Path) -> None:
    first = HostLink(HostConfig(name="local", local=True))
    await first.poll({})
    await first.close()
    target = home / first.archive.remote_path
    before = target.stat().st_ino
    second = HostLink(HostConfig(name="local", local=True))
    await second.poll({})
    await second.close()
    assert second.uploads == 0
    assert target.stat().st_ino == before  # not rewritten


@pytest.mark.attack(
    "bad answers",
    "a tampered helper file on the box: its hash does not match and it is replaced")
async def test_corrupt_helper_is_replaced(home: Path) -> None:
    link = HostLink(HostConfig(name="local", local=True))
    target = home / link.archive.remote_path
    target.parent.mkdir(parents=True)
    target.write_bytes(b"truncated")
    await link.poll({})
    await link.close()
    assert link.uploads == 1 and target.read_bytes() == link.archive.data


@pytest.mark.attack("bad answers", "an oversized answer from the local helper: a link error")
async def test_oversized_answer_is_a_link_error(home: Path) -> None:
    link = HostLink(HostConfig(name="local", local=True), output_cap=200)
    with pytest.raises(LinkError, match="exceeded 200 bytes"):
        await link.poll({})
    assert not link.connected  # dropped, the next poll starts clean
    await link.close()


@pytest.mark.attack(
    "bad configuration",
    "a host with a configuration error is DOWN while the others are UP")
async def test_host_with_config_error_is_down_others_up(home: Path) -> None:
    config = Config(path=home / "hosts.toml")
    config.hosts["local"] = HostConfig(name="local", local=True)
    config.hosts["broken"] = HostConfig(name="broken", error="hosts.toml: [hosts.broken]: no ssh")
    fleet = Fleet(config)
    try:
        states = {s.name: s for s in await fleet.poll_all()}
    finally:
        await fleet.close()
    assert states["local"].state is LinkState.UP
    assert states["broken"].state is LinkState.DOWN
    assert "no ssh" in (states["broken"].error or "")


def test_backoff_is_capped_and_jittered() -> None:
    import random

    rng = random.Random(1)
    delays = [backoff_delay(n, 5.0, 60.0, rng) for n in range(1, 12)]
    assert all(d <= 60.0 for d in delays)
    assert delays[0] <= 5.0 and max(delays) > 20.0
    assert len({round(d, 6) for d in delays}) == len(delays)


def test_probe_cli_on_local(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuroom.tui.cli.main import main

    empty = home / "empty.toml"  # no hosts: the local machine (a missing --config is an error)
    empty.write_text("")
    empty.chmod(0o600)
    assert main(["--config", str(empty), "probe", "local", "--compact"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 1 and doc["errors"] == []


async def test_log_cursor_follows_a_running_job(home: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """The fleet sends each job's next_offset back, so log bytes arrive once, in order."""
    import asyncio
    import base64
    import subprocess
    import sys

    monkeypatch.setenv("GPUROOM_HOME", str(home / "gh"))
    socket_name = f"gpuroom-test-{os.getpid()}"
    monkeypatch.setenv("GPUROOM_TMUX_SOCKET", socket_name)
    script = "import time\nfor i in range(40):\n print('line', i, flush=True); time.sleep(0.05)"
    add = subprocess.run([sys.executable, "-m", "gpuroom.remote", "queue", "add",
                          "--idle-exit", "2", "--", sys.executable, "-c", script],
                         capture_output=True, text=True, check=True)
    job = json.loads(add.stdout)["job"]
    config = Config(path=home / "hosts.toml")
    fleet = Fleet(config)
    received = b""
    try:
        for _ in range(100):  # bounded: 40 lines at 50 ms is ~2 s
            state = await fleet.poll_host("local")
            assert state.state is LinkState.UP, state.error
            assert state.view is not None
            jobs = dict(state.view.iter_jobs())
            chunk = jobs[f"default/{job}"].log_chunk
            if chunk:
                assert not chunk.reset or received == b""
                received += base64.b64decode(chunk.data_b64 or "")
            if jobs[f"default/{job}"].state == "succeeded" and (
                    not chunk or (chunk.next_offset or 0) >= (chunk.size or 0)):
                break
            await asyncio.sleep(0.1)
    finally:
        await fleet.close()
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True,
                       check=False)
    lines = received.decode().splitlines()
    assert [f"line {i}" for i in range(40)] == [ln for ln in lines if ln.startswith("line")]


def test_cut_to_cuts_a_longer_file_and_leaves_one_of_that_length_alone(tmp_path: Path) -> None:
    # A truncate, even to the same size, is what makes ext4 flush the whole .part at close
    # (auto_da_alloc); the mtime shows whether one happened.
    part = tmp_path / "x.part"
    part.write_bytes(b"0123456789")
    os.utime(part, (1_000_000, 1_000_000))
    with open(part, "ab") as f:
        cut_to(f, 10)
    assert part.stat().st_mtime == 1_000_000
    with open(part, "ab") as f:
        cut_to(f, 4)
        f.write(b"xy")
    assert part.read_bytes() == b"0123xy"
    empty = tmp_path / "fresh.part"
    with open(empty, "ab") as f:
        cut_to(f, 0)
    os.utime(empty, (1_000_000, 1_000_000))
    with open(empty, "ab") as f:
        cut_to(f, 0)
    assert empty.stat().st_mtime == 1_000_000 and empty.stat().st_size == 0


async def test_queue_add_from_the_room_carries_the_working_directory(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The add form's working directory reaches the helper (issue 17 item 12)."""
    import asyncio
    import subprocess

    monkeypatch.setenv("GPUROOM_HOME", str(home / "gh"))
    socket_name = f"gpuroom-test-cwd-{os.getpid()}"
    monkeypatch.setenv("GPUROOM_TMUX_SOCKET", socket_name)
    (home / "proj").mkdir()
    fleet = Fleet(Config(path=home / "hosts.toml"))
    try:
        job = await fleet.queue_add("local", ["pwd"], name="where", cwd=str(home / "proj"))
        for _ in range(100):  # bounded: a pwd finishes at once
            state = await fleet.poll_host("local")
            assert state.view is not None, state.error
            jobs = dict(state.view.iter_jobs())
            if jobs[f"default/{job}"].state == "succeeded":
                break
            await asyncio.sleep(0.1)
        assert jobs[f"default/{job}"].cwd == str(home / "proj")
    finally:
        await fleet.close()
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True,
                       check=False)


SHADOW_ARGPARSE = """import os, sys, sysconfig
with open(os.environ["GPUROOM_TEST_STARTUP_MARK"] + "/pythonpath-ran", "a") as _f:
    _f.write(" ".join(sys.argv) + "\\n")
_real = os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py")
with open(_real) as _f:
    exec(compile(_f.read(), _real, "exec"))
"""
SITECUSTOMIZE = """import os, sys
with open(os.environ["GPUROOM_TEST_STARTUP_MARK"] + "/sitecustomize-ran", "a") as _f:
    _f.write(" ".join(sys.argv) + "\\n")
"""


@pytest.mark.attack("trust", "the local host's helper started with a PYTHONPATH holding a "
                    "sitecustomize.py and an argparse.py shadowing the standard library's: "
                    "neither runs in it through a poll (serve and exec), the hash check or a "
                    "queue verb")
@pytest.mark.parametrize("mode", ["serve", "exec"])
async def test_the_local_helper_runs_isolated(home: Path, monkeypatch: pytest.MonkeyPatch,
                                              mode: str) -> None:
    planted, marks = home / "planted", home / "marks"
    planted.mkdir()
    marks.mkdir()
    (planted / "argparse.py").write_text(SHADOW_ARGPARSE)
    (planted / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("GPUROOM_TEST_STARTUP_MARK", str(marks))
    link = HostLink(HostConfig(name="local", local=True), mode=mode)
    try:
        snap = await link.poll({})
        listed = await link.helper("queue", "ls")
    finally:
        await link.close()
    assert snap["helper"]["sha256"] == link.archive.sha256
    assert listed.rc == 0, listed.stderr
    assert sorted(p.name for p in marks.iterdir()) == []


def test_reader_verbs_get_only_what_a_reader_needs() -> None:
    env = {"PATH": "/usr/bin", "HOME": "/h", "LC_ALL": "C", "GPUROOM_HOME": "/g",
           "AWS_SECRET_ACCESS_KEY": "s3cr3t", "PYTHONPATH": "/evil", "LD_PRELOAD": "/evil.so"}
    probe = reader_env(["python3", "-I", "remote.pyz", "probe", "--request", "{}"], env)
    check = reader_env(["python3", "-I", "-c", "print(1)", "remote.pyz"], env)
    assert probe == check == {"PATH": "/usr/bin", "HOME": "/h", "LC_ALL": "C",
                              "GPUROOM_HOME": "/g"}
    # A queue verb may start the runner, which hands its environment to the user's jobs.
    assert reader_env(["python3", "-I", "remote.pyz", "queue", "add"], env) is None
    assert reader_env(["python3", "-I", "remote.pyz", "secret", "push"], env) is None
