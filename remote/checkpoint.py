"""Checkpoints that never lose a run: full state, atomic on disk, resumable by the same command.

User training code imports this on the box (the queue puts the helper zipapp on PYTHONPATH;
``pip install gpuroom`` works too)::

    ckpt = Checkpointer(os.environ.get("GPUROOM_CKPT_DIR", "ckpt"), keep=3, every_steps=500)
    ckpt.install_signal_handlers()              # SIGTERM/SIGUSR1 only set a flag (SLURM1)
    resume = ckpt.load_latest(model=model, optimizer=opt, scheduler=sched, sampler=sampler)
    step = resume.step if resume else 0
    while step < total:
        train_one_step(); step += 1
        if ckpt.should_save(step):              # periodic, or a stop was asked for
            ckpt.save(step, model=model, optimizer=opt, scheduler=sched, sampler=sampler)
        if ckpt.should_stop:
            break                               # saved at a step boundary: exit 0
    ckpt.wait()

Principle 8: full state (weights, optimizer, scheduler, epoch/step, every RNG, sampler position,
extras) goes to disk atomically (temp in the same directory -> fsync -> os.replace -> fsync of
the directory), and loading the latest on start is unconditional. Principle 3: a checkpoint is
trusted only once it has been read back, so a new file is load-tested before older ones are
pruned, and a file that does not load is skipped (and reported) for the newest that does.

The rest of ``remote/`` is standard-library only; this module imports torch (and numpy, when the
program already uses it) inside functions, so importing it costs nothing where torch is absent.
It must still parse on Python 3.8.
"""

from __future__ import annotations

import argparse
import copy
import errno
import json
import math
import os
import random
import re
import secrets
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

try:
    import fcntl
except ImportError:  # not Unix: stale temps are then recognised by their writer's pid
    fcntl = None  # type: ignore[assignment]

FORMAT = "gpuroom.checkpoint/1"
_NAME_RE = re.compile(r"^ckpt-(\d{12})\.pt$")
_TMP_RE = re.compile(r"^\.ckpt-\d{12}\.pt\.tmp\.(\d+)\.[0-9a-f]+$")
_MIB = 1 << 20
# torch's zip container adds a few hundred bytes per record plus the pickle; 1 MiB covers it.
_CONTAINER_SLACK_BYTES = _MIB
# Write-back of a checkpoint is started every this many bytes while torch.save still serialises
# the rest, so the final fsync finds little left to write (see _WritebackWriter).
_WRITEBACK_CHUNK_BYTES = 8 * _MIB
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start write-back of dirty pages in range, no wait
# The async staging copy: pieces threads take in turn, and the size below which one thread
# copies everything (starting threads costs more than it saves there).
_COPY_CHUNK_BYTES = 16 * _MIB
_PARALLEL_COPY_MIN_BYTES = 64 * _MIB
_DEFAULT_STOP_SIGNALS = ("SIGTERM", "SIGUSR1")
# Next to the checkpoints: how long the last save took (C of Young/Daly), read by the probe
# (remote/queue.py newest_checkpoint) so the doctor can judge the cadence (principle 8).
SAVE_RECORD = ".gpuroom-save.json"

PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or restored; the message names the path and the fix."""


@dataclass
class Resume:
    """What load_latest restored, and which newer checkpoints it had to pass over."""

    step: int
    epoch: Optional[int]
    path: str
    extra: Dict[str, Any]
    metric: Optional[float]
    skipped: List[Tuple[str, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Cadence


def young_daly_interval(mtbf_seconds: float, checkpoint_seconds: float) -> float:
    """Seconds of work between checkpoints that minimise expected loss: W = sqrt(2·μ·C).

    μ is the mean time between interruptions (preemptions, node failures), C the time one
    checkpoint takes to write. Valid while C is much smaller than μ.
    """
    if mtbf_seconds <= 0 or checkpoint_seconds <= 0:
        raise ValueError("mtbf_seconds and checkpoint_seconds must be positive")
    return math.sqrt(2.0 * mtbf_seconds * checkpoint_seconds)


def steps_between_checkpoints(
    mtbf_seconds: float, checkpoint_seconds: float, step_seconds: float
) -> int:
    """The Young/Daly interval rounded DOWN to whole training steps, at least 1.

    Rounding down keeps the expected loss at or under the optimum's; a save can only happen
    at a step boundary anyway.
    """
    if step_seconds <= 0:
        raise ValueError("step_seconds must be positive")
    interval = young_daly_interval(mtbf_seconds, checkpoint_seconds)
    return max(1, math.floor(interval / step_seconds))


# ---------------------------------------------------------------------------------------------
# Sampler


class ResumableSampler:
    """A seeded permutation of range(n) per epoch that can resume in the middle of an epoch.

    ``position`` counts the indices handed out in the current epoch, so a state saved after the
    consumer used them resumes with the next index. Use it directly or as a DataLoader
    ``sampler`` with ``num_workers=0``; with worker processes the loader prefetches ahead of
    training and the saved position is ahead by the prefetched batches.
    Standard library only: the permutation comes from ``random.Random`` seeded per epoch, so it
    is the same on every Python and every machine.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        if n <= 0:
            raise ValueError("n must be positive")
        self.n = n
        self.seed = seed
        self.epoch = 0
        self.position = 0

    def permutation(self, epoch: int) -> List[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        """The rest of the current epoch; the epoch advances once it has been handed out."""
        if self.position >= self.n:
            self.epoch += 1
            self.position = 0
        order = self.permutation(self.epoch)
        while self.position < self.n:
            index = order[self.position]
            self.position += 1
            yield index
        self.epoch += 1
        self.position = 0

    def take(self, count: int) -> List[int]:
        """The next ``count`` indices, crossing into the next epoch when this one runs out."""
        out: List[int] = []
        while len(out) < count:
            if self.position >= self.n:
                self.epoch += 1
                self.position = 0
            order = self.permutation(self.epoch)
            end = min(self.n, self.position + count - len(out))
            out.extend(order[self.position : end])
            self.position = end
        return out

    def state_dict(self) -> Dict[str, int]:
        return {"n": self.n, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        if int(state["n"]) != self.n or int(state["seed"]) != self.seed:
            raise ValueError(
                f"sampler state is for n={state['n']} seed={state['seed']}, "
                f"this sampler has n={self.n} seed={self.seed}"
            )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])


