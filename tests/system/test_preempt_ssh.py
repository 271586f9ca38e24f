"""Issue 19 item 6 against the real sshd box: a spot queue's runner asks a real HTTP server on
127.0.0.1 that answers like AWS IMDSv2 (404, then a spot/instance-action notice); on the
notice every running job gets SIGUSR1, `queue ls` carries the notice and the doctor says it
critical with the seconds left."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import clijson
from harness.hostile import hosts_toml
from harness.metadata import metadata_server

from gpuroom.tui.cli.main import main
from gpuroom.tui.snapshot import Snapshot, keys_seen, schema_keys

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
# A job that, like the Checkpointer, turns SIGUSR1 into a save (here: a file) and an exit.
JOB = ("import signal, sys, time\n"
       "def save(*_):\n"
       "    open(sys.argv[1], 'w').write('saved on SIGUSR1')\n"
       "    sys.exit(0)\n"
       "signal.signal(signal.SIGUSR1, save)\n"
       "open(sys.argv[1] + '.up', 'w').write('up')\n"
       "for _ in range(1200):\n"
       "    time.sleep(0.1)\n")


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path) -> Iterator[Path]:
    yield hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                     sshd_box.ssh_config)
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def cli_json(capsys: pytest.CaptureFixture[str], config: Path, *argv: str
             ) -> tuple[int, dict[str, Any]]:
    return clijson.cli_json(capsys, "--config", str(config), *argv)


def spot_job(capsys: pytest.CaptureFixture[str], config: Path, meta: Any, saved: str) -> str:
    """The box's queue made an AWS spot queue asking ``meta``, and JOB added: its id."""
    rc, doc = cli_json(capsys, config, "queue", "config", "box", "--json",
                       "--spot", "aws", "--metadata-url", meta.url)
    assert rc == 0 and doc["ok"], doc
    rc, doc = cli_json(capsys, config, "queue", "add", "box", "--json", "--gpus", "0",
                       "--", "python3", "-c", JOB, saved)
    assert rc == 0 and doc["ok"], doc
    job: str = doc["job"]
    return job


def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.attack("faults", "an AWS spot notice arrives while a job runs: the job is told "
                    "(SIGUSR1) before the box is taken")
