"""gpuroom.remote.checkpoint in-process: full-state round trip, keep policy, corrupt files,
temp cleanup, file modes, async saves, cadence, signals and the verify CLI. Real torch, CPU."""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from harness.torchtree import assert_tree_equal  # noqa: E402
from torch import nn  # noqa: E402

from gpuroom.remote import checkpoint as ckmod  # noqa: E402
from gpuroom.remote.checkpoint import (  # noqa: E402
    Checkpointer,
    CheckpointError,
    ResumableSampler,
    steps_between_checkpoints,
    young_daly_interval,
)

MODULE_PATH = Path(ckmod.__file__)


def _tiny() -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def _train(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        opt.step()
        sched.step()


def _weights_filled(value: float, n: int = 64) -> nn.Linear:
    lin = nn.Linear(n, n)
    with torch.no_grad():
        lin.weight.fill_(value)
        lin.bias.fill_(value)
    return lin


# --- full state ------------------------------------------------------------------------------


def test_round_trip_restores_every_piece_of_state(tmp_path: Path) -> None:
    torch.manual_seed(3)
    random.seed(3)
    model, opt, sched = _tiny()
    _train(model, opt, sched, 5)
    sampler = ResumableSampler(10, seed=1)
    sampler.take(13)  # into the second epoch, mid-way
    ck = Checkpointer(tmp_path)
    path = ck.save(5, model=model, optimizer=opt, scheduler=sched, sampler=sampler, epoch=1,
                   metric=0.25, extra={"tokens": 1234, "note": "x", "t": torch.arange(3)})
    assert path is not None and path.name == "ckpt-000000000005.pt"
    # The draws right after the save are what a resumed run must draw next.
    expect_torch, expect_py = torch.rand(4), random.random()
    expect_order = sampler.take(5)

    model2, opt2, sched2 = _tiny()
    sampler2 = ResumableSampler(10, seed=1)
    torch.manual_seed(99)
    random.seed(99)
    resume = Checkpointer(tmp_path).load_latest(model=model2, optimizer=opt2, scheduler=sched2,
                                                sampler=sampler2)
    assert resume is not None
    assert (resume.step, resume.epoch, resume.metric, resume.skipped) == (5, 1, 0.25, [])
    assert resume.extra["tokens"] == 1234 and torch.equal(resume.extra["t"], torch.arange(3))
    assert_tree_equal(model.state_dict(), model2.state_dict(), "model")
    assert_tree_equal(opt.state_dict(), opt2.state_dict(), "optimizer")
    assert sched.state_dict() == sched2.state_dict()
    assert torch.equal(torch.rand(4), expect_torch)
    assert random.random() == expect_py
    assert sampler2.take(5) == expect_order


def test_numpy_global_rng_restored_exactly(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    np.random.seed(11)
    np.random.rand(7)
    np.random.standard_normal(1)  # odd count: the second value of the polar pair stays cached
    before = np.random.get_state()
    assert before[3] == 1, "the cached-Gaussian half of the state is not exercised"
    path = Checkpointer(tmp_path).save(1)
    assert path is not None and ckmod.describe(path)["rng"]["numpy"] is True
    expect = (np.random.rand(5), np.random.standard_normal(3), np.random.randint(0, 1 << 30, 4))

    np.random.seed(12345)
    np.random.rand(3)
    assert Checkpointer(tmp_path).load_latest() is not None
    after = np.random.get_state()
    assert after[0] == before[0] and np.array_equal(after[1], before[1])
    assert after[2:] == before[2:]
    got = (np.random.rand(5), np.random.standard_normal(3), np.random.randint(0, 1 << 30, 4))
    for want, have in zip(expect, got, strict=True):
        assert np.array_equal(want, have)


_WITHOUT_NUMPY = """
import json, random, sys
sys.modules["numpy"] = None  # `import numpy` now raises ImportError, as where it is absent
import torch
from gpuroom.remote.checkpoint import Checkpointer, describe

own, foreign = sys.argv[1], sys.argv[2]
torch.manual_seed(5)
random.seed(5)
path = Checkpointer(own).save(3, extra={"k": 1})
expect = (torch.rand(3).tolist(), random.random())
torch.manual_seed(0)
random.seed(0)
resume = Checkpointer(own).load_latest()
got = (torch.rand(3).tolist(), random.random())
other = Checkpointer(foreign).load_latest()
print(json.dumps({"step": resume.step, "same_draws": got == expect,
                  "numpy_in_file": describe(path)["rng"]["numpy"],
                  "foreign_step": other.step, "foreign_torch": torch.rand(2).tolist()}))
"""


def test_works_where_numpy_is_absent(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    np.random.seed(1)
    torch.manual_seed(8)
    foreign = tmp_path / "with-numpy"
    Checkpointer(foreign).save(9)  # written where numpy is present: holds its RNG state
    expect_foreign = torch.rand(2).tolist()
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NUMPY, str(tmp_path / "own"), str(foreign)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["step"] == 3 and result["same_draws"] is True
    assert result["numpy_in_file"] is False
    # The numpy part is skipped with a warning; python and torch RNG are still restored.
    assert result["foreign_step"] == 9 and result["foreign_torch"] == expect_foreign
    assert "numpy is not installed here; skipped" in out.stderr


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device (CUDA RNG is saved only where CUDA is in use)")
def test_cuda_rng_of_every_device_restored_exactly(tmp_path: Path) -> None:
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    torch.cuda.manual_seed_all(21)
    for device in devices:
        torch.rand(5, device=device)  # advance each device's generator off its seed
    path = Checkpointer(tmp_path).save(1)
    assert path is not None and ckmod.describe(path)["rng"]["cuda_devices"] == len(devices)
    expect = [torch.rand(4, device=d).cpu() for d in devices]

    torch.cuda.manual_seed_all(999)
    assert Checkpointer(tmp_path).load_latest() is not None
    got = [torch.rand(4, device=d).cpu() for d in devices]
    for want, have in zip(expect, got, strict=True):
        assert torch.equal(want, have)


def test_writeback_requested_for_the_whole_file_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int, int]] = []

    def record(fd: int, offset: int, nbytes: int, flags: int) -> int:
        calls.append((offset, nbytes, flags))
        return 0

    chunk = 64 * 1024
    monkeypatch.setattr(ckmod, "_sync_file_range", lambda: record)
    monkeypatch.setattr(ckmod, "_WRITEBACK_CHUNK_BYTES", chunk)
    model = _weights_filled(0.5, 256)  # 257 KiB of weights: several chunks
    path = Checkpointer(tmp_path).save(1, model=model)
    assert path is not None
    # Contiguous ranges from 0 to the end of the file, each a full chunk but the tail.
    assert calls and calls[0][0] == 0
    for (offset, nbytes, _), (following, _, _) in itertools.pairwise(calls):
        assert offset + nbytes == following
    assert calls[-1][0] + calls[-1][1] == path.stat().st_size
    assert all(nbytes >= chunk for _, nbytes, _ in calls[:-1])
    assert {flags for _, _, flags in calls} == {ckmod._SYNC_FILE_RANGE_WRITE}
    fresh = _weights_filled(0.0, 256)
    assert Checkpointer(tmp_path).load_latest(model=fresh) is not None
    assert_tree_equal(model.state_dict(), fresh.state_dict())


def test_refused_writeback_hint_leaves_durability_to_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refuse(fd: int, offset: int, nbytes: int, flags: int) -> int:
        calls.append(offset)
        return -1  # EINVAL/ESPIPE on filesystems without it

    monkeypatch.setattr(ckmod, "_sync_file_range", lambda: refuse)
    monkeypatch.setattr(ckmod, "_WRITEBACK_CHUNK_BYTES", 16 * 1024)
    ck = Checkpointer(tmp_path, keep=5)
    for step in (1, 2):
        ck.save(step, model=_weights_filled(step, 128))
    assert calls == [0, 0]  # asked once per save, then left alone
    payload = torch.load(ck.path_for(2), weights_only=True)
    assert torch.all(payload["model"]["weight"] == 2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux-only")
def test_sync_file_range_binding_accepts_a_real_file(tmp_path: Path) -> None:
    fn = ckmod._sync_file_range()
    assert fn is not None
    fd = os.open(str(tmp_path / "f"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 100_000)
        assert fn(fd, 0, 100_000, ckmod._SYNC_FILE_RANGE_WRITE) == 0
        assert fn(-1, 0, 0, ckmod._SYNC_FILE_RANGE_WRITE) == -1  # EBADF: the result is real
    finally:
        os.close(fd)


def test_empty_directory_resumes_nothing(tmp_path: Path) -> None:
    assert Checkpointer(tmp_path / "new").load_latest() is None


def test_file_mode_follows_umask_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = Checkpointer(tmp_path).save(1, model=_weights_filled(1.0, 4))
    finally:
        os.umask(old)
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# --- keep policy -----------------------------------------------------------------------------


def test_keep_last_k(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=2)
    for step in range(1, 6):
        ck.save(step, model=_weights_filled(step, 4))
    ck.wait()  # pruning runs behind save()
    assert [s for s, _ in ck.checkpoints()] == [4, 5]


@pytest.mark.parametrize(("mode", "best_step"), [("min", 2), ("max", 1)])
def test_keep_best_by_metric(tmp_path: Path, mode: str, best_step: int) -> None:
    metrics = {1: 9.0, 2: 0.5, 3: 4.0, 4: 3.0, 5: 2.0}
    ck = Checkpointer(tmp_path, keep=2, best_mode=mode)
    for step, metric in metrics.items():
        ck.save(step, model=_weights_filled(step, 4), metric=metric)
    ck.wait()
    assert [s for s, _ in ck.checkpoints()] == sorted({best_step, 4, 5})
    # A fresh Checkpointer finds the best from the files alone (the listing is the truth).
    assert Checkpointer(tmp_path, best_mode=mode).best() == ck.path_for(best_step)


def test_nothing_pruned_when_the_new_file_does_not_load_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = Checkpointer(tmp_path, keep=1)
    ck.save(1, model=_weights_filled(1.0, 4))
    real = ckmod._torch_load

    def refuse_read_back(path: Path, map_location: Any, weights_only: bool,
                         mmap: bool = False) -> Any:
        if mmap:
            raise RuntimeError("simulated unreadable file")
        return real(path, map_location, weights_only, mmap)

    monkeypatch.setattr(ckmod, "_torch_load", refuse_read_back)
    with pytest.raises(CheckpointError, match="does not load back"):
        ck.save(2, model=_weights_filled(2.0, 4))
    ck.wait()
    # keep=1 would have deleted step 1; it is the only copy known to load, so it stays.
    assert ck.path_for(1).exists()


# --- corrupt files and temps -----------------------------------------------------------------


@pytest.mark.attack(
    "faults",
    "a corrupt newest checkpoint: skipped, reported, moved aside, the previous one loads")
def test_corrupt_newest_is_skipped_reported_and_moved_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ck = Checkpointer(tmp_path, keep=5)
    for step in (1, 2, 3):
        ck.save(step, model=_weights_filled(step, 32))
    newest = ck.path_for(3)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])

    model = _weights_filled(0.0, 32)
    resume = Checkpointer(tmp_path).load_latest(model=model)
    assert resume is not None and resume.step == 2
    assert torch.all(model.weight == 2.0)
    assert [p for p, _ in resume.skipped] == [str(newest)]
    assert resume.skipped[0][1]  # a reason, not an empty string
    err = capsys.readouterr().err
    assert "skipping" in err and newest.name in err
    assert not newest.exists() and newest.with_name(newest.name + ".corrupt").exists()
    assert [s for s, _ in Checkpointer(tmp_path).checkpoints()] == [1, 2]


@pytest.mark.attack(
    "faults",
    "every checkpoint unloadable: an error, never a silent restart from step 0")
def test_all_checkpoints_unloadable_raises_instead_of_restarting(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path)
    ck.save(1, model=_weights_filled(1.0, 4))
    ck.path_for(1).write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="none loads"):
        Checkpointer(tmp_path).load_latest()