# ---------------------------------------------------------------------------------------------
# RNG


def _capture_rng() -> Dict[str, Any]:
    import torch

    state: Dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        # Stored as plain ints so the file loads with weights_only (no ndarray unpickling).
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": str(kind),
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    # get_rng_state_all() would create a context on every device; a program that never
    # touched CUDA has no CUDA randomness to save.
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def _restore_rng(state: Dict[str, Any]) -> None:
    import torch

    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            _warn("checkpoint holds numpy RNG state but numpy is not installed here; skipped")
        else:
            s = state["numpy"]
            np.random.set_state(
                (s["kind"], np.array(s["keys"], dtype=np.uint32), s["pos"], s["has_gauss"],
                 s["cached_gaussian"])
            )
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if count != len(cuda_states):
            _warn(f"checkpoint has CUDA RNG for {len(cuda_states)} devices, this process sees "
                  f"{count}; restoring the first {min(count, len(cuda_states))}")
        for index, device_state in enumerate(cuda_states[:count]):
            torch.cuda.set_rng_state(device_state.cpu(), device=index)


# ---------------------------------------------------------------------------------------------
# Helpers


def _warn(message: str) -> None:
    sys.stderr.write(f"gpuroom.checkpoint: {message}\n")
    sys.stderr.flush()


def _human(nbytes: Optional[float]) -> str:
    if nbytes is None:
        return "unknown"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _free_bytes(directory: Path) -> Optional[int]:
    try:
        st = os.statvfs(str(directory))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable (a power cut may otherwise undo it)."""
    fd = os.open(str(directory), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_sync_file_range_fn: Any = None
_sync_file_range_loaded = False


def _sync_file_range() -> Optional[Callable[[int, int, int, int], int]]:
    """libc's sync_file_range on Linux, else None (the final fsync then does all the work)."""
    global _sync_file_range_fn, _sync_file_range_loaded
    if not _sync_file_range_loaded:
        _sync_file_range_loaded = True
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _sync_file_range_fn = fn
            except (OSError, AttributeError, ImportError):
                _sync_file_range_fn = None
    return _sync_file_range_fn  # type: ignore[no-any-return]


class _WritebackWriter:
    """The write-only file torch.save serialises into: written bytes start going to disk at once.

    With a plain path, every byte of a 1 GiB checkpoint sits dirty in the page cache until
    the closing fsync, which then waits for the whole file at disk speed after serialisation
    has finished. Here each ``_WRITEBACK_CHUNK_BYTES`` written is handed to the disk with
    sync_file_range(SYNC_FILE_RANGE_WRITE), which queues the I/O and returns; the disk writes
    while torch.save copies out the next tensors, and the fsync that makes the file durable
    only waits for the tail. sync_file_range is only a hint here: durability still comes from
    that fsync, and where the call is missing or refused the writer simply stops calling it.
    """

    def __init__(self, fd: int, chunk: Optional[int] = None) -> None:
        self.fd = fd
        self.chunk = chunk or _WRITEBACK_CHUNK_BYTES
        self.pos = 0
        self.started = 0  # write-back requested for [0, started)
        self._range = _sync_file_range()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")  # zero-copy: torch hands over its storage memory
        total = len(view)
        done = 0
        while done < total:
            # Bounded slices: write-back of one part starts while the next is copied, and no
            # single write exceeds what every platform's write() accepts.
            written = os.write(self.fd, view[done : done + self.chunk])
            done += written
            self.pos += written
            if self.pos - self.started >= self.chunk:
                self.start_writeback()
        return total

    def start_writeback(self) -> None:
        fn = self._range
        if fn is not None and self.pos > self.started:
            if fn(self.fd, self.started, self.pos - self.started, _SYNC_FILE_RANGE_WRITE) != 0:
                self._range = None  # EINVAL/ESPIPE on some filesystems: leave it to fsync
        self.started = self.pos

    def flush(self) -> None:
        """Nothing is buffered here; torch.save calls this when it is done."""

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = os.lseek(self.fd, offset, whence)
        return self.pos

    def tell(self) -> int:
        return self.pos


