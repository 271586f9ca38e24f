"""Queue control from the jump host over a real sshd (issue 20 item 2, and `queue show`):
every verb is the gpuroom CLI against the test box; the GPU boundary is the nvidia-smi replay."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness.gpubox import gpu_python

from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
FINAL = ("succeeded", "failed", "killed", "removed")
# Two RTX 3090s, as a real box's nvidia-smi printed them.
SMI_CAPTURES = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",)


def write_config(path: Path, sshd_box: Any, python: Path | None = None) -> Path:
    host: dict[str, str] = {"ssh": sshd_box.alias}
    if python is not None:
        host["python"] = str(python)
    path.write_bytes(tomli_w.dumps({"settings": {"ssh_config": str(sshd_box.ssh_config)},
                                    "hosts": {"box": host}}).encode())
    return path


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path) -> Iterator[Path]:
    yield write_config(tmp_path / "hosts.toml", sshd_box)
    # The runner lives in the test user's tmux server, outside sshd's tree: end it here.
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


@pytest.fixture
def gpu_config(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[Path]:
    """hosts.toml whose ``python`` is the box's python3 with the nvidia-smi replay on it."""
    with gpu_python(sshd_box, fixtures, "gpuroom-steer-test", SMI_CAPTURES) as wrapper:
        try:
            yield write_config(tmp_path / "hosts.toml", sshd_box, wrapper)
        finally:
            sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str]:
    rc = main(["--config", str(config), "queue", *argv])
    return rc, capsys.readouterr().out


def cli_json(capsys: pytest.CaptureFixture[str], config: Path, *argv: str
             ) -> tuple[int, dict[str, Any]]:
    rc, out = cli(capsys, config, argv[0], "--json", *argv[1:])
    lines = out.strip().splitlines()
    return rc, json.loads(lines[-1]) if lines else {}


