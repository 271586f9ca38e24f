"""Checkpointer.save against a plain torch.save on a ~1 GiB model + Adam state.

    .venv/bin/python bench/checkpoint.py [--reps 5] [--gib 1.0] [--dir /var/tmp] [--no-write]

Methods, shuffled within each repetition so drift in the shared disk hits all alike:
  raw           torch.save(state, path): what most training scripts do (not durable)
  raw+fsync     the same, then fsync of the file: the fair baseline for a durable write
  sync          Checkpointer.save(block=True): temp, fsync, os.replace, fsync(dir), read-back
  sync, no early write-back   the same with sync_file_range disabled (what it buys)
  async         Checkpointer.save(block=False): the time the training loop is blocked
  async, 1 copy thread        the same with the staging copy on the caller's thread only
Every file is deleted and the page cache flushed (os.sync) outside the timed region, so one
method's dirty pages are not written back on the next method's clock.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

from gpuroom.remote import checkpoint as ckmod
from gpuroom.remote.checkpoint import Checkpointer

PARAM_TENSORS = 4


class Wide(nn.Module):
    """A few large float32 parameters: the shape of a checkpoint dominated by big matrices."""

    def __init__(self, elements_per_param: int) -> None:
        super().__init__()
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(elements_per_param) * 0.01) for _ in range(PARAM_TENSORS)
        )


def build_state(gib: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    # Adam keeps two moments per parameter, so parameters are a third of the bytes.
    elements = int(gib * (1 << 30) / 4 / 3 / PARAM_TENSORS)
    model = Wide(elements)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> int:
    return ckmod._tensor_bytes({"m": model.state_dict(), "o": opt.state_dict()})[1]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fsync_path(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_of(path: Path) -> str:
    try:
        out = subprocess.run(["df", "-hT", str(path)], capture_output=True, text=True,
                             check=True).stdout.splitlines()[-1].split()
        return f"{out[0]} ({out[1]}, {out[2]} total, {out[4]} free)"
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def mount_options(path: Path) -> str:
    """The options of the mount holding ``path`` (``discard`` makes every unlink a TRIM)."""
    best, options = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if str(path.resolve()).startswith(fields[1]) and len(fields[1]) > len(best):
                best, options = fields[1], fields[3]
    except OSError:
        pass
    return options


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_gib() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return float("nan")
    return pages / (1 << 30)


class Bench:
    """One method per function; each leaves the directory as the next one expects it."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, work: Path) -> None:
        self.model, self.opt, self.work = model, opt, work
        self.ck = Checkpointer(work / "ckpt", keep=1)
        self.step = 0
        self.times: dict[str, list[float]] = {}
        self.first_async = float("nan")  # the call that allocates the staging buffers

    def record(self, key: str, seconds: float) -> None:
        self.times.setdefault(key, []).append(seconds)

    def raw_state(self) -> dict[str, object]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    def raw(self, fsync: bool) -> None:
        path = self.work / "raw.pt"
        start = time.perf_counter()
        torch.save(self.raw_state(), str(path))
        if fsync:
            fsync_path(path)
        self.record("raw+fsync" if fsync else "raw", time.perf_counter() - start)
        path.unlink()
        os.sync()

    def sync(self, writeback: bool = True) -> None:
        if not writeback:
            with mock.patch.object(ckmod, "_sync_file_range", lambda: None):
                self.record("sync, no early write-back", timed(self._sync_save))
            self.ck.wait()
            os.sync()
            return
        self._sync_timed()

    def _sync_save(self) -> None:
        self.step += 1
        self.ck.save(self.step, model=self.model, optimizer=self.opt)

    def _sync_timed(self) -> None:
        # The previous checkpoint is there, so keep=1 prunes it as in a real run.
        self.step += 1
        spent = {"torch.save": 0.0}
        fsyncs: list[float] = []
        real_save, real_fsync = torch.save, os.fsync

        def save_timed(*args: object, **kwargs: object) -> None:
            t = time.perf_counter()
            real_save(*args, **kwargs)  # type: ignore[arg-type]
            spent["torch.save"] += time.perf_counter() - t

        def fsync_timed(fd: int) -> None:
            t = time.perf_counter()
            real_fsync(fd)
            fsyncs.append(time.perf_counter() - t)

        with mock.patch.object(torch, "save", save_timed), \
                mock.patch.object(os, "fsync", fsync_timed):
            start = time.perf_counter()
            self.ck.save(self.step, model=self.model, optimizer=self.opt)
            total = time.perf_counter() - start
        self.record("sync", total)
        self.record("sync: torch.save", spent["torch.save"])
        self.record("sync: fsync(file)", fsyncs[0])
        self.record("sync: fsync(dir)", fsyncs[1])
        self.record("sync: rest", total - spent["torch.save"] - fsyncs[0] - fsyncs[1])
        self.record("prune (background)", timed(self.ck.wait))
        final = self.ck.path_for(self.step)
        self.record("read-back", timed(lambda: ckmod._torch_load(final, "cpu", True, mmap=True)))
        os.sync()

    def async_(self, one_thread: bool = False) -> None:
        self.step += 1
        threads = mock.patch.object(ckmod, "_copy_threads", lambda: 1)
        with threads if one_thread else contextlib.nullcontext():
            start = time.perf_counter()
            self.ck.save(self.step, model=self.model, optimizer=self.opt, block=False)
            blocked = time.perf_counter() - start
        if self.first_async != self.first_async:  # NaN: this is the first async save
            self.first_async = blocked
        self.record("async, 1 copy thread" if one_thread else "async", blocked)
        self.ck.wait()
        if not one_thread:
            self.record("async_total", time.perf_counter() - start)
        os.sync()


