"""Issue 20 item 3 over the test sshd: a poll of the box with the nvidia-smi replay lists the
GPU processes, and the real helper's user and process group let the jump host mark a real
gpuroom job's process (a child of the job's shell, in the attempt's process group) as the job
and pid 1 as a foreign process; ``gpuroom probe --human`` prints them so.

The replay prints the real GTX 1080 capture with its two process rows' PIDs rewritten to
processes that exist on this box (nvidia-smi's PIDs are the box's own): no other field changes.
"""

from __future__ import annotations

import asyncio
import pwd
import re
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness import gpubox

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.present.gpus import gpu_processes

TABLE = "nvsmi_table/driver460-gtx1080-with-processes.txt"
CAPTURES = ("query_gpu/2x-rtx3090-driver515-csv-header.txt", TABLE)
WAIT_S = 60.0


@pytest.mark.sshd
async def test_a_jobs_process_is_marked_the_job_and_pid_1_foreign(
        sshd_box: Any, fixtures: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with gpubox.gpu_python(sshd_box, fixtures, "gpuroom-procs-test", CAPTURES) as python:
        root = python.parent
        path = tmp_path / "hosts.toml"
        path.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5},
            "hosts": {"box": {"ssh": sshd_box.alias, "python": str(python)}}}).encode())
        path.chmod(0o600)
        fleet = Fleet(cfg.load(path))
        child_file = root / "child.pid"
        try:
            # The job's shell starts a child and waits: the child's pid is not the attempt's,
            # its process group is (the runner starts each attempt in its own session).
            job = await fleet.queue_add(
                "box", ["sh", "-c", f"sleep 60 & echo $! > {child_file}; wait"],
                cwd=str(root))
            deadline = time.monotonic() + WAIT_S
            while not child_file.exists() or not child_file.read_text().strip():
                assert time.monotonic() < deadline, "the job never started its child"
                await asyncio.sleep(0.2)
            child = int(child_file.read_text())
            capture = root / "fixtures" / TABLE
            text = capture.read_text(encoding="utf-8")
            assert "  1335      G" in text and "  1476      G" in text
            capture.write_text(text.replace("  1335      G", f"  {child}      C")
                               .replace("  1476      G", "  1      C"), encoding="utf-8")
            state = await fleet.poll_host("box")
            rows = {r.pid: r for r in gpu_processes(state.view)}
            assert rows[str(child)].mark == "job" and rows[str(child)].job == job
            assert rows[str(child)].user == sshd_box.user
            assert rows["1"].mark == "foreign"
            assert rows["1"].user == pwd.getpwuid(0).pw_name
            # The same through the CLI's human form.
            capsys.readouterr()
            assert await asyncio.to_thread(
                main, ["--config", str(path), "probe", "box", "--human"]) == 0
            out = capsys.readouterr().out
            lines = {line.split("│")[2].strip(): line for line in out.splitlines()
                     if line.count("│") >= 7}
            assert f"job {job}" in lines[str(child)] and sshd_box.user in lines[str(child)]
            assert "foreign" in lines["1"]
            # Item 4: two polls a second apart give the cgroup's CPU use as a number.
            assert re.search(r"^box: cpu \d+\.\d/\d+(\.\d+)? vCPU  mem ", out, re.M), out
            await fleet.queue_kill("box", job)
        finally:
            await fleet.close()
            sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
