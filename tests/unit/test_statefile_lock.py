"""The jump side's state files under two processes at once (the room and `gpuroom watch`):
every record each one writes is kept, and one job is pulled by one process at a time.

Real processes (multiprocessing, fork), real files and real flock; nothing is faked.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from gpuroom.tui.fleet.intent import Intent, IntentBook
from gpuroom.tui.fleet.mirror import MirrorState
from gpuroom.tui.fleet.move import Lineage
from gpuroom.tui.model import MirrorHome, Move
from gpuroom.tui.statefile import TransferBusy, transfer_lock
from gpuroom.tui.transport.pull import PullResult, load_records, record_pull

N = 150


def _writer(state: str, who: str, go: multiprocessing.synchronize.Event) -> None:
    ms = MirrorState(Path(state))
    lineage = Lineage(ms)
    go.wait()
    for i in range(N):
        job = f"j{i}"
        ms.put(MirrorHome(host=who, job=job, step=i, file=f"ckpt-{i}.pt", local_path="/x",
                          sha256="0" * 64, verified_by="hash", box_mtime=None, home_at=0.0))
        lineage.add(Move(src_host=who, src_job=job, dst_host="b", dst_job=job, step=i, at=0.0))
        ms.intents.record(Intent(host=who, job=job, argv=("true",), added_at=0.0))
        record_pull(PullResult(who, job, f"/ckpt/{job}", "/local"), ms.pulls)


def _run_two(state: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(state), who, go)) for who in ("a", "b")]
    for p in procs:
        p.start()
    go.set()  # both start writing together
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


@pytest.mark.attack("faults", "the room and gpuroom watch each write 150 records of every "
                    "state file at once")
def test_two_processes_writing_150_records_each_lose_none(tmp_path: Path) -> None:
    state = tmp_path / "mirror.json"
    _run_two(state)
    ms = MirrorState(state)
    homes = ms.load()
    assert len(homes) == 2 * N, f"mirror.json kept {len(homes)} of {2 * N}"
    moves = Lineage(ms).load()
    assert len(moves) == 2 * N, f"moves.json kept {len(moves)} of {2 * N}"
    intents = IntentBook(ms.intents.path)
    assert len(intents.host("a")) + len(intents.host("b")) == 2 * N
    assert len(load_records(ms.pulls)) == 2 * N
    assert not list(tmp_path.glob(".*.tmp-*")), "a tmp file was left behind"
    assert (state.stat().st_mode & 0o777) == 0o600


def _hold(state_dir: str, held: multiprocessing.synchronize.Event,
          done: multiprocessing.synchronize.Event) -> None:
    with transfer_lock(Path(state_dir), "box", "q1", "j1"):
        held.set()
        done.wait(30)


def test_a_job_being_pulled_by_another_process_is_busy_until_it_ends(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    held, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(tmp_path), held, done))
    p.start()
    try:
        assert held.wait(30)
        with pytest.raises(TransferBusy), transfer_lock(tmp_path, "box", "q1", "j1"):
            pass
        with transfer_lock(tmp_path, "box", "q1", "j2"):  # another job: free
            pass
    finally:
        done.set()
        p.join(30)
    with transfer_lock(tmp_path, "box", "q1", "j1"):  # released when the holder ended
        pass