def _walk_tensors(obj: Any, seen: Dict[int, Any]) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        seen[id(obj)] = obj
    elif isinstance(obj, dict):
        for value in obj.values():
            _walk_tensors(value, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _walk_tensors(value, seen)


def _tensor_bytes(obj: Any) -> Tuple[int, int]:
    """(tensor count, bytes torch.save will write for them: whole storages, each once)."""
    seen: Dict[int, Any] = {}
    _walk_tensors(obj, seen)
    storages: Dict[Tuple[str, int], int] = {}
    for tensor in seen.values():
        try:
            storage = tensor.untyped_storage()
            key = (str(tensor.device), storage.data_ptr())
            storages[key] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse, meta, ...: count the elements
            storages[("elem", id(tensor))] = tensor.element_size() * tensor.numel()
    return len(seen), sum(storages.values())


_pinning = {"refused": False}  # the first refusal is warned about once, then not retried


def _staging_buffer(src: Any) -> Any:
    """A CPU tensor to hold ``src`` from one async save to the next.

    Page-locked when ``src`` is on a CUDA device: a copy into pageable memory goes through the
    driver's bounce buffer at a fraction of the bus's speed, and that copy is all the time an
    async save blocks the loop. Locked memory can be refused (a container's limit, a host
    short of it); the save then stages in pageable memory, slower but the same bytes.
    """
    import torch

    if src.device.type == "cuda" and not _pinning["refused"]:
        try:
            return torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=True)
        except RuntimeError as exc:
            _pinning["refused"] = True
            _warn(f"page-locked staging memory refused ({exc}); async saves stage in pageable "
                  "memory, which blocks the loop longer")
    return torch.empty(src.shape, dtype=src.dtype, device="cpu")


def _stage_to_cpu(obj: Any, key: Tuple[Any, ...], buffers: Dict[Tuple[Any, ...], Any],
                  memo: Dict[int, Any], copies: List[Tuple[Any, Any]]) -> Any:
    """A deep copy of ``obj`` whose tensors live in CPU memory, for a background write.

    Dense tensors get buffers kept from the previous async save when the shape and dtype
    still match (a fresh 1 GiB allocation costs more page faults than the copy); the
    (buffer, source) pairs are appended to ``copies`` for ``_copy_into_buffers``, which must
    run before the staged tree is used. The caller guarantees no write still reads those
    buffers (at most one save in flight).
    """
    import torch

    if isinstance(obj, torch.Tensor):
        if id(obj) in memo:  # tied weights stay one tensor
            return memo[id(obj)]
        src = obj.detach()
        if src.layout == torch.strided and not src.is_quantized:
            buf = buffers.get(key)
            if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
                buf = _staging_buffer(src)
                buffers[key] = buf
            copies.append((buf, src))
            out = buf
        else:
            out = src.to("cpu", copy=True)
        memo[id(obj)] = out
        return out
    if isinstance(obj, dict):
        items = [(k, _stage_to_cpu(v, (*key, k), buffers, memo, copies)) for k, v in obj.items()]
        try:
            staged = type(obj)()
        except TypeError:
            staged = {}
        staged.update(items)
        return staged
    if type(obj) is list:
        return [_stage_to_cpu(v, (*key, i), buffers, memo, copies) for i, v in enumerate(obj)]
    if type(obj) is tuple:
        return tuple(_stage_to_cpu(v, (*key, i), buffers, memo, copies)
                     for i, v in enumerate(obj))
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    return copy.deepcopy(obj)


def _copy_threads() -> int:
    """Threads of our own for the staging copy: the CPUs this process may run on, at most 4.

    One when torch runs intra-op threads: copy_ then spreads each piece over those already,
    and our threads on top would each start a team of them. A copy is bound by memory
    bandwidth, which a few cores saturate; more threads only add start-up and contention.
    """
    import torch

    if torch.get_num_threads() > 1:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))  # a Slurm or container CPU set, not the host's
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _copy_into_buffers(copies: List[Tuple[Any, Any]]) -> None:
    """Fill the staging buffers; returns once every byte is in CPU memory.

    Host-to-host copies are cut into ``_COPY_CHUNK_BYTES`` pieces that a few threads take in
    turn: copy_ releases the GIL, so where torch is limited to one thread (a common setting
    with one process per GPU) the training thread is still blocked for the copy at the
    memory bandwidth of several cores, and a thread the OS does not schedule only leaves its
    pieces to the others. Other
    sources (CUDA, ...) are copied one tensor at a time; a blocking copy_ returns only when
    the data has arrived, into page-locked buffers at the bus's speed (``_staging_buffer``).
    """
    jobs: List[Tuple[Any, Any]] = []
    host_bytes = 0
    for buf, src in copies:
        if src.device.type != "cpu" or not src.is_contiguous() or src.numel() == 0:
            buf.copy_(src)
            continue
        flat_src, flat_buf = src.view(-1), buf.view(-1)
        step = max(1, _COPY_CHUNK_BYTES // src.element_size())
        for start in range(0, flat_src.numel(), step):
            jobs.append((flat_buf[start : start + step], flat_src[start : start + step]))
        host_bytes += src.numel() * src.element_size()
    threads = _copy_threads() if host_bytes >= _PARALLEL_COPY_MIN_BYTES else 1
    if threads == 1:
        for dst, part in jobs:
            dst.copy_(part)
        return
    pending = iter(jobs)  # next() on a list iterator is atomic under the GIL
    errors: List[BaseException] = []

    def drain() -> None:
        try:
            for dst, part in pending:
                dst.copy_(part)
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)

    helpers = [threading.Thread(target=drain, name="gpuroom-checkpoint-copy", daemon=True)
               for _ in range(threads - 1)]
    for helper in helpers:
        helper.start()
    drain()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]