def add(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> str:
    rc, doc = cli_json(capsys, config, "add", "box", *argv)
    assert rc == 0 and doc["ok"], doc
    return str(doc["job"])


def jobs(capsys: pytest.CaptureFixture[str], config: Path) -> dict[str, dict[str, Any]]:
    rc, doc = cli_json(capsys, config, "ls", "box")
    assert rc == 0, doc
    return {j["id"]: j for j in doc["jobs"]}


def until(capsys: pytest.CaptureFixture[str], config: Path, job: str,
          ready: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = jobs(capsys, config)[job]
        if ready(found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.3)


def test_two_slots_run_two_jobs_at_once_on_distinct_gpus(
        gpu_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = cli_json(capsys, gpu_config, "config", "box", "--slots", "2")
    assert rc == 0 and doc["ok"], doc
    work = sshd_box.home / "gpuroom-steer-test"
    # Each job holds until the other has started too (bounded): serial jobs would fail.
    script = ("echo $CUDA_VISIBLE_DEVICES > $GPUROOM_JOB_ID.cuda; i=0; "
              "while [ $(ls *.cuda | wc -l) -lt 2 ] && [ $i -lt 150 ]; do sleep 0.1; "
              "i=$((i+1)); done; [ $(ls *.cuda | wc -l) -ge 2 ]")
    ids = [add(capsys, gpu_config, "--cwd", str(work), "--", "sh", "-c", script)
           for _ in range(2)]
    done = [until(capsys, gpu_config, j, lambda j: j["state"] in ("succeeded", "failed"))
            for j in ids]
    assert [d["state"] for d in done] == ["succeeded", "succeeded"], done
    assert {(work / f"{j}.cuda").read_text().strip() for j in ids} == {"0", "1"}
    assert sorted(d["attempts"][0]["gpus"][0] for d in done) == [0, 1]
    a, b = (d["attempts"][0] for d in done)
    assert a["start"] < b["end"] and b["start"] < a["end"]  # they overlapped


def test_config_sets_slots_idle_exit_and_kill_grace(
        box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = cli(capsys, box_config, "config", "box", "--slots", "3", "--idle-exit", "9",
                  "--kill-grace", "2")
    assert rc == 0 and "configured" in out
    rc, doc = cli_json(capsys, box_config, "ls", "box")
    assert doc["config"]["slots"] == 3 and doc["config"]["idle_exit_s"] == 9.0
    assert doc["config"]["kill_grace_s"] == 2.0


def test_after_holds_a_job_until_its_dependency_succeeds_and_fails_it_when_it_fails(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: one line per row
    gate = sshd_box.home / "steer-gate"
    gate.unlink(missing_ok=True)
    first = add(capsys, box_config, "--", "sh", "-c",
                f"while [ ! -e {gate} ]; do sleep 0.1; done")
    second = add(capsys, box_config, "--after", first, "--", "true")
    bad = add(capsys, box_config, "--", "sh", "-c", "exit 3")
    doomed = add(capsys, box_config, "--after", f"{second},{bad}", "--", "true")
    until(capsys, box_config, first, lambda j: j["state"] == "running")
    waiting = until(capsys, box_config, second, lambda j: j.get("waiting"))
    assert waiting["state"] == "queued"
    assert waiting["waiting"] == f"waiting for {first} (dependency)"
    _, out = cli(capsys, box_config, "ls", "box")
    assert "after" in out and f"waiting for {first}" in out
    sshd_box.run("touch", str(gate))
    assert until(capsys, box_config, second, lambda j: j["state"] in FINAL)["state"] \
        == "succeeded"
    failed = until(capsys, box_config, doomed, lambda j: j["state"] in FINAL)
    assert failed["state"] == "failed" and failed["reason"] == f"dependency {bad} failed"
    assert failed["attempts"] == []


def test_pause_rm_priority_mv_edit_retry_and_show(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = cli(capsys, box_config, "pause", "box")
    assert rc == 0 and "paused" in out
    low = add(capsys, box_config, "--", "true")
    gone = add(capsys, box_config, "--", "touch", str(sshd_box.home / "never"))
    high = add(capsys, box_config, "--priority", "3", "--retries", "1", "--retry-on-exit",
               "--env", "TOKEN=s3cret", "--", "sh", "-c", "exit 2")
    queued = until(capsys, box_config, low, lambda j: j.get("waiting"))
    assert queued["waiting"].startswith("paused")
    rc, out = cli(capsys, box_config, "rm", "box", gone)
    assert rc == 0 and f"{gone} removed" in out
    rc, doc = cli_json(capsys, box_config, "ls", "box")
    assert doc["order"] == [high, low]
    rc, doc = cli_json(capsys, box_config, "mv", "box", low, "--to", "0")
    assert rc == 0 and doc["result"] == "reordered", doc
    rc, doc = cli_json(capsys, box_config, "ls", "box")
    assert doc["order"] == [low, high]
    rc, out = cli(capsys, box_config, "resume", "box")
    assert rc == 0 and "resumed" in out
    done = until(capsys, box_config, high, lambda j: j["state"] in ("succeeded", "failed"))
    # --retry-on-exit: the exit 2 ran again once.
    assert done["state"] == "failed" and len(done["attempts"]) == 2
    assert [a["exit_code"] for a in done["attempts"]] == [2, 2]
    assert until(capsys, box_config, low, lambda j: j["state"] in FINAL)["state"] \
        == "succeeded"
    assert jobs(capsys, box_config)[gone]["state"] == "removed"
    assert not (sshd_box.home / "never").exists()

    rc, doc = cli_json(capsys, box_config, "edit", "box", high, "--env", "MORE=1", "--",
                       "sh", "-c", "exit 0")
    assert rc == 0 and doc["ok"] and doc["edited_from"] == high, doc
    copy = until(capsys, box_config, doc["job"], lambda j: j["state"] == "succeeded")
    assert copy["edited_from"] == high and copy["priority"] == 3
    assert jobs(capsys, box_config)[high]["state"] == "failed"  # the old one is kept

    rc, out = cli(capsys, box_config, "show", "box", high)
    assert rc == 0
    assert "TOKEN" in out and "s3cret" not in out and "exit 2" in out
    assert "attempt 2:" in out and "log: " in out and "priority: 3" in out
    rc, doc = cli_json(capsys, box_config, "show", "box", high)
    assert doc["jobs"][0]["env"] == {"TOKEN": "<redacted>"} and "s3cret" not in json.dumps(doc)
    rc, out = cli(capsys, box_config, "show", "box", "j999")
    assert rc == 1


def test_rm_of_a_running_job_is_refused_in_words(
        box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = add(capsys, box_config, "--", "sleep", "60")
    until(capsys, box_config, job, lambda j: j["state"] == "running")
    rc = main(["--config", str(box_config), "queue", "rm", "box", job])
    err = capsys.readouterr().err
    assert rc == 1 and f"{job} not removed" in err and "kill it first" in err
    rc, _ = cli_json(capsys, box_config, "kill", "box", job)
    assert rc == 0


def test_host_any_picks_the_host_with_the_asked_gpus_free_and_says_why(
        sshd_box: Any, fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two hosts.toml entries on the test box, told apart by their nvidia-smi replay: on
    # "busy" a compute process holds each card (an 8xH100 table's processes), "free" is idle.
    held = (*SMI_CAPTURES, "nvsmi_table/driver535-8xH100-with-processes.txt")
    with gpu_python(sshd_box, fixtures, "steer-busy", held) as busy, \
            gpu_python(sshd_box, fixtures, "steer-free", SMI_CAPTURES) as free:
        config = tmp_path / "hosts.toml"
        config.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config)},
            "hosts": {"busy": {"ssh": sshd_box.alias, "python": str(busy)},
                      "free": {"ssh": sshd_box.alias, "python": str(free)}}}).encode())
        try:
            rc = main(["--config", str(config), "queue", "add", "any", "--gpus", "2", "--",
                       "true"])
            captured = capsys.readouterr()
            assert rc == 0, captured
            assert "picked free for 2 GPU(s): free: 2 of 2 GPU(s) free" in captured.out
            assert "added j" in captured.out and "busy: 0 of 2 GPU(s) free" in captured.err
            # A list, and VRAM no card of either host has free: refused, with the reason.
            rc = main(["--config", str(config), "queue", "add", "busy,free", "--gpus", "1",
                       "--vram-mib", "30000", "--", "true"])
            err = capsys.readouterr().err
            assert rc == 1 and "Fix:" in err
            assert "no host has 1 GPU(s) with 30000 MiB each free right now" in err
        finally:
            sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
