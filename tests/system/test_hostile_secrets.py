"""No secret on any command line (issue 18, secrets).

While gpuroom polls, queues, tails and pulls (by each method) against the real sshd, a thread
reads every process's /proc/PID/cmdline on this machine, which is both the jump host and the
box here, as any user of either could with ``ps``. No command line may carry the client's
private key or a token from the jump host's environment, and that token must not reach the
environment of anything gpuroom starts on the box.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import hostile
from harness.hostile import GPUROOM, end_user_processes, hosts_toml

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
MAX_SEEN = 20_000  # distinct command lines kept: the sampler stays bounded


class ProcWatch:
    """Every distinct command line (and, for the box user's processes, environment) seen."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.cmdlines: set[bytes] = set()
        self.environs: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.cmdlines) < MAX_SEEN:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        self.cmdlines.add(f.read())
                    if os.stat(f"/proc/{pid}").st_uid == self.uid:
                        with open(f"/proc/{pid}/environ", "rb") as f:
                            self.environs.add(f.read())
                except OSError:  # the process ended between listing and reading
                    continue
            time.sleep(0.005)


def gpuroom(config: Path, env: dict[str, str], *argv: str) -> str:
    done = hostile.gpuroom(config, *argv, env=env)
    return done.stdout + done.stderr


@pytest.fixture
def box(sshd_box: Any, tmp_path: Path) -> Iterator[Any]:
    sshd_box.secret_config = hosts_toml(tmp_path / "hosts.toml",
                                        {"box": {"ssh": sshd_box.alias}}, sshd_box.ssh_config)
    yield sshd_box
    # The runner may be detached with setsid, out of reach of tmux kill-session.
    end_user_processes(sshd_box.identity.user.uid)


def key_material(path: Path) -> list[bytes]:
    """Pieces of the private key that no command line may hold."""
    lines = [ln for ln in path.read_bytes().splitlines() if ln and not ln.startswith(b"-----")]
    return [b"PRIVATE KEY", *(ln for ln in lines if len(ln) >= 20)]


@pytest.mark.attack("secrets", "/proc/*/cmdline of every process on the jump host and the box "
                    "during status, probe, queue add/ls/logs and pulls by sftp, openssh and "
                    "rsync: no private key, no token from the jump host's environment")
def test_no_secret_on_any_command_line_while_polling_and_pulling(
        box: Any, tmp_path: Path) -> None:
    config = box.secret_config
    token = f"tok-{uuid.uuid4().hex}"
    env = dict(os.environ, WANDB_API_KEY=token, HF_TOKEN=token, XDG_STATE_HOME=str(tmp_path))
    job_cmd = ("mkdir -p \"$GPUROOM_CKPT_DIR\" && "
               "head -c 200000 /dev/urandom > \"$GPUROOM_CKPT_DIR/small.bin\" && "
               "head -c 70000000 /dev/zero > \"$GPUROOM_CKPT_DIR/big.bin\"")
    with ProcWatch(box.identity.user.uid) as watch:
        gpuroom(config, env, "status")
        gpuroom(config, env, "probe", "box")
        added = gpuroom(config, env, "queue", "add", "--json", "box", "--", "sh", "-c", job_cmd)
        job = json.loads(added.strip().splitlines()[-1])["job"]
        deadline = time.monotonic() + WAIT_S
        while '"succeeded"' not in gpuroom(config, env, "queue", "ls", "box", "--json"):
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.5)
        gpuroom(config, env, "queue", "logs", "box", job)
        for method in ("sftp", "openssh", "rsync"):
            said = gpuroom(config, env, "pull", "box", "--method", method,
                           "--to", str(tmp_path / method))
            assert any((tmp_path / method).rglob("big.bin")), (method, said)
    assert len(watch.cmdlines) < MAX_SEEN
    # The watch saw the work it was meant to see.
    assert any(b"sftp" in c for c in watch.cmdlines)
    assert any(b"rsync" in c for c in watch.cmdlines)
    assert any(b".gpuroom/bin/remote-" in c for c in watch.cmdlines)
    for secret in [*key_material(box.client_key), token.encode()]:
        leaked = [c.replace(b"\0", b" ")[:300] for c in watch.cmdlines if secret in c]
        assert not leaked, (secret[:40], leaked)
    # The jump host's environment stays there: nothing on the box runs with the token.
    assert watch.environs, "no process of the box's user was seen"
    assert not [e for e in watch.environs if token.encode() in e]


@pytest.mark.attack("secrets", "queue add --env WANDB_API_KEY=... : the token must not appear "
                    "on the box's command lines (/proc/*/cmdline)")
def test_a_job_environment_token_is_not_on_the_boxs_command_line(
        box: Any, tmp_path: Path) -> None:
    config = box.secret_config
    token = f"tok-{uuid.uuid4().hex}"
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    with ProcWatch(box.identity.user.uid) as watch:
        # A job that stays a moment, as a training run would, so the watch sees its tree.
        gpuroom(config, env, "queue", "add", "box", "--env", f"WANDB_API_KEY={token}", "--",
                "sleep", "1")
        time.sleep(1.5)
    box_side = [c.replace(b"\0", b" ")[:300] for c in watch.cmdlines
                if token.encode() in c and GPUROOM.encode() not in c]  # not the user's own
    assert not box_side, box_side