def test_stale_temp_removed_on_init(tmp_path: Path) -> None:
    stale = tmp_path / ".ckpt-000000000007.pt.tmp.4242.deadbeef"
    stale.write_bytes(b"half a checkpoint")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("keep me")
    ck = Checkpointer(tmp_path)
    assert not stale.exists()
    assert ck.removed_temps == [str(stale)]
    assert unrelated.exists()


def test_temps_of_a_live_writer_are_kept(tmp_path: Path) -> None:
    import fcntl

    live = tmp_path / ".ckpt-000000000008.pt.tmp.4243.cafef00d"
    live.write_bytes(b"being written")
    fd = os.open(str(tmp_path), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # what a writer in another process holds
        ck = Checkpointer(tmp_path)
    finally:
        os.close(fd)
    assert ck.removed_temps == [] and live.exists()
    assert Checkpointer(tmp_path).removed_temps == [str(live)]  # its writer is gone now


def test_weights_only_refusal_is_an_error_not_a_skip(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path)
    with pytest.raises(CheckpointError, match="weights_only=False"):  # told at save time
        ck.save(1, extra={"obj": ResumableSampler(3)})  # an arbitrary Python object
    with pytest.raises(CheckpointError, match="weights_only=False"):
        Checkpointer(tmp_path).load_latest()
    assert ck.path_for(1).exists()  # intact files are never moved aside
    trusting = Checkpointer(tmp_path, weights_only=False).load_latest()
    assert trusting is not None and trusting.extra["obj"].n == 3


# --- async -----------------------------------------------------------------------------------


def test_async_save_snapshots_state_at_call_time(tmp_path: Path) -> None:
    model = _weights_filled(1.0, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 256)).sum().backward()
    opt.step()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    ck = Checkpointer(tmp_path)
    assert ck.save(1, model=model, optimizer=opt, block=False) is None
    with torch.no_grad():  # the training loop moves on while the writer runs
        model.weight.fill_(-7.0)
        model.bias.zero_()
    ck.wait()
    assert not ck.in_flight
    fresh = _weights_filled(0.0, 256)
    resume = Checkpointer(tmp_path).load_latest(model=fresh)
    assert resume is not None and resume.step == 1
    assert_tree_equal(saved, fresh.state_dict())


