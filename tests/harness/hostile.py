"""Shared pieces of the hostile-input and fault suite (tests/system/test_hostile_*.py): the
installed `gpuroom` command run as a user runs it, a private hosts.toml, the box's queue seen
through the verbs, and the characters no text from a box may bring to a terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tomli_w

GPUROOM = str(Path(sys.executable).with_name("gpuroom"))
VERB_TIMEOUT_S = 120.0
WAIT_S = 60.0
FINAL = ("succeeded", "failed", "killed", "removed", "vanished")

# ESC, BEL, NUL, the C1 controls DCS, CSI, ST and OSC, and the bidi override RLO.
TERMINAL_CONTROLS = ("\x1b", "\x07", "\x00", "\x90", "\x9b", "\x9c", "\x9d", "\u202e")


def hosts_toml(path: Path, hosts: Mapping[str, Mapping[str, Any]],
               ssh_config: Path | None = None) -> Path:
    """``path`` written as a hosts.toml of ``hosts``, mode 0600 as gpuroom expects."""
    doc: dict[str, Any] = {"hosts": dict(hosts)}
    if ssh_config is not None:
        doc["settings"] = {"ssh_config": str(ssh_config)}
    path.write_bytes(tomli_w.dumps(doc).encode())
    path.chmod(0o600)
    return path


def gpuroom(config: Path, *argv: str, env: Mapping[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """One verb, run as the installed command; whatever it answers, never a bug report."""
    done = subprocess.run([GPUROOM, "--config", str(config), *argv], capture_output=True,
                          text=True, timeout=VERB_TIMEOUT_S, check=False,
                          env=dict(env) if env is not None else None)
    said = done.stdout + done.stderr
    assert done.returncode != 70 and "Traceback" not in said, (argv, said)
    return done


def gpuroom_json(config: Path, *argv: str) -> Any:
    """The last JSON line a verb that must succeed printed."""
    done = gpuroom(config, *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def queue_jobs(config: Path, host: str = "box") -> dict[str, dict[str, Any]]:
    """The host's jobs by id, from `queue ls --json`."""
    return {j["id"]: j for j in gpuroom_json(config, "queue", "ls", host, "--json")["jobs"]}


def add_job(config: Path, *argv: str, host: str = "box") -> str:
    """`queue add HOST [options] -- CMD`: the new job's id."""
    return str(gpuroom_json(config, "queue", "add", "--json", host, *argv)["job"])


def wait_for(pred: Callable[[], Any], what: str, timeout_s: float = WAIT_S,
             every_s: float = 0.2) -> Any:
    """``pred()``'s first true value, asked every ``every_s`` for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


def end_user_processes(uid: int) -> None:
    """SIGKILL every process of the box's test user: a queue runner detached with setsid, or
    a stand-in helper left waiting, would otherwise act on the next test's fresh ~/.gpuroom."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):  # gone between listing and killing
            continue