# What a safe load of a file from a box allows beyond tensors and plain values: what the common
# trainers write, and nothing that calls code. torch.load(weights_only=True) with these
# (torch.serialization.safe_globals), never weights_only=False. README "Pull verification".
#   HF Trainer's rng_state.pth: numpy's RandomState tuple, an ndarray of uint32, rebuilt by
#   numpy's _reconstruct (numpy.core before numpy 2, numpy._core since) and its dtype.
#   Lightning's hyper_parameters: the script's argparse.Namespace when it saved its args.
SAFE_NUMPY_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float16", "float32", "float64", "complex64", "complex128")
SAFE_GLOBAL_NAMES = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
                     "numpy.ndarray", "numpy.dtype", "numpy.dtypes.<one per SAFE_NUMPY_DTYPES>",
                     "argparse.Namespace")
_REFUSED_GLOBAL_RE = re.compile(r"GLOBAL ([A-Za-z_][\w.]*)")


def safe_globals() -> List[Any]:
    """The objects behind SAFE_GLOBAL_NAMES that this interpreter has (numpy is optional)."""
    allowed: List[Any] = [argparse.Namespace]
    try:
        import numpy
    except ImportError:
        return allowed
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    # Named both ways: a file saved under numpy 1 names numpy.core, one under 2 numpy._core.
    allowed += [(_reconstruct, "numpy.core.multiarray._reconstruct"),
                (_reconstruct, "numpy._core.multiarray._reconstruct"),
                numpy.ndarray, numpy.dtype]
    # numpy >= 1.25 gives each dtype its own class (numpy.dtypes.UInt32DType), which the
    # unpickler builds; before, that class is numpy.dtype itself.
    classes = {type(numpy.dtype(name)) for name in SAFE_NUMPY_DTYPES} - {numpy.dtype}
    return allowed + sorted(classes, key=lambda c: c.__name__)


def refused_globals(exc: BaseException) -> List[str]:
    """The pickle globals a safe load refused, as torch names them ("os.system")."""
    return sorted(set(_REFUSED_GLOBAL_RE.findall(str(exc))))


def _is_weights_only_refusal(exc: BaseException) -> bool:
    """An intact file that holds Python objects weights_only will not unpickle."""
    # Only a named global means "intact but refused"; garbage bytes fed to the unpickler
    # also fail under the weights_only banner ("Unsupported operand"), and those are corrupt.
    return "Unsupported global" in str(exc) or bool(refused_globals(exc))


# torch's own advice in a load error: re-running with weights_only=False. Not for a box's file.
_TORCH_ADVICE = ("weights_only", "Weights only", "trusted source", "Check the documentation",
                 "torch.load", "file an issue")