def run(reps: int, gib: float, base: Path, warmup: int) -> dict[str, list[float]]:
    torch.set_num_threads(1)
    model, opt = build_state(gib)
    total = state_bytes(model, opt)
    print(f"state: {total / (1 << 30):.3f} GiB in {PARAM_TENSORS * 3} tensors", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpuroom-bench-ckpt-", dir=base))
    try:
        bench = Bench(model, opt, work)
        bench.sync()  # a first checkpoint, so every timed save has one to prune
        methods: list[Callable[[], None]] = [
            lambda: bench.raw(False), lambda: bench.raw(True), bench.sync,
            lambda: bench.sync(writeback=False), bench.async_, lambda: bench.async_(True)]
        load_before = os.getloadavg()[0]
        for rep in range(-warmup, reps):
            if rep == 0:  # warm-up repetitions fault in allocator and page-cache paths
                bench.times.clear()
            # A shuffled order per repetition: with a fixed or rotated order each method always
            # follows the same neighbour and inherits its writeback and TRIM debt.
            order = list(methods)
            random.Random(rep).shuffle(order)
            for method in order:
                method()
            print(f"rep {rep + 1}/{reps}: " + ", ".join(
                f"{k} {v[-1]:.3f}s" for k, v in bench.times.items()), flush=True)
        times = dict(bench.times)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    times["_bytes"] = [float(total)]
    times["_async_first"] = [bench.first_async]
    times["_load"] = [load_before, os.getloadavg()[0]]
    return times


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values * 3)
    return q1, q2, q3


