"""A queue reset under the same alias (a new rental, a wiped ~/.gpuroom) starts again at j1:
over the test sshd, its j1 is another job than the old queue's j1 for the mirror and for
`queue move`, because each queue has an identity of its own (remote/queue_events.py).

Real queue, real mirror pulls, real move (push with sha256 check) between two box roots.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_move_ssh import cli, save_ckpt, start_job, two_hosts, wait_job

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import MirrorOutcome

pytestmark = pytest.mark.sshd
__all__ = ["two_hosts"]  # the fixture, shared with test_move_ssh


async def _mirror_once(config: Path, job: str) -> tuple[list[MirrorOutcome], str | None]:
    """Poll box until a mirror cycle of ``job`` ends; what it said, and the job's queue id."""
    heard: list[MirrorOutcome] = []
    fleet = Fleet(cfg.load(config), mirror=True, on_mirror=heard.append)
    try:
        deadline = time.monotonic() + 60
        while not any(o.job == job for o in heard):
            assert time.monotonic() < deadline, heard
            await fleet.poll_host("box")
            assert fleet.mirror is not None
            await fleet.mirror.idle()
            await asyncio.sleep(0.2)
        view = fleet.state("box").view
        qid = next((j.queue_id for j in view.jobs if j.id == job), None) if view else None
        return heard, qid
    finally:
        await fleet.close()


def _stop_queue(box: Any) -> None:
    box.run("tmux", "kill-session", "-t", "gpuroom-default")
    box.run("sh", "-c", 'pkill -u "$(id -u)" -f "[q]ueue runner.*--root $HOME/.gpuroom"; '
            'pkill -u "$(id -u)" -f "[s]leep 300"')


@pytest.mark.attack("faults", "the box's queue is reset under the same alias and its new j1 "
                    "is taken for the old one by the mirror and queue move")
def test_a_reset_queue_is_a_new_one_for_the_mirror_and_for_move(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, config = sshd_box.home, str(two_hosts)
    old_job, old_dir = start_job(capsys, two_hosts, "box", "--mirror",
                                 f"--cwd={home / 'wa' / 'run'}")
    old_ckpt = save_ckpt(sshd_box, old_dir, 16)
    old_bytes = old_ckpt.read_bytes()
    heard, old_queue = asyncio.run(_mirror_once(two_hosts, old_job))
    assert [(o.status, o.step) for o in heard] == [("home", 16)], heard
    assert old_queue is not None

    # The rental ends; a new one behind the same alias starts with no queue at all.
    _stop_queue(sshd_box)
    time.sleep(0.5)
    shutil.rmtree(home / ".gpuroom")  # queues, checkpoints and the helper: a new box
    (home / "wa" / "run" / "seen.txt").unlink(missing_ok=True)
    new_job, new_dir = start_job(capsys, two_hosts, "box", "--mirror",
                                 f"--cwd={home / 'wa' / 'run'}")
    assert new_job == old_job  # ids start again: only the queue's identity tells them apart
    new_ckpt = save_ckpt(sshd_box, new_dir, 5)
    assert new_ckpt.read_bytes() != old_bytes
    heard, new_queue = asyncio.run(_mirror_once(two_hosts, new_job))
    assert new_queue is not None and new_queue != old_queue
    # Mirrored, not "ckpt step 16 already home" (the old queue's j1).
    assert [(o.status, o.step) for o in heard] == [("home", 5)], heard

    rc, out, err = cli(capsys, "--config", config, "queue", "move", "box", new_job, "--to",
                       "boxb")
    assert rc == 0, (out, err)
    last = out.strip().splitlines()[-1]
    assert last.endswith("(from ckpt step 5)"), out
    moved = last.split(" -> boxb/")[1].split()[0]
    doc = wait_job(capsys, two_hosts, "boxb", moved, "running")
    arrived = Path(doc["jobs"][0]["ckpt_dir"])
    # The new rental's checkpoint went, and nothing of the old rental's.
    assert (arrived / new_ckpt.name).read_bytes() == new_ckpt.read_bytes()
    assert not (arrived / old_ckpt.name).exists()
    cli(capsys, "--config", config, "queue", "kill", "boxb", moved)
    rc, out, _ = cli(capsys, "--config", config, "queue", "ls", "--json", "box")
    assert json.loads(out.strip().splitlines()[-1])["id"] == new_queue
