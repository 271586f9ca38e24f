"""The queue driven from the jump host over a real sshd: the box finishes on its own (U18)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
FINAL = ("succeeded", "failed", "killed", "removed")


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path) -> Any:
    p = tmp_path / "hosts.toml"
    p.write_bytes(tomli_w.dumps({"settings": {"ssh_config": str(sshd_box.ssh_config)},
                                 "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
    yield p
    # The runner lives in the test user's tmux server, outside sshd's tree: end it here.
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    rc = main(list(argv))
    out = capsys.readouterr().out.strip().splitlines()
    return rc, json.loads(out[-1]) if out else {}


def wait_all_done(capsys: pytest.CaptureFixture[str], config: Path, n: int) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        rc, doc = cli_json(capsys, "--config", str(config), "queue", "ls", "box", "--json")
        assert rc == 0
        jobs = doc["jobs"]
        if len(jobs) == n and all(j["state"] in FINAL for j in jobs):
            return doc
        assert time.monotonic() < deadline, f"queue did not finish: {jobs}"
        time.sleep(0.5)


@pytest.mark.attack("faults", "three jobs finish after the jump host leaves")
def test_three_jobs_finish_after_the_jump_host_leaves(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [["sh", "-c", "echo one; sleep 1"], ["sh", "-c", "echo two >&2; exit 3"],
            ["sh", "-c", "echo three"]]
    ids = []
    for argv in jobs:
        # Each CLI call opens and closes its own connection: nothing stays attached.
        rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "add", "--json",
                           "box", "--", *argv)
        assert rc == 0 and doc["ok"], doc
        ids.append(doc["job"])
    # Drop every sshd session too, like a jump host that lost its link.
    sshd_box.kill_all()
    sshd_box.start()
    doc = wait_all_done(capsys, box_config, 3)
    by_id = {j["id"]: j for j in doc["jobs"]}
    assert [by_id[i]["state"] for i in ids] == ["succeeded", "failed", "succeeded"]
    codes = [by_id[i]["attempts"][-1]["exit_code"] for i in ids]
    assert codes == [0, 3, 0]
    assert all(len(by_id[i]["attempts"]) == 1 for i in ids)
    assert by_id[ids[0]]["attempts"][0]["duration"] >= 1.0
    # Serial: each job started after the previous one ended.
    starts = [by_id[i]["attempts"][0]["start"] for i in ids]
    ends = [by_id[i]["attempts"][0]["end"] for i in ids]
    assert starts[1] >= ends[0] and starts[2] >= ends[1]
    rc = main(["--config", str(box_config), "queue", "logs", "box", ids[1]])
    assert rc == 0 and "two" in capsys.readouterr().out


@pytest.mark.attack("injection", "argv arrives byte identical over ssh")
def test_argv_arrives_byte_identical_over_ssh(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = sshd_box.home / "argv.json"
    nasty = ["it's", '"double"', "$HOME", "`id`", "a; rm -rf ~", "line1\nline2", "héllo ✓",
             "*", "", "-n", "back\\slash"]
    script = "import json,sys; open(sys.argv[1],'w').write(json.dumps(sys.argv[2:]))"
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "add", "--json", "box",
                       "--", "python3", "-c", script, str(out), *nasty)
    assert rc == 0, doc
    wait_all_done(capsys, box_config, 1)
    assert json.loads(out.read_text()) == nasty


def test_kill_and_relaunch_from_jump_host(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    marker = sshd_box.home / "runs.txt"
    marker.unlink(missing_ok=True)  # the box's home outlives a run of this test
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "add", "--json", "box",
                       "--", "sh", "-c", f"echo run >> {marker}; sleep 60")
    job = doc["job"]
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "kill", "box", job, "--json")
    assert rc == 0 and doc["result"] == "killed", doc
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "relaunch", "box", job,
                       "--json")
    assert rc == 0, doc
    deadline = time.monotonic() + WAIT_S
    while marker.read_text().count("run") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "kill", "box", job, "--json")
    assert rc == 0
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "ls", "box", "--json")
    [j] = doc["jobs"]
    assert j["state"] == "killed"
    assert [a["attempt"] for a in j["attempts"]] == [1, 2], j
    assert all(a["end_reason"] == "killed" for a in j["attempts"]), j["attempts"]


@pytest.mark.attack("hostile text", "box stderr reaches the cli inert")
def test_box_stderr_reaches_the_cli_inert(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A box whose queue helper fails, writing escape sequences and markup to stderr: the
    # error the CLI prints quotes it, and must not pass the sequences to the user's terminal.
    fake = sshd_box.home / "python-whose-queue-fails"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *queue*)\n"
                    "  printf 'boom \\033]52;c;ZXZpbA==\\007\\033[2J[/]\\n' >&2; exit 1;;\n"
                    "esac\nexec python3 \"$@\"\n")
    fake.chmod(0o755)
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config)},
        "hosts": {"box": {"ssh": sshd_box.alias, "python": str(fake)}}}).encode())
    for argv in (["logs", "box", "j1"], ["kill", "box", "j1"], ["ls", "box"]):
        rc = main(["--config", str(config), "queue", *argv])
        captured = capsys.readouterr()
        assert rc != 0, argv
        assert "box" in captured.err and "boom" in captured.err, (argv, captured)
        for stream in (captured.out, captured.err):
            assert "\x1b" not in stream and "\x07" not in stream, (argv, repr(stream))


def test_add_kill_and_relaunch_answer_in_words_json_on_request(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 17 item 16: they printed the box's raw JSON; ids jumped j1 -> j5 -> j9.
    def say(*argv: str) -> tuple[int, str]:
        rc = main(["--config", str(box_config), "queue", *argv])
        out = capsys.readouterr()
        assert "Traceback" not in out.err
        # A failed action is one line on stderr (after any warning of the config's mode).
        text = out.out if rc == 0 or "--json" in argv else out.err
        return rc, text.strip().splitlines()[-1]

    assert say("add", "box", "--", "true") == (0, "box: added j1 to queue default")
    wait_all_done(capsys, box_config, 1)
    rc, out = say("add", "box", "--name", "sleeper", "--", "sleep", "60")
    assert (rc, out) == (0, "box: added j2 to queue default")
    rc, out = say("kill", "box", "j2")
    # Killed while it ran, or before the runner started it (then it was 'queued').
    assert rc == 0 and out in ("box: j2 killed (SIGTERM)", "box: j2 killed (queued)"), out
    rc, out = say("relaunch", "box", "j2")
    assert (rc, out) == (0, "box: j2 requeued: the same command runs as a new attempt")
    rc, out = say("kill", "box", "j2", "--json")
    assert rc == 0 and json.loads(out)["result"] == "killed"
    rc, out = say("kill", "box", "j1")
    assert (rc, out) == (1, "box: j1 not killed: job is succeeded")
    rc, out = say("add", "box", "--json", "--", "true")
    assert rc == 0 and json.loads(out)["job"] == "j3"


def test_logs_n_prints_the_last_n_lines_of_a_job_still_writing(
        box_config: Path, sshd_box: Any, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """`queue logs -n 3` on a job that writes a line every 10 ms: three lines, the last three
    at the time of asking; what arrives while the answer travels is not added to them."""
    argv = ["--config", str(box_config), "queue"]
    assert main([*argv, "add", "--json", "box", "--", "sh", "-c",
                 "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.01; done"]) == 0
    job = json.loads(capfdbinary.readouterr().out.decode().strip().splitlines()[-1])["job"]
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            started = main([*argv, "logs", "box", job]) == 0  # no log before the job starts
            if started and capfdbinary.readouterr().out.count(b"\n") >= 20:
                break
            assert time.monotonic() < deadline, "the job wrote nothing"
            time.sleep(0.2)
        for _ in range(3):
            assert main([*argv, "logs", "box", job, "-n", "3"]) == 0
            lines = capfdbinary.readouterr().out.decode().splitlines()
            assert len(lines) == 3, lines
            numbers = [int(line.removeprefix("line-")) for line in lines]
            assert numbers == list(range(numbers[0], numbers[0] + 3)), lines
    finally:
        main([*argv, "kill", "box", job])


def test_queue_start_starts_a_dead_runner_that_a_fix_names(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The doctor's GEN6 fix says `gpuroom queue start HOST`: it exists and starts the
    runner a killed tmux took away, and the waiting job runs."""
    argv = ["--config", str(box_config), "queue"]
    rc, doc = cli_json(capsys, *argv, "config", "box", "--json")  # the queue, no runner yet
    assert rc == 0, doc
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
    rc, doc = cli_json(capsys, *argv, "ls", "box", "--json")
    assert rc == 0 and doc["runner"]["alive"] is False, doc
    assert main([*argv, "start", "box"]) == 0
    assert "runner running" in capsys.readouterr().out
    rc, doc = cli_json(capsys, *argv, "ls", "box", "--json")
    assert rc == 0 and doc["runner"]["alive"] is True, doc
    assert main([*argv, "start", "box"]) == 0  # a second start is a no-op, not an error
    assert "runner running" in capsys.readouterr().out