def report(times: dict[str, list[float]], reps: int, base: Path) -> str:
    med = {k: statistics.median(v) for k, v in times.items() if v and not k.startswith("_")}
    total = times["_bytes"][0]
    gbps = total / (1 << 30)

    def row(name: str, key: str, note: str) -> str:
        v = times[key]
        return (f"| {name} | {med[key]:.3f} | {min(v):.3f} | {max(v):.3f} | "
                f"{med[key] / med['raw+fsync']:.2f}x | {med[key] / med['raw']:.2f}x | {note} |")

    def paired(num: str, den: str) -> tuple[float, float, float]:
        # Same repetition, run back to back: a burst of load from other users hits both.
        return quartiles([a / b for a, b in zip(times[num], times[den], strict=True)])

    sync_ratio = med["sync"] / med["raw+fsync"]
    async_ratio = med["async"] / med["sync"]
    sync_p = paired("sync", "raw+fsync")
    async_p = paired("async", "sync")
    wb_p = paired("sync", "sync, no early write-back")
    thr_p = paired("async", "async, 1 copy thread")
    async_first = times["_async_first"][0]
    async_later = med["async"]
    fsync_cost = med["raw+fsync"] - med["raw"]
    overhead = med["sync"] - med["raw+fsync"]
    max_spread = max(100 * (max(times[k]) - min(times[k])) / min(times[k])
                     for k in ("raw", "raw+fsync", "sync"))
    breakdown = ", ".join(
        f"{k.split(': ')[1]} {med[k] * 1000:.0f} ms" for k in
        ("sync: torch.save", "sync: fsync(file)", "sync: fsync(dir)", "sync: rest"))
    threads = ckmod._copy_threads()
    load = times["_load"]

    def verdict(value: float, target: float) -> str:
        return "met" if value <= target else "MISSED"

    def iqr(q: tuple[float, float, float]) -> str:
        return f"{q[1]:.3f}x (quartiles {q[0]:.3f}-{q[2]:.3f})"

    lines = [
        f"Machine: {machine()}; {cpu_model()}; {mem_gib():.0f} GiB RAM; torch {torch.__version__}.",
        f"Disk: {disk_of(base)}, mount options: {mount_options(base)}. Shared with other"
        f" engineers' work while measured (1-min load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end, on 2 cores).",
        "",
        f"State: {gbps:.3f} GiB float32 = {PARAM_TENSORS} parameters plus Adam's two moments "
        f"({PARAM_TENSORS * 3} tensors), saved from CPU memory; torch.set_num_threads(1). "
        f"{reps} repetitions after a warm-up; the method order is shuffled per repetition; "
        "files are deleted and `os.sync()` runs outside the timed region. Checkpointer uses "
        "keep=1, so every save has an older checkpoint to prune.",
        "",
        "| method | median s | min s | max s | vs raw+fsync | vs raw | what is timed |",
        "|---|---|---|---|---|---|---|",
        row("raw `torch.save`", "raw", "write into the page cache, not durable"),
        row("raw `torch.save` + fsync", "raw+fsync", "the fair durable baseline"),
        row("`Checkpointer.save` (sync)", "sync",
            "temp, write-back started every 8 MiB, fsync, replace, fsync(dir), read-back; "
            "returns before the prune"),
        row("sync without early write-back", "sync, no early write-back",
            "the same, all write-back left to the closing fsync (the previous design)"),
        row("`Checkpointer.save(block=False)`", "async",
            f"training loop blocked (copy to CPU, {threads} copy threads)"),
        row("async, 1 copy thread", "async, 1 copy thread",
            "the same copy on the caller's thread only (the previous design)"),
        row("async, until committed and pruned", "async_total", "background thread included"),
        row("prune after a sync save", "prune (background)",
            "unlink of the previous 1 GiB file, off the caller's path"),
        "",
        f"- sync vs raw+fsync: **{sync_ratio:.3f}x** ratio of medians (target <= 1.05x: "
        f"{verdict(sync_ratio, 1.05)}); per-repetition ratio {iqr(sync_p)}; vs raw without "
        f"fsync {med['sync'] / med['raw']:.3f}x. Sync save breakdown (medians): {breakdown}; "
        f"the separate mmap read-back (principle 3) takes {med['read-back'] * 1000:.0f} ms.",
        f"- What the early write-back buys: sync with it / without it, per repetition: "
        f"{iqr(wb_p)}. The disk writes the first tensors while torch.save (CRC32 and the copy "
        "into the page cache, CPU-bound) produces the next, so the closing fsync waits only "
        "for the tail; raw+fsync does the two one after the other.",
        f"- async blocking vs sync: **{async_ratio:.3f}x** ratio of medians (target <= 0.1x: "
        f"{verdict(async_ratio, 0.1)}); per-repetition ratio {iqr(async_p)}. First call "
        f"{async_first:.3f}s (allocates the CPU staging buffers), later calls "
        f"{async_later:.3f}s median ({gbps / max(async_later, 1e-9):.1f} GiB/s into the reused "
        f"buffers). {threads} copy threads / 1 copy thread, per repetition: {iqr(thr_p)}.",
        f"- Why the async ratio is what it is: blocking is one copy of the state in memory "
        f"({gbps / max(async_later, 1e-9):.1f} GiB/s with {threads} copy threads, "
        f"{gbps / max(med['async, 1 copy thread'], 1e-9):.1f} GiB/s on one), while a sync "
        f"save costs CRC32 plus a copy into the page cache ({breakdown.split(',')[0]}) and "
        f"little more, because this VM's disk keeps up ({gbps / med['sync']:.1f} GiB/s "
        "durable). The quotient of the two is the ratio, and every gain on the sync side "
        "(the early write-back) raises it. Storage slower than RAM by 10x or more (network "
        "volumes, most rented boxes' persistent disks at 0.1-1 GiB/s) puts it well under "
        "0.1x; a GPU state is copied over PCIe instead, which is what the blocking time then "
        "measures.",
        f"- Spread: min/max differ by up to {max_spread:.0f}% on this shared 2-core VM; the "
        "per-repetition ratios are the steadier figure, ratios of medians within about 10% "
        "are not distinguishable here.",
        f"- Durability costs raw+fsync - raw = {fsync_cost:+.3f}s here; Checkpointer's own "
        f"difference from raw+fsync is {overhead * 1000:+.0f} ms median.",
        "",
        f"Reproduce: `.venv/bin/python bench/checkpoint.py --reps {reps}` (needs ~3x the state in "
        "RAM and ~2x on disk).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="checkpoint save bench")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions first")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"),
                        help="a directory on the disk to measure (not a tmpfs)")
    parser.add_argument("--no-write", action="store_true",
                        help="print the section instead of writing docs/PERFORMANCE.md")
    args = parser.parse_args(argv)
    times = run(args.reps, args.gib, args.dir, args.warmup)
    section = report(times, args.reps, args.dir)
    print(section)
    if not args.no_write:
        write_section("checkpoint", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