def test_async_reuses_staging_and_each_save_keeps_its_own_content(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=10)
    model = _weights_filled(0.0, 32)
    for step in range(1, 5):
        with torch.no_grad():
            model.weight.fill_(step)
        ck.save(step, model=model, block=False)
    ck.wait()
    for step, path in ck.checkpoints():
        payload = torch.load(path, weights_only=True)
        assert torch.all(payload["model"]["weight"] == step)


def test_async_parallel_staging_copy_is_exact(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny pieces and no size floor, so this small state goes through the threaded path.
    monkeypatch.setattr(ckmod, "_PARALLEL_COPY_MIN_BYTES", 0)
    monkeypatch.setattr(ckmod, "_COPY_CHUNK_BYTES", 4096)
    monkeypatch.setattr(ckmod, "_copy_threads", lambda: 3)
    threads_used: set[str] = set()
    real_copy = torch.Tensor.copy_

    def tracking_copy(self: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
        threads_used.add(threading.current_thread().name)
        return real_copy(self, src, *args, **kwargs)

    gen = torch.Generator().manual_seed(4)
    weight = torch.randn(300, 301, generator=gen)  # 361 KB: 89 pieces
    extra = {
        "transposed": torch.randn(64, 48, generator=gen).t(),  # not contiguous: one copy
        "ints": torch.arange(10_000, dtype=torch.int64),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 7),
        "tied": [weight, weight],
    }
    expected = {k: v.clone() for k, v in extra.items() if isinstance(v, torch.Tensor)}
    expected_weight = weight.clone()
    monkeypatch.setattr(torch.Tensor, "copy_", tracking_copy)
    ck = Checkpointer(tmp_path)
    ck.save(1, extra=extra, block=False)
    monkeypatch.setattr(torch.Tensor, "copy_", real_copy)
    weight.fill_(-1.0)  # the loop moves on while the writer runs
    extra["ints"].zero_()
    ck.wait()
    payload = torch.load(ck.path_for(1), weights_only=True)["extra"]
    for name in ("transposed", "ints", "scalar", "empty"):
        assert torch.equal(payload[name], expected[name]), name
    assert torch.equal(payload["tied"][0], expected_weight)
    assert payload["tied"][0] is payload["tied"][1]  # tied tensors stay one tensor
    assert "MainThread" in threads_used  # the caller copies too; helpers may take pieces


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device (page-locked staging is for device state)")
def test_async_save_of_cuda_state_stages_in_page_locked_memory(tmp_path: Path) -> None:
    device = torch.device("cuda", 0)
    model = _weights_filled(1.0, 512).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(2, 512, device=device)).sum().backward()
    opt.step()
    saved = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    ck = Checkpointer(tmp_path)
    ck.save(1, model=model, optimizer=opt, block=False)
    with torch.no_grad():  # the next step runs on the device while the writer works
        model.weight.fill_(-7.0)
    ck.wait()
    staged = [b for b in ck._staging.values() if isinstance(b, torch.Tensor)]
    assert staged and all(b.is_pinned() for b in staged)
    fresh = _weights_filled(0.0, 512)
    assert Checkpointer(tmp_path).load_latest(model=fresh) is not None
    assert_tree_equal(saved, fresh.state_dict())


