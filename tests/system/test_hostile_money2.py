"""Issue 19 items 10 and 6 against the real sshd box: secrets via stdin (U34, T4),
never on a command line, in an event, a snapshot, `queue ls` or a recording."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from harness.clijson import cli_json
from harness.hostile import hosts_toml

from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
SAMPLE_MAX = 20000  # bounded sampling loop


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path) -> Any:
    yield hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                     sshd_box.ssh_config)
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def all_cmdlines() -> list[str]:
    """Every process's command line, as `ps -eo args` shows them to any user."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        out.append(raw.replace(b"\0", b" ").decode("utf-8", "replace"))
    return out


class Sampler:
    """Samples /proc/*/cmdline and `ps` in a thread until stopped (bounded)."""

    def __init__(self, needle: str) -> None:
        self.needle = needle
        self.hits: list[str] = []
        self.seen: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.samples < SAMPLE_MAX:
            lines = all_cmdlines()
            if self.samples % 10 == 0:
                ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                                    check=False).stdout
                lines += ps.splitlines()
            self.samples += 1
            for line in lines:
                if self.needle in line:
                    self.hits.append(line)
                if "secret" in line and "push" in line:
                    self.seen.append(line)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _cli(config: Path, *argv: str) -> list[str]:
    return [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(config), *argv]


@pytest.mark.attack("secrets", "a token pushed to the box is sampled from ps and /proc cmdlines "
                    "on the jump host and the box all through the push")
def test_secret_push_puts_the_value_on_no_command_line(
        box_config: Path, sshd_box: Any) -> None:
    value = "tok-" + os.urandom(12).hex()
    box_side = []
    for _ in range(5):  # until the box's helper was caught in a sample (it lives ~100 ms)
        with Sampler(value) as sampler:
            proc = subprocess.Popen(_cli(box_config, "secret", "push", "box", "WANDB_API_KEY"),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            assert proc.stdin is not None
            proc.stdin.write(value[:8].encode())
            proc.stdin.flush()
            time.sleep(0.3)  # the jump host's CLI is sampled while it holds half the value
            out, err = proc.communicate(value[8:].encode() + b"\n", timeout=WAIT_S)
        assert proc.returncode == 0, err
        assert sampler.hits == [], sampler.hits
        assert value.encode() not in out + err
        # The box's side: the helper run by sshd (python3 HELPER secret push NAME).
        box_side += [s for s in sampler.seen if "gpuroom.tui.cli.main" not in s]
        local = [s for s in sampler.seen if "gpuroom.tui.cli.main" in s]
        assert local, "the sampler never saw the jump host's push"
        if box_side:
            break
    assert box_side, "the sampler never saw the box's helper during a push"
    stored = sshd_box.home / ".gpuroom" / "secrets" / "WANDB_API_KEY"
    assert stored.read_text() == value  # one trailing newline dropped
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700


def test_the_sampler_sees_a_value_that_is_on_a_command_line() -> None:
    # The check above can fail: the same sampler finds a value passed as an argument.
    value = "tok-" + os.urandom(12).hex()
    with Sampler(value) as sampler:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)", value],
                       check=True)
    assert sampler.hits


@pytest.mark.attack("secrets", "queue add --env WANDB_API_KEY=... is read back from queue ls, "
                    "the probe snapshot and a recording")
def test_a_pushed_secret_reaches_the_job_and_no_view(
        box_config: Path, sshd_box: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-" + os.urandom(12).hex()
    plain = "hf-" + os.urandom(12).hex()
    monkeypatch.setenv("MY_TOKEN_SRC", secret)
    rc, doc = cli_json(capsys, "--config", str(box_config), "secret", "push", "box", "WANDB",
                       "--from-env", "MY_TOKEN_SRC", "--json")
    assert rc == 0 and doc["ok"] and doc["bytes"] == len(secret), doc
    rc, doc = cli_json(capsys, "--config", str(box_config), "secret", "ls", "box", "--json")
    assert rc == 0 and [s["name"] for s in doc["secrets"]] == ["WANDB"]
    assert doc["secrets"][0]["mode"] == "0600"
    out = sshd_box.home / "seen.txt"
    script = ("import hashlib,os,sys; open(sys.argv[1],'w').write(hashlib.sha256("
              "os.environ['WANDB_API_KEY'].encode()).hexdigest()+' '+os.environ['HF_TOKEN'])")
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "add", "box", "--json",
                       "--secret", "WANDB=WANDB_API_KEY", "--env", f"HF_TOKEN={plain}",
                       "--env", "OMP_NUM_THREADS=3", "--", "python3", "-c", script, str(out))
    assert rc == 0 and doc["ok"], doc
    deadline = time.monotonic() + WAIT_S
    while True:
        rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "ls", "box", "--json")
        if doc["jobs"] and doc["jobs"][0]["state"] == "succeeded":
            break
        assert time.monotonic() < deadline, doc["jobs"]
        time.sleep(0.5)
    # The job got both values...
    assert out.read_text() == hashlib.sha256(secret.encode()).hexdigest() + " " + plain
    # ...and no view shows either: queue ls, the probe's snapshot, a recording.
    env = doc["jobs"][0]["env"]
    assert env == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "3"}
    ls_text = json.dumps(doc)
    assert main(["--config", str(box_config), "probe", "box", "--compact"]) == 0
    probe_text = capsys.readouterr().out
    assert '"HF_TOKEN"' in probe_text  # the job is in the snapshot, its value is not
    recording = tmp_path / "rec.jsonl"
    assert main(["--config", str(box_config), "record", str(recording), "--polls", "1",
                 "--duration", "30"]) == 0
    rec_text = recording.read_text()
    assert '"HF_TOKEN"' in rec_text
    events = (sshd_box.home / ".gpuroom" / "queues" / "default" / "events.jsonl")
    events_text = events.read_text() if events.exists() else ""
    for text in (ls_text, probe_text, rec_text, events_text):
        assert secret not in text
    for text in (ls_text, probe_text, rec_text):
        assert plain not in text


def test_a_secret_not_pushed_is_refused_at_queue_add(
        box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "add", "box", "--json",
                       "--secret", "NEVER_PUSHED", "--", "true")
    assert rc == 1 and not doc["ok"]
    assert "no secret 'NEVER_PUSHED'" in doc["error"]
    # The fix names the host as the user calls it, ready to paste.
    assert doc["fix"].startswith("gpuroom secret push box NEVER_PUSHED < file"), doc
    assert main(["--config", str(box_config), "queue", "add", "box", "--secret",
                 "NEVER_PUSHED", "--", "true"]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1, said  # one line: the terminal folds it, rich does not
    assert "Fix: gpuroom secret push box NEVER_PUSHED < file" in said
    rc, doc = cli_json(capsys, "--config", str(box_config), "queue", "ls", "box", "--json")
    assert doc["jobs"] == []


def test_an_empty_value_or_bad_name_is_refused(
        box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run(_cli(box_config, "secret", "push", "box", "EMPTY"), input=b"",
                          capture_output=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 2 and b"empty" in proc.stderr, proc.stderr
    proc = subprocess.run(_cli(box_config, "secret", "push", "box", "bad;name"), input=b"x",
                          capture_output=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 2 and b"shell variable name" in proc.stderr, proc.stderr