def _load_error_words(exc: BaseException) -> str:
    """What went wrong in a failed load, without torch's advice to unpickle in full."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    kept = [line for line in lines if not any(a in line for a in _TORCH_ADVICE)]
    return " ".join(kept)[:160] or type(exc).__name__


def _torch_load(path: Path, map_location: Any, weights_only: bool, mmap: bool = False) -> Any:
    import torch

    return torch.load(str(path), map_location=map_location, weights_only=weights_only, mmap=mmap)


def checkpoint_step(path: PathLike) -> Optional[int]:
    """The step a checkpoint file name encodes, or None for any other file."""
    match = _NAME_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------------------------
# Checkpointer


class Checkpointer:
    """Writes ``ckpt-{step:012d}.pt`` files into one directory and resumes from the newest.

    The directory listing is the only source of truth: names sort by step, and nothing else
    (no index, no "latest" link) has to agree with it after a crash.
    """

    def __init__(
        self,
        directory: PathLike,
        *,
        keep: int = 3,
        every_steps: Optional[int] = None,
        every_seconds: Optional[float] = None,
        best_mode: Optional[str] = None,
        weights_only: bool = True,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1: the newest checkpoint is never pruned")
        if best_mode not in (None, "min", "max"):
            raise ValueError("best_mode must be None, 'min' or 'max'")
        if every_steps is not None and every_steps < 1:
            raise ValueError("every_steps must be at least 1")
        self.directory = Path(directory)
        self.keep = keep
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.best_mode = best_mode
        # weights_only: the payload this class writes is tensors and plain Python values, which
        # the safe unpickler restores exactly; a file pulled from a shared disk cannot run code.
        self.weights_only = weights_only
        self.last_skipped: List[Tuple[str, str]] = []
        self._stop_signal: Optional[int] = None
        self._last_save_mono = time.monotonic()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._bg_error: Optional[BaseException] = None
        self._staging: Dict[Tuple[Any, ...], Any] = {}
        self._metric_cache: Dict[str, Tuple[Tuple[int, int], Optional[float]]] = {}
        self.directory.mkdir(parents=True, exist_ok=True)
        self.removed_temps = self._remove_stale_temps()

    # -- listing -----------------------------------------------------------------------------

    def checkpoints(self) -> List[Tuple[int, Path]]:
        """Committed checkpoints as (step, path), oldest first."""
        found = []
        for entry in os.listdir(str(self.directory)):
            step = checkpoint_step(entry)
            if step is not None:
                found.append((step, self.directory / entry))
        found.sort()
        return found

    def path_for(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:012d}.pt"

    def _remove_stale_temps(self) -> List[str]:
        """Delete temp files a killed save left behind, unless a writer is active right now.

        Writers hold a shared flock on the directory while a temp exists; the kernel drops it
        when the writer dies, even by SIGKILL. Holding the exclusive lock here therefore
        means every temp present belongs to a dead writer, without trusting pids (a
        restarted container reuses them).
        """
        temps = [e for e in os.listdir(str(self.directory)) if _TMP_RE.match(e)]
        if not temps:
            return []
        dir_fd = os.open(str(self.directory), os.O_RDONLY)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    _warn(f"a save is in progress in {self.directory}; left its temp files")
                    return []
            removed = []
            for entry in temps:
                match = _TMP_RE.match(entry)
                if fcntl is None and match and _pid_alive(int(match.group(1))):
                    continue
                try:
                    (self.directory / entry).unlink()
                except FileNotFoundError:
                    continue
                removed.append(str(self.directory / entry))
        finally:
            os.close(dir_fd)
        if removed:
            _warn(f"removed {len(removed)} temp file(s) of an interrupted save in {self.directory}")
        return removed

    # -- cadence and signals -----------------------------------------------------------------

    @property
    def should_stop(self) -> bool:
        """True once a stop signal arrived: save at the next step boundary and exit 0."""
        return self._stop_signal is not None

    @property
    def stop_signal(self) -> Optional[str]:
        if self._stop_signal is None:
            return None
        try:
            return signal.Signals(self._stop_signal).name
        except ValueError:
            return str(self._stop_signal)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        self._stop_signal = int(signum)

    def should_save(self, step: int) -> bool:
        """True on every ``every_steps``-th step, after ``every_seconds``, or when stopping."""
        if self.should_stop:
            return True
        if self.every_steps and step > 0 and step % self.every_steps == 0:
            return True
        return bool(
            self.every_seconds is not None
            and time.monotonic() - self._last_save_mono >= self.every_seconds
        )

    def install_signal_handlers(
        self, signals: Optional[Sequence[Union[int, str]]] = None
    ) -> Dict[int, Any]:
        """Make SIGTERM and SIGUSR1 (Slurm's ``--signal``) only set ``should_stop``.

        A Python handler runs between any two bytecodes, in the middle of a backward pass or
        of optimizer.step(); saving there writes a state that never existed (SLURM1). The loop
        polls ``should_stop`` and saves at a step boundary instead. Returns the previous
        handlers so a caller can put them back. Call from the main thread.
        """
        wanted = list(signals) if signals is not None else list(_DEFAULT_STOP_SIGNALS)
        previous: Dict[int, Any] = {}

        def _set_flag(signum: int, _frame: Any) -> None:
            self._stop_signal = signum

        for item in wanted:
            if isinstance(item, str):
                if not hasattr(signal, item):
                    continue  # SIGUSR1 does not exist on every platform
                signum = int(getattr(signal, item))
            else:
                signum = int(item)
            previous[signum] = signal.signal(signum, _set_flag)
        return previous

    # -- save --------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        sampler: Any = None,
        extra: Optional[Dict[str, Any]] = None,
        epoch: Optional[int] = None,
        metric: Optional[float] = None,
        block: bool = True,
    ) -> Optional[Path]:
        """Write the full training state for ``step``; returns the committed path when blocking.

        Either way older checkpoints are pruned in a background thread after the new one is
        committed and read back; ``wait()`` (or the next save) joins it.
        block=False copies the state into CPU memory, returns, and writes in a background
        thread; a save still in flight is waited for first, so at most one is ever in flight.
        """
        if step < 0:
            raise ValueError("step must be >= 0")
        self.wait()  # ordering, one in flight, and a background error surfaces here
        payload: Dict[str, Any] = {
            "format": FORMAT,
            "step": int(step),
            "epoch": None if epoch is None else int(epoch),
            "metric": None if metric is None else float(metric),
            "saved_at": time.time(),
            "torch_version": _torch_version(),
            "model": model.state_dict() if model is not None else None,
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "sampler": sampler.state_dict() if sampler is not None else None,
            "rng": _capture_rng(),
            "extra": dict(extra) if extra else {},
        }
        self._last_save_mono = time.monotonic()
        if block:
            final = self._commit(payload, int(step))
            # Pruning runs behind the caller: on a filesystem mounted with `discard`, each
            # unlink of a 1 GiB checkpoint is a synchronous TRIM of about a second.
            self._start_background(self._background_prune, (int(step),), f"prune-{step}")
            return final
        copies: List[Tuple[Any, Any]] = []
        staged = _stage_to_cpu(payload, (), self._staging, {}, copies)
        _copy_into_buffers(copies)
        self._start_background(self._background_commit, (staged, int(step)), f"save-{step}")
        return None

    def _start_background(self, target: Callable[..., None], args: Tuple[Any, ...],
                          name: str) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"gpuroom-checkpoint-{name}",
            # Not a daemon: an interpreter that exits without wait() still finishes the write.
            daemon=False,
        )
        with self._lock:
            self._thread = thread
        thread.start()

    def _background_commit(self, payload: Dict[str, Any], step: int) -> None:
        try:
            self._commit(payload, step)
            self._prune()
        except BaseException as exc:  # handed to the training thread by wait()
            with self._lock:
                self._bg_error = exc
            _warn(f"background save of step {step} failed: {exc}")

    def _background_prune(self, step: int) -> None:
        try:
            self._prune()
        except BaseException as exc:
            with self._lock:
                self._bg_error = exc
            _warn(f"pruning after step {step} failed: {exc}")

    def wait(self) -> None:
        """Block until an in-flight save is committed; raise its error if it failed."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
            with self._lock:
                if self._thread is thread:
                    self._thread = None
        with self._lock:
            error, self._bg_error = self._bg_error, None
        if error is not None:
            if isinstance(error, CheckpointError):
                raise CheckpointError(f"an earlier background save failed: {error}") from error
            raise CheckpointError(
                f"an earlier background save into {self.directory} failed: "
                f"{type(error).__name__}: {error}"
            ) from error

    @property
    def in_flight(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def _commit(self, payload: Dict[str, Any], step: int) -> Path:
        started = time.monotonic()
        final = self._write(payload, step)
        self._record_save(final, step, time.monotonic() - started)
        return final

    def _record_save(self, final: Path, step: int, seconds: float) -> None:
        """Write SAVE_RECORD (tmp, then replace): the probe reports C from it. A failure to
        write it never fails the save it describes."""
        record = {"step": step, "path": final.name, "save_s": round(seconds, 3),
                  "at": time.time()}
        # Named beside the record, not ".tmp.": only the checkpoint's own temps are that.
        tmp = self.directory / f"{SAVE_RECORD}.{os.getpid()}.new"
        try:
            tmp.write_text(json.dumps(record))
            os.replace(str(tmp), str(self.directory / SAVE_RECORD))
        except OSError as exc:
            _unlink_quietly(tmp)
            _warn(f"could not record the save time in {self.directory}: {exc}")

    def _write(self, payload: Dict[str, Any], step: int) -> Path:
        import torch

        final = self.path_for(step)
        tmp = self.directory / f".{final.name}.tmp.{os.getpid()}.{secrets.token_hex(4)}"
        _, needed = _tensor_bytes(payload)
        needed += _CONTAINER_SLACK_BYTES
        free = _free_bytes(self.directory)
        if free is not None and needed > free:
            raise self._disk_full(step, needed, free, None)
        # Writers hold a shared flock on the directory; Checkpointer() removes temps only
        # under the exclusive one, so a live writer's temp is never taken for a stale one.
        dir_fd = os.open(str(self.directory), os.O_RDONLY)
        try:
            if fcntl is not None:
                fcntl.flock(dir_fd, fcntl.LOCK_SH)
            try:
                # O_EXCL on a fresh name, never O_TRUNC: ext4 flushes a file truncated by
                # open(O_TRUNC) at close (auto_da_alloc). 0666 & ~umask (0644 typical), not
                # mkstemp's 0600. O_BINARY: Windows' default text mode rewrites every \n.
                flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
                         | getattr(os, "O_BINARY", 0))
                fd = os.open(str(tmp), flags, 0o666)
                try:
                    writer = _WritebackWriter(fd)
                    torch.save(payload, cast(IO[bytes], writer))  # uses write and flush
                    writer.start_writeback()  # the tail that did not fill a chunk
                    os.fsync(fd)  # durability; waits only for the write-back still in flight
                finally:
                    os.close(fd)
            except BaseException as exc:
                _release_frames(exc)
                written = _size_or_zero(tmp)
                free_after = _free_bytes(self.directory)
                _unlink_quietly(tmp)
                if not isinstance(exc, Exception):
                    raise
                if _looks_like_disk_full(exc, needed - written, free_after):
                    raise self._disk_full(step, needed, _free_bytes(self.directory), exc) from exc
                raise CheckpointError(
                    f"checkpoint step {step} not saved to {self.directory}: "
                    f"{type(exc).__name__}: {exc}. The previous checkpoint is untouched."
                ) from exc
            try:
                os.replace(str(tmp), str(final))
            except BaseException:
                _unlink_quietly(tmp)
                raise
            os.fsync(dir_fd)  # makes the rename durable
        finally:
            os.close(dir_fd)  # also drops the shared lock
        self._after_commit(final, step, payload.get("metric"))
        return final

    def _disk_full(
        self, step: int, needed: int, free: Optional[int], exc: Optional[BaseException]
    ) -> CheckpointError:
        previous = self.checkpoints()
        kept = f"{previous[-1][1].name} is intact" if previous else "there is no earlier checkpoint"
        if exc is None:
            cause, temp = " (checked before writing)", "nothing was written"
        else:
            cause, temp = f" ({type(exc).__name__}: {exc})", "the partial temp file was removed"
        return CheckpointError(
            f"checkpoint step {step} not saved: {self.directory} is out of space{cause}. "
            f"Needs about {_human(needed)}, {_human(free)} free; {kept} and {temp}. "
            f"Fix: free space on that mount (check `df -h` and `df -i`, delete "
            f"stale checkpoints or caches), lower keep= (now {self.keep}), or point the "
            f"Checkpointer at a larger durable directory (U6)."
        )

    def _after_commit(self, final: Path, step: int, metric: Optional[float]) -> None:
        # Principle 3: read the new file back before anything older is released; pruning
        # starts only once this returned.
        try:
            head = _torch_load(final, "cpu", self.weights_only, mmap=True)
            if not isinstance(head, dict) or head.get("step") != step:
                raise CheckpointError("read back a different step")
        except Exception as exc:
            if _is_weights_only_refusal(exc):
                # Caught now, at save time, rather than on the resume that needs the file.
                raise CheckpointError(
                    f"{final} was written but holds Python objects the safe loader "
                    f"(weights_only=True) refuses: keep extras to tensors and plain values, or "
                    f"pass Checkpointer(..., weights_only=False) if you trust this directory. "
                    f"Nothing was pruned. ({exc})"
                ) from exc
            raise CheckpointError(
                f"{final} was written but does not load back ({exc}); older checkpoints were "
                f"kept and nothing was pruned"
            ) from exc
        self._remember_metric(final, metric)

    # -- keep policy -------------------------------------------------------------------------

    def _remember_metric(self, path: Path, metric: Optional[float]) -> None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        self._metric_cache[path.name] = ((st.st_size, st.st_mtime_ns), metric)

    def _metric_of(self, path: Path) -> Optional[float]:
        """The metric a checkpoint was saved with: cached, else read by an mmap load (cheap)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self._metric_cache.get(path.name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            head = _torch_load(path, "cpu", self.weights_only, mmap=True)
            metric = head.get("metric") if isinstance(head, dict) else None
        except Exception:  # an unreadable file has no metric and is never "best"
            metric = None
        self._metric_cache[path.name] = (stamp, metric)
        return metric

    def best(self) -> Optional[Path]:
        """The checkpoint with the best metric under ``best_mode``, or None."""
        if self.best_mode is None:
            return None
        scored = [(m, step, p) for step, p in self.checkpoints()
                  if (m := self._metric_of(p)) is not None and not math.isnan(m)]
        if not scored:
            return None
        if self.best_mode == "min":
            return min(scored, key=lambda t: (t[0], -t[1]))[2]
        return max(scored, key=lambda t: (t[0], t[1]))[2]

    def _prune(self) -> None:
        """Delete all but the newest ``keep`` and the best; runs only after a verified commit."""
        entries = self.checkpoints()
        keep = {p for _, p in entries[-self.keep :]}
        best = self.best()
        if best is not None:
            keep.add(best)
        removed = False
        for _, path in entries:
            if path in keep:
                continue
            try:
                path.unlink()
                removed = True
            except FileNotFoundError:
                continue
            except OSError as exc:
                _warn(f"could not prune {path}: {exc}")
            self._metric_cache.pop(path.name, None)
        if removed:
            _fsync_dir(self.directory)

    # -- load --------------------------------------------------------------------------------

    def load_latest(
        self,
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        sampler: Any = None,
        map_location: Any = "cpu",
        restore_rng: bool = True,
    ) -> Optional[Resume]:
        """Restore the newest checkpoint that loads; None when the directory has none.

        A file that fails to load is passed over for the next newest, reported in
        ``Resume.skipped`` and on stderr, and renamed to ``*.corrupt`` so it neither shadows
        newer saves nor gets pruned as if it were good. If checkpoints exist and none loads,
        this raises instead of silently restarting the run from step 0.
        """
        self.wait()
        skipped: List[Tuple[str, str]] = []
        entries = self.checkpoints()
        for step, path in reversed(entries):
            try:
                payload = _torch_load(path, map_location, self.weights_only)
                if not isinstance(payload, dict) or payload.get("format") != FORMAT:
                    raise ValueError("not a gpuroom checkpoint")
                if payload.get("step") != step:
                    raise ValueError(f"file name says step {step}, content {payload.get('step')}")
            except Exception as exc:
                if _is_weights_only_refusal(exc):
                    raise CheckpointError(
                        f"{path} is intact but holds Python objects the safe loader refuses "
                        f"({exc}). Keep extras to tensors and plain values, or pass "
                        f"Checkpointer(..., weights_only=False) if you trust this directory."
                    ) from exc
                if isinstance(exc, MemoryError) or "out of memory" in str(exc):
                    raise CheckpointError(f"out of memory loading {path}: {exc}") from exc
                reason = f"{type(exc).__name__}: {exc}".strip()
                skipped.append((str(path), reason))
                _warn(f"skipping {path}: {reason}")
                continue
            self._apply(path, payload, model=model, optimizer=optimizer, scheduler=scheduler,
                        sampler=sampler, restore_rng=restore_rng)
            for bad, _ in skipped:
                self._quarantine(Path(bad))
            self.last_skipped = skipped
            self._last_save_mono = time.monotonic()
            self._remember_metric(path, payload.get("metric"))
            return Resume(
                step=int(payload["step"]),
                epoch=payload.get("epoch"),
                path=str(path),
                extra=dict(payload.get("extra") or {}),
                metric=payload.get("metric"),
                skipped=skipped,
            )
        self.last_skipped = skipped
        if skipped:
            raise CheckpointError(
                f"{len(skipped)} checkpoint(s) in {self.directory} and none loads (newest: "
                f"{skipped[0][1]}). Refusing to restart from step 0 over them: check with "
                f"`python -m gpuroom.remote.checkpoint verify PATH`, then move them aside."
            )
        return None

    def _apply(self, path: Path, payload: Dict[str, Any], *, model: Any, optimizer: Any,
               scheduler: Any, sampler: Any, restore_rng: bool) -> None:
        targets = (("model", model), ("optimizer", optimizer), ("scheduler", scheduler),
                   ("sampler", sampler))
        for section, target in targets:
            if target is None:
                continue
            state = payload.get(section)
            if state is None:
                raise CheckpointError(f"{path} has no {section} state to restore")
            try:
                target.load_state_dict(state)
            except Exception as exc:
                # The file loaded: an older one would not fit either, so do not skip it.
                raise CheckpointError(f"{path} loaded, but restoring the {section} failed: "
                                      f"{exc}") from exc
        if restore_rng and payload.get("rng"):
            _restore_rng(payload["rng"])

    def _quarantine(self, path: Path) -> None:
        target = path.with_name(f"{path.name}.corrupt")
        try:
            os.replace(str(path), str(target))
        except OSError as exc:
            _warn(f"could not move aside {path}: {exc}")
            return
        _warn(f"moved unloadable {path.name} aside as {target.name}")


def install_signal_handlers(
    ckpt: Checkpointer, signals: Optional[Sequence[Union[int, str]]] = None
) -> Dict[int, Any]:
    """Module-level spelling of ``Checkpointer.install_signal_handlers``."""
    return ckpt.install_signal_handlers(signals)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _torch_version() -> str:
    import torch

    return str(torch.__version__)  # TorchVersion is a str subclass weights_only would refuse


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _release_frames(exc: BaseException) -> None:
    """Drop the locals of the frames a failed torch.save left in the traceback.

    Those frames hold the C++ zip writer, and with it the temp file open: unlinked or not, a
    full disk stays full for as long as the caller keeps the exception (U6).
    """
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # skips frames still executing
        current = current.__cause__ or current.__context__


def _looks_like_disk_full(exc: BaseException, remaining: int, free_after: Optional[int]) -> bool:
    """torch.save's C++ writer loses errno ("file write failed", "unexpected pos", U6)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return True
    text = str(exc)
    if "No space left" in text or "Disk quota" in text:
        return True
    return free_after is not None and free_after < max(remaining, _MIB)


# ---------------------------------------------------------------------------------------------
# verify CLI


def _safe_load(path: Path) -> Any:
    """torch.load(weights_only=True) allowing safe_globals() (where torch has the mechanism,
    2.5 and later; an older torch loads with weights_only alone)."""
    import torch

    allowing = getattr(torch.serialization, "safe_globals", None)
    if allowing is None:
        return _torch_load(path, "cpu", weights_only=True)
    with allowing(safe_globals()):
        return _torch_load(path, "cpu", weights_only=True)


def describe(path: PathLike) -> Dict[str, Any]:
    """What a checkpoint file holds; raises on a truncated or corrupt file, or one that holds
    an object the safe load does not allow.

    Never a full unpickle: verify is run on files pulled from boxes and shared directories,
    and a full unpickle of a tampered file runs arbitrary code. What the common trainers
    write besides tensors is allowed by name (SAFE_GLOBAL_NAMES).
    """
    p = Path(path)
    payload = _safe_load(p)
    count, nbytes = _tensor_bytes(payload)
    info: Dict[str, Any] = {
        "path": str(p),
        "file_bytes": p.stat().st_size,
        "tensors": count,
        "tensor_bytes": nbytes,
        "weights_only": True,
    }
    if isinstance(payload, dict) and payload.get("format") == FORMAT:
        rng = payload.get("rng") or {}
        info.update(
            format=FORMAT,
            step=payload.get("step"),
            epoch=payload.get("epoch"),
            metric=payload.get("metric"),
            saved_at=payload.get("saved_at"),
            torch_version=payload.get("torch_version"),
            sections=[k for k in ("model", "optimizer", "scheduler", "sampler", "rng", "extra")
                      if payload.get(k)],
            model_keys=len(payload.get("model") or {}),
            rng={"python": "python" in rng, "numpy": "numpy" in rng, "torch": "torch" in rng,
                 "cuda_devices": len(rng.get("cuda") or [])},
            sampler=payload.get("sampler"),
            extra_keys=sorted(str(k) for k in (payload.get("extra") or {})),
        )
    else:
        info.update(
            format="torch (not a gpuroom checkpoint)",
            keys=sorted(str(k) for k in payload) if isinstance(payload, dict) else [],
        )
    return info


def _format_info(info: Dict[str, Any]) -> str:
    lines = [f"{info['path']}: OK ({info['format']})",
             f"  file      {_human(info['file_bytes'])}",
             f"  tensors   {info['tensors']} ({_human(info['tensor_bytes'])})"]
    if info["format"] == FORMAT:
        saved = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["saved_at"] or 0))
        rng = info["rng"]
        present = [k for k in ("python", "numpy", "torch") if rng[k]]
        if rng["cuda_devices"]:
            present.append(f"cuda x{rng['cuda_devices']}")
        lines += [
            f"  step      {info['step']}   epoch {info['epoch']}   metric {info['metric']}",
            f"  saved     {saved} with torch {info['torch_version']}",
            f"  sections  {', '.join(info['sections']) or '(none)'}",
            f"  model     {info['model_keys']} keys",
            f"  rng       {', '.join(present) or 'none'}",
            f"  sampler   {info['sampler']}",
            f"  extra     {', '.join(info['extra_keys']) or '(none)'}",
        ]
    else:
        lines.append(f"  keys      {', '.join(info['keys']) or '(not a dict)'}")
    lines.append("  loaded with weights_only=" + str(info["weights_only"]))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuroom.remote.checkpoint")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="load a checkpoint and print what it holds")
    verify.add_argument("path")
    verify.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    emit: Callable[[str], Any] = sys.stdout.write
    refused: List[str] = []
    try:
        info = describe(args.path)
    except FileNotFoundError:
        message, kind, code = f"{args.path}: no such file", "missing", 2
    except Exception as exc:
        if _is_weights_only_refusal(exc):
            refused = refused_globals(exc)
            message = (f"{args.path}: intact, but holds {', '.join(refused) or 'an object'}, "
                       "which the safe load does not allow: unpickled, it could run code")
            kind, code = "refused", 3
        else:
            message = (f"{args.path}: CORRUPT or truncated, do not resume from it "
                       f"({type(exc).__name__}: {_load_error_words(exc)})")
            kind, code = "corrupt", 1
    else:
        emit((json.dumps(info, sort_keys=True) if args.json else _format_info(info)) + "\n")
        return 0
    if args.json:
        emit(json.dumps({"path": args.path, "ok": False, "error": message, "kind": kind,
                         "refused": refused}) + "\n")
    sys.stderr.write(message + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