def test_at_most_one_save_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    active, peak = [0], [0]
    guard = threading.Lock()
    real_commit = Checkpointer._commit

    def slow_commit(self: Checkpointer, payload: dict[str, Any], step: int) -> Path:
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)  # long enough that an unguarded second save would overlap
        try:
            return real_commit(self, payload, step)
        finally:
            with guard:
                active[0] -= 1

    monkeypatch.setattr(Checkpointer, "_commit", slow_commit)
    ck = Checkpointer(tmp_path, keep=10)
    for step in range(1, 6):
        ck.save(step, model=_weights_filled(step, 8), block=False)
    ck.wait()
    assert peak[0] == 1
    assert [s for s, _ in ck.checkpoints()] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("next_call", ["wait", "save", "load_latest"])
def test_background_error_surfaces_on_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_call: str
) -> None:
    ck = Checkpointer(tmp_path)
    ck.save(1, model=_weights_filled(1.0, 8))

    def broken_save(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(torch, "save", broken_save)
    ck.save(2, model=_weights_filled(2.0, 8), block=False)
    with pytest.raises(CheckpointError, match="background save"):
        if next_call == "wait":
            ck.wait()
        elif next_call == "save":
            ck.save(3, model=_weights_filled(3.0, 8))
        else:
            ck.load_latest()
    monkeypatch.undo()
    ck.wait()  # reported once, then cleared
    assert [s for s, _ in ck.checkpoints()] == [1]
    assert not [e for e in os.listdir(tmp_path) if ".tmp." in e]


# --- cadence and signals ---------------------------------------------------------------------


def test_young_daly_worked_example() -> None:
    # Principle 8's cadence (docs/GOTCHAS.md) on numbers of our own: spot preemptions every
    # 2 h on average (μ = 7200 s), a checkpoint takes 60 s to write (C), a step takes 0.8 s.
    #   W = sqrt(2 · 7200 · 60) = sqrt(864000) = 929.52 s (about 15.5 min)
    #   929.52 / 0.8 = 1161.9 -> 1161 steps (rounded down to a step boundary)
    assert young_daly_interval(7200, 60) == pytest.approx(929.516, abs=1e-3)
    assert steps_between_checkpoints(7200, 60, 0.8) == 1161
    assert steps_between_checkpoints(7200, 60, 2000.0) == 1  # a step longer than W: every step
    with pytest.raises(ValueError):
        young_daly_interval(0, 60)


def test_should_save_every_steps_and_seconds(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "a", every_steps=10)
    assert [s for s in range(0, 31) if ck.should_save(s)] == [10, 20, 30]
    now = [1000.0]
    monkeypatch.setattr(ckmod.time, "monotonic", lambda: now[0])
    timed = Checkpointer(tmp_path / "b", every_seconds=60)
    assert not timed.should_save(1)
    now[0] += 61
    assert timed.should_save(2)
    timed.save(2, model=_weights_filled(1.0, 4))
    assert not timed.should_save(3)  # the clock restarts at each save
    timed.request_stop()
    assert timed.should_save(3)  # stopping forces a save at the next boundary


def test_signals_only_set_a_flag(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path)
    previous = ck.install_signal_handlers()
    try:
        assert set(previous) == {signal.SIGTERM, signal.SIGUSR1}
        assert not ck.should_stop
        os.kill(os.getpid(), signal.SIGUSR1)
        assert ck.should_stop and ck.stop_signal == "SIGUSR1"
        assert ck.checkpoints() == []  # the handler itself never writes (SLURM1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# --- sampler ---------------------------------------------------------------------------------


def test_sampler_resumes_mid_epoch_and_reshuffles_per_epoch() -> None:
    a = ResumableSampler(20, seed=5)
    first = a.take(7)
    state = a.state_dict()
    rest_a = list(a)  # the rest of epoch 0 through __iter__
    b = ResumableSampler(20, seed=5)
    b.load_state_dict(state)
    assert list(b) == rest_a
    assert sorted(first + rest_a) == list(range(20))
    assert a.epoch == 1 and a.position == 0
    assert list(a) != a.permutation(0)  # epoch 1 is a different order
    with pytest.raises(ValueError):
        ResumableSampler(21, seed=5).load_state_dict(state)


# --- verify CLI ------------------------------------------------------------------------------


def test_verify_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, opt, sched = _tiny()
    _train(model, opt, sched, 2)
    path = Checkpointer(tmp_path).save(
        12, model=model, optimizer=opt, scheduler=sched, sampler=ResumableSampler(4),
        epoch=2, extra={"run": "a"},
    )
    assert ckmod.main(["verify", str(path)]) == 0
    text = capsys.readouterr().out
    # torch imports numpy whenever it is installed, and then its RNG is part of the state.
    has_numpy = sys.modules.get("numpy") is not None
    rngs = "python, numpy, torch" if has_numpy else "python, torch"
    assert "OK" in text and "step      12" in text and f"rng       {rngs}" in text
    assert ckmod.main(["verify", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["step"] == 12 and info["epoch"] == 2 and info["extra_keys"] == ["run"]
    assert info["rng"]["torch"] and info["rng"]["python"]
    assert info["rng"]["numpy"] is has_numpy
    n_tensors = len(model.state_dict()) + len(opt.state_dict()["state"]) + 1  # + torch RNG
    assert info["tensors"] == n_tensors
    assert info["tensor_bytes"] > 0 and info["file_bytes"] > info["tensor_bytes"]


def test_verify_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = Checkpointer(tmp_path).save(3, model=_weights_filled(1.0, 64))
    assert path is not None
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])
    assert ckmod.main(["verify", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is False
    assert "CORRUPT or truncated" in captured.err


# --- packaging constraints of remote/ --------------------------------------------------------


def test_module_parses_as_python_38_and_imports_without_torch() -> None:
    ast.parse(MODULE_PATH.read_text(), feature_version=(3, 8))
    code = ("import sys, gpuroom.remote.checkpoint as c; "
            "assert 'torch' not in sys.modules; print(c.young_daly_interval(1, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30)
    assert float(out.stdout) == pytest.approx(math.sqrt(4))


def test_the_save_time_is_recorded_beside_the_checkpoint_for_the_probe(tmp_path: Path) -> None:
    # Issue 19 item 7: C of Young/Daly, measured by the Checkpointer, reported by the probe.
    from gpuroom.remote.queue import newest_checkpoint

    model, opt, _ = _tiny()
    ck = Checkpointer(tmp_path, keep=2)
    final = ck.save(3, model=model, optimizer=opt)
    ck.wait()
    record = json.loads((tmp_path / ckmod.SAVE_RECORD).read_text())
    assert record["step"] == 3 and record["path"] == final.name and record["save_s"] > 0
    newest = newest_checkpoint(str(tmp_path))
    assert newest is not None and newest["path"] == str(final)  # the record is not "newest"
    assert newest["save_s"] == record["save_s"]
    plain = tmp_path / "other"
    plain.mkdir()
    (plain / "w.pt").write_bytes(b"x")  # a job that saves without the Checkpointer
    other = newest_checkpoint(str(plain))
    assert other is not None and other["save_s"] is None


def test_verify_loads_what_trainers_write_and_refuses_code_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """HF Trainer's rng_state.pth (numpy's RandomState among torch's and python's) and a
    Lightning ckpt with an argparse Namespace load; a global outside the allow-list is named
    and never called."""
    import argparse
    import random

    import numpy as np

    torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                "cpu": torch.random.get_rng_state()}, tmp_path / "rng_state.pth")
    torch.save({"state_dict": {"w": torch.ones(2)},
                "hyper_parameters": {"args": argparse.Namespace(lr=0.1)}}, tmp_path / "l.ckpt")
    for name in ("rng_state.pth", "l.ckpt"):
        assert ckmod.main(["verify", str(tmp_path / name), "--json"]) == 0, capsys.readouterr()
    marker = tmp_path / "ran"

    class RunsCode:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    torch.save({"x": RunsCode()}, tmp_path / "evil.pt")
    capsys.readouterr()
    assert ckmod.main(["verify", str(tmp_path / "evil.pt"), "--json"]) == 3
    answer = json.loads(capsys.readouterr().out)
    assert answer["kind"] == "refused" and answer["refused"] == ["posix.system"], answer
    assert "weights_only=False" not in answer["error"] and "--trust" not in answer["error"]
    assert not marker.exists()