def test_a_spot_notice_sends_sigusr1_and_is_a_critical_finding(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    saved = sshd_box.home / "preempt-saved.txt"
    up = Path(str(saved) + ".up")
    for p in (saved, up):
        sshd_box.run("rm", "-f", str(p))
    with metadata_server("aws") as meta:
        spot_job(capsys, box_config, meta, str(saved))
        wait_for("the job to start", up.exists)
        # No notice yet (404): the runner asks, the job keeps running, no finding.
        wait_for("the runner to ask the endpoint",
                 lambda: any("instance-action" in a for a in meta.asked))
        assert any(a == "PUT /latest/api/token" for a in meta.asked)  # IMDSv2, token first
        assert not saved.exists()
        rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
        assert rc == 0, ls
        assert ls["preempt"] is None and ls["jobs"][0]["state"] == "running"
        # The notice: two minutes from now, as AWS gives.
        meta.aws_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        meta.notice = True
        wait_for("the job's save on SIGUSR1", saved.exists)
    assert saved.read_text() == "saved on SIGUSR1"
    rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
    assert rc == 0, ls
    assert ls["preempt"]["cloud"] == "aws" and ls["preempt"]["action"] == "terminate"
    assert ls["preempt"]["signalled"] == 1
    main(["--config", str(box_config), "doctor", "--json"])
    doctor = json.loads(capsys.readouterr().out)
    found = [f for f in doctor["findings"] if f["id"] == "U45"]
    assert len(found) == 1, found
    assert any("preemption notice" in line for line in doctor["banner"]), doctor["banner"]
    assert found[0]["severity"] == "critical"
    assert "aws preemption notice: the box goes in" in found[0]["title"]
    left = float(found[0]["title"].rsplit(" in ", 1)[1].split()[0])
    assert 0 < left <= 120
    assert "SIGUSR1 sent to 1 running job(s)" in found[0]["seen"]
    # The poll carries every key tui/snapshot.py reads of a notice (the schema check).
    assert main(["--config", str(box_config), "probe", "box", "--compact"]) == 0
    snap = json.loads(capsys.readouterr().out)
    wanted = {p for p, k in schema_keys(Snapshot) if k.origin == "preempt"}
    assert wanted and wanted <= keys_seen(Snapshot, [snap]), wanted - keys_seen(Snapshot, [snap])


def test_hosts_toml_spot_configures_the_queue_at_add_and_a_plain_host_does_not(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = hosts_toml(tmp_path / "hosts.toml",
                        {"spot": {"ssh": sshd_box.alias, "spot": "gcp"},
                         "plain": {"ssh": sshd_box.alias}}, sshd_box.ssh_config)
    try:
        for host in ("plain", "spot"):  # one box, one queue: the plain host asks first
            rc, doc = cli_json(capsys, config, "queue", "add", host, "--json", "--gpus", "0",
                               "--", "true")
            assert rc == 0 and doc["ok"], doc
            rc, ls = cli_json(capsys, config, "queue", "ls", host, "--json")
            want = "gcp" if host == "spot" else None
            assert ls["config"]["spot_cloud"] == want, (host, ls["config"])
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


@pytest.mark.attack("faults", "a job is added to a spot box after its preemption notice: "
                    "it is held, not started on a box that goes in two minutes")
def test_a_job_added_after_a_notice_is_held_and_the_idle_runner_still_asks(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    up = sshd_box.home / "preempt-late.txt.up"
    sshd_box.run("rm", "-f", str(up))
    with metadata_server("aws") as meta:
        meta.aws_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        meta.notice = True  # the notice stands before any job runs
        job = spot_job(capsys, box_config, meta, str(up)[:-len(".up")])

        def held() -> bool:
            _rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
            (j,) = [j for j in ls["jobs"] if j["id"] == job]
            return ls["preempt"] is not None and j.get("waiting") is not None

        # Nothing runs, yet the runner asks the cloud: a queued job is at stake.
        wait_for("the runner to record the notice and hold the job", held)
        assert any("instance-action" in a for a in meta.asked)
    rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
    assert rc == 0, ls
    (j,) = [j for j in ls["jobs"] if j["id"] == job]
    assert j["state"] == "queued" and not j.get("attempts")
    assert j["waiting"] == "preemption notice: not starting"
    assert ls["preempt"]["signalled"] == 0
    assert not up.exists()
    main(["--config", str(box_config), "doctor", "--json"])
    (found,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "U45"]
    assert found["severity"] == "critical" and "SIGUSR1 sent to 0 running job(s)" in found["seen"]


def test_a_spot_box_with_no_notice_starts_a_queued_job(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    up = sshd_box.home / "preempt-none.txt.up"
    sshd_box.run("rm", "-f", str(up))
    with metadata_server("aws") as meta:  # 404: no notice
        spot_job(capsys, box_config, meta, str(up)[:-len(".up")])
        wait_for("the job to start", up.exists)
        assert any("instance-action" in a for a in meta.asked)
    rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
    assert rc == 0, ls
    assert ls["preempt"] is None and ls["jobs"][-1]["state"] == "running"


def test_a_notice_long_past_its_time_holds_nothing(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # The box is still up 20 min after the time AWS gave (a hibernated spot box resumed, a
    # notice withdrawn): the notice is over, a queued job starts and the doctor is quiet.
    up = sshd_box.home / "preempt-past.txt.up"
    sshd_box.run("rm", "-f", str(up))
    with metadata_server("aws") as meta:
        meta.aws_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1200))
        meta.notice = True
        spot_job(capsys, box_config, meta, str(up)[:-len(".up")])
        wait_for("the job to start", up.exists)
    rc, ls = cli_json(capsys, box_config, "queue", "ls", "box", "--json")
    assert rc == 0 and ls["preempt"] is not None, ls  # seen and recorded, yet over
    main(["--config", str(box_config), "doctor", "--json"])
    assert [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "U45"] == []
