"""The ONE reader of the box helper's snapshot: typed, immutable views of the raw JSON document.

The helper (remote/probe.py and the collectors it runs: hostinfo, gpu, kernel, vram, queue,
queue_slurm) answers one JSON document per poll. Every other module on the jump host reads it
through here, so a field's name, its older spellings and its type are written once. The
fleet keeps the raw dict (recordings and ``gpuroom probe`` print it as the box sent it);
``HostState.view`` parses it once per snapshot.

Reading is declarative: each view's fields say where they come from (``key()``: the current
key, the older spellings still accepted, how the value is read; ``nested()`` for a view), so
tests/system/test_snapshot_schema.py can enumerate every key this module reads and check it
against what the real helper writes.

Nothing here raises on the box's data: a missing section, a wrong type or a torn value reads
as None (or an empty tuple). Text stays as the box wrote it: it is untrusted, and what reaches
a terminal goes through gpuroom.tui.sanitize in the presenters.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from gpuroom.remote.queue_events import HOST_IN_FIX, QUEUE_ID_RE, SIGNAL_NAME_RE
from gpuroom.remote.vram import display_only

RawSnapshot = dict[str, Any]

# ----------------------------------------------------------------------------- leaf values

# The number rule, the same for every field: JSON numbers are numbers, a bool is not (True
# would otherwise read as 1), NaN and infinities are not, and a string is a number when
# float() reads it to a finite value (recordings of older helpers carry "55.5").


def number(value: Any) -> float | None:
    """A finite number as float, or None (see the number rule above)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            n = float(value)
        except OverflowError:  # json reads an integer of any length; a float has 1e308
            return None
    elif isinstance(value, str):
        try:
            n = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return n if math.isfinite(n) else None


def integer(value: Any) -> int | None:
    """The number rule, truncated to an int."""
    n = number(value)
    return None if n is None else int(n)


def text(value: Any) -> str | None:
    """A string as the box wrote it; a number (not a bool) as its decimal text; else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


def queue_identity(value: Any) -> str | None:
    """A queue's identity (remote/queue_events.py QUEUE_ID_FILE) as the helper mints it;
    anything else is no identity: the queue then owns nothing kept on this jump host."""
    return value if isinstance(value, str) and QUEUE_ID_RE.fullmatch(value) else None


def exact_int(value: Any) -> int | None:
    """A JSON integer (not a bool, not a string of one); else None. An exit code is one, and
    a string in its place is a job writing the queue's file (issue 18), not a number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def signal_name(value: Any) -> str | None:
    """A signal's short name ("SIGKILL"), as remote/queue_events.py exit_fields checks it;
    anything else (escape sequences, markup, a long text) is None."""
    if isinstance(value, str) and SIGNAL_NAME_RE.match(value):
        return value
    return None


def flag(value: Any) -> bool:
    """JSON true, or a non-zero number (the Slurm batch script writes 0/1); else false."""
    if isinstance(value, bool):
        return value
    n = number(value) if not isinstance(value, str) else None
    return bool(n)


def opaque(value: Any) -> Any:
    """Passed back to the box as it came (the kernel cursor): never looked into here."""
    return value


def texts(value: Any) -> tuple[str, ...]:
    """A list of strings (non-strings dropped); anything else is empty."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def integers(value: Any) -> tuple[int, ...] | None:
    """A list of ints (GPU indices); None when absent or not a list of ints."""
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return tuple(value)


def string_map(value: Any) -> Mapping[str, str]:
    """An object of strings (a job's env); other entries dropped."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def secret_refs(value: Any) -> tuple[tuple[str, str], ...]:
    """A job's pushed secrets as (env var, secret name) pairs; their files and values stay on
    the box. Entries that are not {name, env} strings are dropped."""
    if not isinstance(value, list):
        return ()
    return tuple((v["env"], v["name"]) for v in value if isinstance(v, Mapping)
                 and isinstance(v.get("env"), str) and isinstance(v.get("name"), str))


def command_line(value: Any) -> str:
    """A job's command as one line: an argv list shell-quoted, or an older helper's string."""
    if isinstance(value, list):
        return shlex.join(str(a) for a in value)
    return text(value) or ""


def reason_names(value: Any) -> tuple[str, ...]:
    """Clock-event reasons as snake_case names: a list of names, or {name: active} (older
    recordings). "SW Power Cap" and "sw-power-cap" read as sw_power_cap."""
    if isinstance(value, Mapping):
        value = [k for k, v in value.items() if v]
    if not isinstance(value, list):
        return ()
    out = []
    for reason in value:
        if not isinstance(reason, str):
            continue
        name = reason.strip().lower().replace(" ", "_").replace("-", "_")
        if name:
            out.append(name)
    return tuple(out)


# ----------------------------------------------------------------------------- the table

# Where the real helper writes a key, for tests/system/test_snapshot_schema.py: "probe" on a
# poll of a box (the queue's job keys once a job has run), "failure" only on a failure path
# (a missing mount, a collector that raised), "slurm" on jobs of a Slurm queue
# (tests/data/slurm/session.jsonl), "kernel" on kernel events (the dmesg captures), "vram" on
# a process holding /dev/nvidia* (remote/vram.py's scan), "preempt" on a spot queue's
# preemption notice (tests/system/test_preempt_ssh.py), "code" on an attempt launched with
# script files in a git work tree (tests/system/test_drift_ssh.py).
# leftover: what one hostile job leaves (an unreadable log, a surviving daemon)
Origin = Literal["probe", "failure", "slurm", "kernel", "vram", "preempt", "code", "leftover"]
Shape = Literal["leaf", "one", "maybe", "many", "named"]


@dataclass(frozen=True, slots=True)
class Key:
    """One attribute of a view: the helper's current key and the older spellings accepted."""

    attr: str
    key: str
    read: Callable[[Any], Any] = opaque
    old: tuple[str, ...] = ()
    view: type[View] | None = None
    shape: Shape = "leaf"
    origin: Origin = "probe"

    def pick(self, raw: Mapping[str, Any]) -> Any:
        """The first present, non-null value among the current key and its old spellings."""
        for key in (self.key, *self.old):
            value = raw.get(key)
            if value is not None:
                return value
        return None


_SPEC = "gpuroom_key"  # the dataclass field metadata that holds an attribute's Key


def key(read: Callable[[Any], Any] = opaque, *, old: tuple[str, ...] = (),
        current: str | None = None, origin: Origin = "probe") -> Any:
    """Declare a view's attribute: read from the helper's key ``current`` (default: the
    attribute's own name) or an ``old`` spelling, through ``read``."""
    return dataclasses.field(metadata={_SPEC: Key("", current or "", read, old, None, "leaf",
                                                  origin)})


def nested(view: type[View], shape: Shape = "one", *, old: tuple[str, ...] = (),
           current: str | None = None, origin: Origin = "probe") -> Any:
    """Declare an attribute that is a view (``one``/``maybe``), a tuple of them (``many``) or
    an object of name -> view (``named``)."""
    return dataclasses.field(metadata={_SPEC: Key("", current or "", opaque, old, view, shape,
                                                  origin)})


V = TypeVar("V", bound="View")


class View:
    """Base of every view: ``read`` fills the dataclass fields from their ``key()``s."""

    __slots__ = ()

    @classmethod
    def keys(cls) -> tuple[Key, ...]:
        """Every attribute's Key, in field order (built once per class)."""
        cached = _KEYS.get(cls)
        if cached is None:
            cached = tuple(
                dataclasses.replace(f.metadata[_SPEC], attr=f.name,
                                    key=f.metadata[_SPEC].key or f.name)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if _SPEC in f.metadata)
            _KEYS[cls] = cached
        return cached

    @classmethod
    def read(cls: type[V], raw: Any) -> V:
        """The view of ``raw``; a non-object reads as a view whose fields are all empty."""
        src: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        values = {k.attr: _convert(k, k.pick(src)) for k in cls.keys()}
        return cls(**values)


_KEYS: dict[type[View], tuple[Key, ...]] = {}


def _convert(k: Key, value: Any) -> Any:
    if k.view is None:
        return k.read(value)
    if k.shape == "one":
        return k.view.read(value)
    if k.shape == "maybe":
        return k.view.read(value) if isinstance(value, Mapping) else None
    if k.shape == "many":
        if not isinstance(value, list):
            return ()
        return tuple(k.view.read(v) for v in value if isinstance(v, Mapping))
    # "named": an object of name -> view; the name goes into the view's ``name``.
    if not isinstance(value, Mapping):
        return ()
    named: list[Any] = [k.view.read(v) for v in value.values() if isinstance(v, Mapping)]
    names = [str(n) for n, v in value.items() if isinstance(v, Mapping)]
    return tuple(dataclasses.replace(view, name=n) for view, n in zip(named, names, strict=True))


def schema_keys(view: type[View], prefix: str = "",
                under: Origin = "probe") -> Iterator[tuple[str, Key]]:
    """Every key ``view`` reads, depth first, as ("gpus[].processes[].pid", Key). A key under
    a parent written only in some situation (a Slurm job's ``telemetry``) takes that
    parent's origin: it is written only then too."""
    for own in view.keys():
        k = own if under == "probe" else dataclasses.replace(own, origin=under)
        path = f"{prefix}{k.key}"
        yield path, k
        if k.view is not None:
            sub = {"many": "[].", "named": "{}."}.get(k.shape, ".")
            yield from schema_keys(k.view, path + sub, k.origin)


def keys_seen(view: type[View], objs: Iterable[Any], prefix: str = "") -> set[str]:
    """Which keys ``view`` reads occur, in their current spelling, in the raw objects ``objs``
    (named as schema_keys names them). A key whose parent never occurs is not seen."""
    found = [o for o in objs if isinstance(o, Mapping)]
    out: set[str] = set()
    for k in view.keys():
        values = [o[k.key] for o in found if k.key in o]
        path = f"{prefix}{k.key}"
        if values:
            out.add(path)
        if k.view is None:
            continue
        if k.shape in ("one", "maybe"):
            children = values
            sub = "."
        elif k.shape == "many":
            children = [x for v in values if isinstance(v, list) for x in v]
            sub = "[]."
        else:
            children = [x for v in values if isinstance(v, Mapping) for x in v.values()]
            sub = "{}."
        out |= keys_seen(k.view, children, path + sub)
    return out


# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True)
class Helper(View):
    """Which helper answered (the teardown gate compares its hash with the deployed one)."""

    version: str | None = key(text)
    sha256: str | None = key(text)


@dataclass(frozen=True, slots=True)
class Host(View):
    """remote/hostinfo.py host_facts: identity and the box's clock."""

    hostname: str | None = key(text)
    boot_id: str | None = key(text)
    uptime_s: float | None = key(number)
    time: float | None = key(number)  # the box's time.time() when probed
    cpu_count: float | None = key(number)
    # 1, 5, 15 min, host-wide (a container's neighbours count too, U40)
    loadavg_host: tuple[float, ...] = key(lambda v: tuple(
        n for n in (number(x) for x in (v if isinstance(v, list) else [])) if n is not None))


@dataclass(frozen=True, slots=True)
class Cgroup(View):
    """remote/hostinfo.py cgroup_facts (v2 or v1)."""

    version: int | None = key(integer)
    memory_current: float | None = key(number)
    memory_max: float | None = key(number)
    oom_kill: float | None = key(number)
    cpu_quota_vcpus: float | None = key(number)
    cpu_usage_usec: float | None = key(number)  # CPU time so far; two polls give the rate


@dataclass(frozen=True, slots=True)
class Disk(View):
    """statvfs of one watched path (remote/hostinfo.py disk_facts), or why it failed."""

    path: str | None = key(text)
    real_path: str | None = key(text)
    device: int | None = key(integer)
    total_bytes: float | None = key(number)
    free_bytes: float | None = key(number)  # available to a job (statvfs f_bavail)
    bfree_bytes: float | None = key(number)  # free, root's reserve included (f_bfree)
    total_inodes: float | None = key(number)
    free_inodes: float | None = key(number)
    ffree_inodes: float | None = key(number)  # free, reserved included (f_ffree)
    error: str | None = key(text, origin="failure")

    @property
    def where(self) -> str:
        """The resolved path when the box gave one, else the path as asked."""
        return self.real_path or self.path or ""

    @property
    def missing(self) -> bool:
        """The watched path does not exist on the box: the volume meant to be there is not
        mounted (remote/hostinfo.py disk_facts names the OSError's class first)."""
        return (self.error or "").startswith("FileNotFoundError")

    # df's arithmetic (coreutils), so the pane headed "df -h | df -i" agrees with df to the
    # point: used = total - free including reserved; Use% = used / (used + available),
    # rounded up. On ext4 the 5 % root reserve made total-based percentages tens of points
    # off. An older helper sent no reserve figures: then used = total - available.

    @property
    def used_bytes(self) -> float | None:
        free = self.bfree_bytes if self.bfree_bytes is not None else self.free_bytes
        return None if self.total_bytes is None or free is None else self.total_bytes - free

    @property
    def bytes_pct(self) -> float | None:
        """``df``'s Use%."""
        return df_pct(self.used_bytes, self.free_bytes)

    @property
    def inodes_left(self) -> float | None:
        """``df -i``'s IFree: every free inode (df counts the reserved ones as available)."""
        return self.ffree_inodes if self.ffree_inodes is not None else self.free_inodes

    @property
    def used_inodes(self) -> float | None:
        free = self.inodes_left
        return None if self.total_inodes is None or free is None else self.total_inodes - free

    @property
    def inodes_pct(self) -> float | None:
        """``df -i``'s IUse%."""
        return df_pct(self.used_inodes, self.inodes_left)


def df_pct(used: float | None, available: float | None) -> float | None:
    """used / (used + available) in whole percent rounded up, as df prints it; None where df
    prints "-" (nothing used and nothing available: btrfs and some NFS have no inode count)."""
    if used is None or available is None or used + available <= 0:
        return None
    u, a = int(used), int(available)
    return float(-(-u * 100 // (u + a)))


@dataclass(frozen=True, slots=True)
class GpuProcess(View):
    """A process on one GPU, from NVML or nvidia-smi."""

    pid: int | None = key(integer)
    type: str | None = key(text)
    name: str | None = key(text)
    used_mib: float | None = key(number)
    comm: str | None = key(text)
    user: str | None = key(text)  # the box's user name (remote/vram.py proc_owner)
    pgid: int | None = key(integer)  # a gpuroom job's processes share its attempt's pid here

    @property
    def display_only(self) -> bool:
        """Graphics only (type G: Xorg, gnome-shell): it shares a desktop's cards without
        being a run a job collides with (GEN7)."""
        return display_only(self.type)


@dataclass(frozen=True, slots=True)
class Gpu(View):
    """One GPU (remote/gpu.py _EMPTY_GPU: the same keys from NVML and nvidia-smi)."""

    index: int | None = key(integer)
    name: str | None = key(text)
    clock_sm_mhz: float | None = key(number, old=("sm_clock_mhz",))
    clock_sm_max_mhz: float | None = key(number, old=("sm_clock_max_mhz",))
    clock_mem_mhz: float | None = key(number, old=("mem_clock_mhz",))
    clock_mem_max_mhz: float | None = key(number, old=("mem_clock_max_mhz",))
    power_w: float | None = key(number)
    power_limit_w: float | None = key(number)
    temp_c: float | None = key(number)
    util_gpu_pct: float | None = key(number, old=("util_gpu",))
    util_mem_pct: float | None = key(number, old=("util_mem",))
    mem_used_mib: float | None = key(number)
    mem_total_mib: float | None = key(number)
    # U22: a count that rises within one boot is a GPU dying (NVML / nvidia-smi, volatile)
    ecc_volatile_uncorrected: float | None = key(number)
    # every active reason, idle included
    clock_event_reasons: tuple[str, ...] = key(reason_names,
                                               old=("clock_reasons", "throttle_reasons"))
    processes: tuple[GpuProcess, ...] = nested(GpuProcess, "many")


@dataclass(frozen=True, slots=True)
class KernelEvent(View):
    """An Xid, gpu_lost or OOM-kill line (remote/kernel.py); which keys depends on ``kind``."""

    kind: str | None = key(text, origin="kernel")
    code: int | None = key(integer, origin="kernel")  # Xid code
    pci: str | None = key(text, origin="kernel")
    pid: int | None = key(integer, origin="kernel")
    process: str | None = key(text, origin="kernel")
    memcg: bool = key(flag, origin="kernel")  # OOM: inside a memory cgroup
    line: str | None = key(text, origin="kernel")
    ts: float | None = key(number, origin="kernel")


@dataclass(frozen=True, slots=True)
class Kernel(View):
    """The kernel log section: events after the cursor and whether the log could be read."""

    log: str | None = key(text)  # ok | partial | denied | error | unavailable
    detail: str | None = key(text)
    events: tuple[KernelEvent, ...] = nested(KernelEvent, "many")
    cursor: Any = key(opaque)  # handed back to the box verbatim on the next poll

    @property
    def readable(self) -> bool:
        return self.log in ("ok", "partial")


@dataclass(frozen=True, slots=True)
class VramHolder(View):
    """A process holding /dev/nvidia* that the GPU process list does not show (U11)."""

    pid: int | None = key(integer, origin="vram")
    comm: str | None = key(text, origin="vram")
    state: str | None = key(text, origin="vram")
    cmdline: str | None = key(text, origin="vram")
    user: str | None = key(text, origin="vram")


@dataclass(frozen=True, slots=True)
class Idle(View):
    """Since when the box has done no work, on its own clock (remote/idle.py)."""

    idle_since: float | None = key(number)  # None while busy, or when nothing is known
    now: float | None = key(number)  # the box's time.time() when it answered
    busy: str | None = key(text)  # job | foreign | gpu while busy
    basis: str | None = key(text)  # job_end | gpu | boot: which record idle_since came from


@dataclass(frozen=True, slots=True)
class SectionError(View):
    """A collector that raised: the rest of the document is still there (remote/probe.py)."""

    section: str | None = key(text, origin="failure")
    error: str | None = key(text, origin="failure")


# ----------------------------------------------------------------------------- the queue


@dataclass(frozen=True, slots=True)
class SlurmRun(View):
    """One run of a Slurm batch script (one per requeue), as the script recorded it."""

    restart: int | None = key(integer, origin="slurm")
    exit_code: int | None = key(integer, origin="slurm")
    requeue: bool = key(flag, origin="slurm")
    warned: bool = key(flag, origin="slurm")
    end: float | None = key(number, origin="slurm")


@dataclass(frozen=True, slots=True)
class ScriptFact(View):
    """A script argument of a job as it was at launch (remote/drift.py code_facts)."""

    path: str | None = key(text)
    sha256: str | None = key(text)
    size: int | None = key(integer)
    mtime: float | None = key(number)


@dataclass(frozen=True, slots=True)
class GitFact(View):
    """The job's cwd's git HEAD at launch, and whether tracked files differed from it."""

    head: str | None = key(text)
    dirty: bool = key(flag)


@dataclass(frozen=True, slots=True)
class CodeFacts(View):
    scripts: tuple[ScriptFact, ...] = nested(ScriptFact, "many")
    git: GitFact | None = nested(GitFact, "maybe")


@dataclass(frozen=True, slots=True)
class Checkpoint(View):
    """The newest file under a running job's checkpoint dir (liveness by artifact, U43)."""

    path: str | None = key(text)
    size: float | None = key(number)
    mtime: float | None = key(number)
    save_s: float | None = key(number)  # how long its last save took (C), when recorded
    step: int | None = key(integer)  # as its name says (checkpoint-20, step=5); None: unknown
    # where it was found: "declared" (--ckpt), "discovered" under the cwd, or "gpuroom's"
    # ($GPUROOM_CKPT_DIR); "file" or "dir" (HF's checkpoint-N/)
    source: str | None = key(text)
    kind: str | None = key(text)


@dataclass(frozen=True, slots=True)
class Attempt(View):
    """One launch of a job (remote/queue_events.py fold; queue_slurm.py for Slurm)."""

    attempt: int | None = key(integer)
    boot_id: str | None = key(text)
    pid: int | None = key(integer)
    start: float | None = key(number)
    end: float | None = key(number)
    exit_code: int | None = key(exact_int)
    signal: str | None = key(signal_name)  # its name, "SIGKILL" (remote/queue_runner.py)
    duration: float | None = key(number)
    end_reason: str | None = key(text)
    gpus: tuple[int, ...] | None = key(integers)  # the GPU indices it was pinned to
    # ``pid`` is the ``queue _exec`` wrapper; the kernel kills the training process under it.
    child_pid: int | None = key(integer)
    pids: tuple[int, ...] | None = key(integers)  # the job's processes the runner saw
    cgroup: str | None = key(text)  # the job's own memory cgroup, read at launch
    oom_kills: int | None = key(integer)  # that cgroup's oom_kill rise while the attempt ran
    error_line: str | None = key(text)  # the log's last error line when a failed attempt ended
    # The newest checkpoint when the attempt ended: what the next attempt should resume from.
    # Only an ended attempt that saw a checkpoint carries it: not every healthy poll
    # (tests/system/test_resume_ssh.py polls one).
    checkpoint: Checkpoint | None = nested(Checkpoint, "maybe", origin="leftover")
    code: CodeFacts | None = nested(CodeFacts, "maybe", origin="code")  # what it launched
    submitted: float | None = key(number, origin="slurm")  # Slurm: when sbatch accepted it
    runs: tuple[SlurmRun, ...] = nested(SlurmRun, "many", origin="slurm")


@dataclass(frozen=True, slots=True)
class CkptUnit(View):
    """One checkpoint the job's own program wrote: a file or a directory (remote/ckptunits.py).
    ``files``: its regular files, relative to the job's cwd, as the pull asks for them."""

    path: str = key(lambda v: text(v) or "")
    kind: str | None = key(text)
    size: float | None = key(number)
    mtime: float | None = key(number)
    step: int | None = key(integer)
    files: tuple[str, ...] = key(texts)


@dataclass(frozen=True, slots=True)
class CkptUnits(View):
    """A job's checkpoint units under its cwd, declared or discovered; ``writing``: those
    still being written, never taken for a checkpoint; ``cut``: why the walk stopped early."""

    source: str | None = key(text)
    cwd: str | None = key(text)
    declared: tuple[str, ...] = key(texts)
    units: tuple[CkptUnit, ...] = nested(CkptUnit, "many")
    writing: tuple[str, ...] = key(texts)
    cut: str | None = key(text)
    outputs: tuple[str, ...] = key(texts)  # the files its --output globs match, under cwd


@dataclass(frozen=True, slots=True)
class LogChunk(View):
    """Log bytes since the jump host's cursor (remote/queue.py read_log_chunk)."""

    offset: int | None = key(integer)
    next_offset: int | None = key(integer)
    inode: int | None = key(integer)
    size: int | None = key(integer)
    data_b64: str | None = key(text)
    reset: bool = key(flag)  # the file was truncated or replaced since the cursor
    mtime: float | None = key(number)  # the box's clock: when the job last wrote its log

    @property
    def data(self) -> bytes | None:
        """The bytes, or None when the box sent something that is not base64."""
        try:
            return base64.b64decode(self.data_b64 or "", validate=True)
        except (binascii.Error, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Survivor(View):
    """A process the runner marked as a job's, alive after the job ended (a daemon that left
    its process group: setsid, double fork)."""

    pid: int | None = key(integer, origin="leftover")
    command: str | None = key(text, origin="leftover")


@dataclass(frozen=True, slots=True)
class Sync(View):
    """A finished job's copy of its outputs to the durable dir (U33)."""

    state: str | None = key(text)  # pending | synced | failed


@dataclass(frozen=True, slots=True)
class ArrayTask(View):
    """One task of a Slurm job array (remote/queue_slurm.py _array_refresh): "j5_3" is task 3
    of array job j5, Slurm's "123_3"."""

    id: str = key(lambda v: text(v) or "", origin="slurm")
    task: str | None = key(text, origin="slurm")
    slurm_id: str | None = key(text, origin="slurm")
    state: str = key(lambda v: text(v) or "", origin="slurm")
    slurm_state: str | None = key(text, origin="slurm")
    reason: str | None = key(text, origin="slurm")
    node: str | None = key(text, origin="slurm")
    elapsed_s: float | None = key(number, origin="slurm")
    exit_code: int | None = key(integer, origin="slurm")


@dataclass(frozen=True, slots=True)
class NodeProbe(View):
    """One node of a running Slurm job, probed from inside its allocation: the same host,
    cgroup, disk and GPU facts a box's probe carries (remote/slurm_telemetry.py node_probe)."""

    host: Host = nested(Host)
    cgroup: Cgroup = nested(Cgroup)
    disks: tuple[Disk, ...] = nested(Disk, "many")
    gpus: tuple[Gpu, ...] = nested(Gpu, "many")
    gpu_error: str | None = key(text)

    def as_snapshot(self) -> Snapshot:
        """The node as a box's snapshot, so the panes and the doctor's GPU, disk and memory
        rules read it as they read a rented box."""
        return Snapshot(schema=None, helper=Helper.read({}), host=self.host,
                        cgroup=self.cgroup, disks=self.disks, gpus=self.gpus,
                        gpu_error=self.gpu_error, kernel=Kernel.read({}), vram_holders=(),
                        queue=None, idle=None, errors=(),
                        sections=frozenset({"host", "cgroup", "disks", "gpus"}))


@dataclass(frozen=True, slots=True)
class JobTelemetry(View):
    """A running Slurm job's last in-allocation probe (remote/slurm_telemetry.py)."""

    t: float | None = key(number)  # when the step answered (the login node's clock)
    nodes: tuple[NodeProbe, ...] = nested(NodeProbe, "many")
    error: str | None = key(text)  # the step failed, hung, or --overlap was refused
    refused: bool = key(flag)  # --overlap refused: the queue no longer asks


@dataclass(frozen=True, slots=True)
class Job(View):
    """One job record of the queue (the probe's and ``queue ls --json``'s share this shape)."""

    id: str = key(lambda v: text(v) or "", old=("job_id",))
    name: str | None = key(text)
    # one of gpuroom.remote.queue_events.STATES; "" when the box gave none
    state: str = key(lambda v: text(v) or "", old=("status",))
    reason: str | None = key(text)
    # Why a queued box job has not started: a slot, GPUs a foreign pid holds (GEN7), the job
    # ahead, no runner (remote/queue.py _waiting); None for any other job
    waiting: str | None = key(text)
    command: str = key(command_line, old=("command", "cmd"), current='argv')
    cwd: str | None = key(text)  # on the box, where the command runs
    env: Mapping[str, str] = key(string_map)
    secrets: tuple[tuple[str, str], ...] = key(secret_refs)  # exported at launch (U34)
    outputs: tuple[str, ...] = key(texts)  # the --output globs copied to the durable dir
    # a running job's script arguments that changed since launch (U2)
    code_changed: tuple[str, ...] = key(texts)
    gpus: int | None = key(integer)
    vram_mib: float | None = key(number)
    attempts: tuple[Attempt, ...] = nested(Attempt, "many")
    priority: int | None = key(integer)  # higher starts first among the queued jobs
    position: int | None = key(integer)  # a queued job's place in line (0: next to start)
    after: tuple[str, ...] = key(texts)  # jobs that must succeed before this one starts
    edited_from: str | None = key(text)  # the job this one is an edited copy of
    log_path: str | None = key(text, current="log")  # the log file's path on the box
    ckpt_dir: str | None = key(text)
    checkpoint: Checkpoint | None = nested(Checkpoint, "maybe")
    ckpts: tuple[str, ...] = key(texts)  # --ckpt: the program's own checkpoint paths
    ckpt_units: CkptUnits | None = nested(CkptUnits, "maybe")
    log_chunk: LogChunk | None = nested(LogChunk, "maybe", old=("log",))
    sync: Sync | None = nested(Sync, "maybe")
    cpu_s: float | None = key(number)  # CPU seconds of its process group (remote/procstat.py)
    # what the helper could not read of this job (its log or checkpoint dir made a FIFO...)
    probe_error: str | None = key(text, origin="leftover")
    # processes still marked as this job's attempt after it ended (remote/jobmark.py)
    survivors: tuple[Survivor, ...] = nested(Survivor, "many", origin="leftover")
    # Slurm jobs carry the final code on the job too
    exit_code: int | None = key(integer, old=("returncode",), origin="slurm")
    backend: str | None = key(text, origin="slurm")
    slurm_id: str | None = key(text, origin="slurm")
    slurm_state: str | None = key(text, origin="slurm")
    node: str | None = key(text, origin="slurm")
    elapsed_s: float | None = key(number, origin="slurm")
    time_limit_s: float | None = key(number, origin="slurm")
    time_left_s: float | None = key(number, origin="slurm")
    end_time: float | None = key(number, origin="slurm")
    restarts: int | None = key(integer, origin="slurm")
    signal_lead_s: float | None = key(number, origin="slurm")
    # squeue's %S for a pending job: when the scheduler expects it to start (issue 23)
    expected_start: float | None = key(number, origin="slurm")
    nodes: int | None = key(integer, origin="slurm")  # squeue's %D: nodes allocated or asked
    telemetry: JobTelemetry | None = nested(JobTelemetry, "maybe", origin="slurm")
    array: str | None = key(text, origin="slurm")  # sbatch --array's spec: "0-9%2"
    tasks: tuple[ArrayTask, ...] = nested(ArrayTask, "many", origin="slurm")
    queue: str = "default"  # the queue the job is in: the key of its view, not a field
    # that queue's identity (QueueView.id): what the jump host keys its records of the job on
    queue_id: str | None = None

    @property
    def key(self) -> str:
        """"queue/id": unique across the box's queues (the log cursors are keyed by it)."""
        return f"{self.queue}/{self.id}"

    @property
    def last_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def attempt(self, n: int | None) -> Attempt | None:
        """The attempt numbered ``n``."""
        return next((a for a in self.attempts if a.attempt == n), None)

    @property
    def is_slurm(self) -> bool:
        return self.backend == "slurm" or bool(self.slurm_id)

    @property
    def runs(self) -> tuple[SlurmRun, ...]:
        """The batch script's runs of the current attempt (one per requeue)."""
        last = self.last_attempt
        return last.runs if last is not None else ()


@dataclass(frozen=True, slots=True)
class QueueRunner(View):
    """A queue's runner, as its lock and runner.json say (remote/queue.py _runner_info)."""

    alive: bool = key(flag)
    pid: int | None = key(integer)
    heartbeat: float | None = key(number)
    # the last write that failed (a full disk or inode table), until one succeeds again
    write_error: str | None = key(text)
    # any other failure of its last tick (it backs off and retries; it never dies)
    error: str | None = key(text)
    boot_id: str | None = key(text)
    # queue install-reboot-hook ran for this queue (GEN6); None: a helper that does not say
    reboot_hook: bool | None = key(lambda v: v if isinstance(v, bool) else None)


@dataclass(frozen=True, slots=True)
class PreemptNotice(View):
    """A spot box's preemption notice as the runner recorded it (remote/preempt.py)."""

    cloud: str | None = key(text)  # aws | gcp | azure
    action: str | None = key(text)  # terminate, stop, hibernate, preempt
    at: float | None = key(number)  # when the cloud takes the box (epoch seconds)
    t: float | None = key(number)  # when the runner saw the notice (the box's clock)
    boot_id: str | None = key(text)  # the boot it was seen in
    signalled: int | None = key(integer)  # running jobs sent SIGUSR1


@dataclass(frozen=True, slots=True)
class QueueView(View):
    """One queue on the box: the probe's ``queue.queues.<name>`` and ``queue ls --json``."""

    name: str = key(lambda v: text(v) or "default", current='queue')
    id: str | None = key(queue_identity)
    backend: str | None = key(text)
    runner: QueueRunner | None = nested(QueueRunner, "maybe")
    preempt: PreemptNotice | None = nested(PreemptNotice, "maybe", origin="preempt")
    jobs: tuple[Job, ...] = nested(Job, "many")
    # Lines of the events file the queue could not read or apply (remote/queue_events.py).
    warnings: tuple[str, ...] = key(texts)

    def __post_init__(self) -> None:
        # Every construction (read, or renamed by its key in queue.queues) names its jobs.
        object.__setattr__(self, "jobs", _named_jobs(self.jobs, self.name, self.id))


def _named_jobs(jobs: tuple[Job, ...], queue: str, queue_id: str | None) -> tuple[Job, ...]:
    # A job without an id cannot be shown, acted on or followed: it is not read at all.
    return tuple(j if (j.queue, j.queue_id) == (queue, queue_id)
                 else dataclasses.replace(j, queue=queue, queue_id=queue_id)
                 for j in jobs if j.id)


@dataclass(frozen=True, slots=True)
class Queue(View):
    """Every queue on the box (remote/queue.py collect)."""

    queues: tuple[QueueView, ...] = nested(QueueView, "named")


@dataclass(frozen=True, slots=True)
class JobSpec(View):
    """What `queue move` re-adds on another host (``queue show``'s job, env values and all:
    the helper's own answer, never printed)."""

    id: str = key(lambda v: text(v) or "")
    name: str | None = key(text)
    state: str = key(lambda v: text(v) or "")
    argv: tuple[str, ...] = key(texts)
    cwd: str | None = key(text)
    env: Mapping[str, str] = key(string_map)
    gpus: int | None = key(integer)
    vram_mib: int | None = key(integer)
    retries: int | None = key(integer)
    retry_on_exit: bool = key(flag)
    outputs: tuple[str, ...] = key(texts)
    durable_dir: str | None = key(text)
    ckpt_dir: str | None = key(text)


@dataclass(frozen=True, slots=True)
class QueueConfig(View):
    durable_dir: str | None = key(text)


@dataclass(frozen=True, slots=True)
class QueueSpec(View):
    """``queue show --json``: the queue's dir and config, and the job asked for."""

    queue: str = key(lambda v: text(v) or "default")
    id: str | None = key(queue_identity)
    dir: str | None = key(text)
    config: QueueConfig = nested(QueueConfig)
    jobs: tuple[JobSpec, ...] = nested(JobSpec, "many")


def read_queue_spec(raw: Any) -> QueueSpec:
    return QueueSpec.read(raw)


@dataclass(frozen=True, slots=True)
class RunDir(View):
    """A TensorBoard or wandb run dir under a job's cwd (remote/rundirs.py scan)."""

    path: str = key(lambda v: text(v) or "")  # relative to the cwd
    kind: str | None = key(text)  # tensorboard | wandb | wandb-offline
    newest: float | None = key(number)  # the newest file's mtime (box clock)


@dataclass(frozen=True, slots=True)
class RunDirScan(View):
    """One cwd's answer of ``gpuroom-remote rundirs``: run dirs written since ``since``."""

    cwd: str | None = key(text)
    since: float | None = key(number)
    truncated: bool = key(flag)  # the bounded walk stopped early
    missing: bool = key(flag)  # the cwd is gone
    dirs: tuple[RunDir, ...] = nested(RunDir, "many")


@dataclass(frozen=True, slots=True)
class RunDirs(View):
    ok: bool = key(flag)
    scans: tuple[RunDirScan, ...] = nested(RunDirScan, "many")
    cut: bool = key(flag)  # more cwds were asked than one call answers


def read_rundirs(raw: Any) -> RunDirs:
    """``gpuroom-remote rundirs --json``: the run dirs of each job's cwd."""
    return RunDirs.read(raw)


def read_log_doc(raw: Any) -> LogChunk:
    """``gpuroom-remote queue logs --json``: one log chunk, in the probe's shape."""
    return LogChunk.read(raw)


def read_queue_view(raw: Any) -> QueueView:
    """``gpuroom-remote queue ls --json``: one queue's view, jobs in the probe's shape."""
    return QueueView.read(raw)


# ----------------------------------------------------------------------------- the snapshot


@dataclass(frozen=True, slots=True)
class Snapshot(View):
    """One probe of one box, read."""

    schema: int | None = key(integer)
    helper: Helper = nested(Helper)
    host: Host = nested(Host)
    cgroup: Cgroup = nested(Cgroup)
    disks: tuple[Disk, ...] = nested(Disk, "many")
    gpus: tuple[Gpu, ...] = nested(Gpu, "many")
    gpu_error: str | None = key(text)  # why there are no GPUs (NVML, then nvidia-smi)
    kernel: Kernel = nested(Kernel)
    vram_holders: tuple[VramHolder, ...] = nested(VramHolder, "many")
    queue: Queue | None = nested(Queue, "maybe")  # None: the snapshot has no queue section
    idle: Idle | None = nested(Idle, "maybe")  # None: a helper that does not say
    errors: tuple[SectionError, ...] = nested(SectionError, "many")
    sections: frozenset[str] = frozenset()  # the top-level keys present

    @property
    def jobs(self) -> tuple[Job, ...]:
        """Every job of every queue, in the box's order."""
        if self.queue is None:
            return ()
        return tuple(j for q in self.queue.queues for j in q.jobs)

    def iter_jobs(self) -> Iterator[tuple[str, Job]]:
        """Every job as ("queue/id", job)."""
        for job in self.jobs:
            yield job.key, job

    def job(self, job_id: str) -> Job | None:
        """The first job with this id, whatever its queue."""
        return next((j for j in self.jobs if j.id == job_id), None)

    def gpu(self, index: int | None) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    @property
    def job_nodes(self) -> tuple[tuple[Job, NodeProbe], ...]:
        """Each node of each running Slurm job that answered an in-allocation probe."""
        return tuple((j, n) for j in self.jobs if j.state == "running"
                     and j.telemetry is not None for n in j.telemetry.nodes)

    def section_error(self, section: str) -> str | None:
        """What the collector of ``section`` raised, if it did."""
        return next((e.error for e in self.errors if e.section == section), None)


def _current_shapes(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The document with the shapes older helpers and hand-made recordings used rewritten
    into today's (the table above maps renamed keys; these are re-nested sections)."""
    doc = dict(raw)
    gpus = doc.get("gpus")
    if isinstance(gpus, Mapping):  # {"devices": [...], "reason": "..."}
        devices = gpus.get("devices")
        doc["gpus"] = devices if devices is not None else gpus.get("gpus")
        if doc.get("gpu_error") is None:
            doc["gpu_error"] = gpus.get("reason") if gpus.get("reason") is not None \
                else gpus.get("error")
    queue = doc.get("queue")
    if isinstance(queue, list):  # a bare job list
        doc["queue"] = {"queues": {"default": {"jobs": queue}}}
    elif isinstance(queue, Mapping) and "queues" not in queue and "jobs" in queue:
        doc["queue"] = {"queues": {"default": queue}}
    return doc


def read_snapshot(raw: Any) -> Snapshot:
    """The snapshot view of one raw document; never raises on what the box sent."""
    doc = _current_shapes(raw) if isinstance(raw, Mapping) else {}
    snap = Snapshot.read(doc)
    return dataclasses.replace(snap, sections=frozenset(k for k in doc if isinstance(k, str)))


_SHAPE_NAMES = {"one": ("an object", Mapping), "maybe": ("an object", Mapping),
                "many": ("a list", list), "named": ("an object", Mapping)}


def snapshot_problems(raw: Any, schema: int) -> list[str]:
    """What makes ``raw`` no answer of a helper that speaks ``schema``: another schema, or
    a top-level section of the wrong type (each named with what it is and what it should be).
    Empty for a good document. Finer damage inside a section reads as blank fields."""
    if not isinstance(raw, Mapping):
        return [f"the answer is {_kind(raw)}, not a probe document"]
    problems = []
    if raw.get("schema") != schema:
        problems.append(f"schema {fmt_value(raw.get('schema'))}, expected {schema}")
    for k in Snapshot.keys():
        value = raw.get(k.key)
        if k.view is None or value is None:
            continue
        name, kind = _SHAPE_NAMES[k.shape]
        if not isinstance(value, kind):
            problems.append(f"section {k.key!r} is {_kind(value)}, expected {name}")
    return problems


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def fmt_value(value: Any) -> str:
    """A short, printable rendering of a value the box sent (for error messages)."""
    text_ = repr(value)
    return text_ if len(text_) <= 40 else text_[:39] + "…"


def read_optional(raw: Any) -> Snapshot | None:
    """``read_snapshot``, with no document (a host that never answered) staying None."""
    return None if raw is None else read_snapshot(raw)


def with_jobs(snap: Snapshot, jobs: tuple[Job, ...], queue: str = "default",
              queue_id: str | None = None) -> Snapshot:
    """``snap`` with its queue section replaced by one queue holding ``jobs`` (of the queue
    ``queue_id``; by default the one the jobs name)."""
    if queue_id is None and jobs:
        queue_id = jobs[0].queue_id
    view = QueueView(name=queue, id=queue_id, backend=None, runner=None, preempt=None, jobs=jobs,
                     warnings=())
    return dataclasses.replace(snap, queue=Queue(queues=(view,)),
                               sections=snap.sections | {"queue"})


__all__ = [
    "ArrayTask", "Attempt", "Cgroup", "Checkpoint", "CkptUnit", "CkptUnits", "Disk", "Gpu",
    "GpuProcess", "Helper", "Host", "Idle", "Job",
    "JobTelemetry", "Kernel", "KernelEvent", "Key", "LogChunk", "NodeProbe", "Queue",
    "QueueView", "RawSnapshot",
    "SectionError", "SlurmRun", "Snapshot", "Sync", "View", "VramHolder", "integer", "keys_seen",
    "number", "queue_identity",
    "read_log_doc", "read_optional", "read_queue_view", "read_snapshot", "schema_keys",
    "snapshot_problems",
    "text", "with_jobs",
]


def for_host(text: str, host: str) -> str:
    """A box's text with the host's name (as a shell word) where the helper wrote its
    HOST_IN_FIX: a fix the user pastes names the real host."""
    return text.replace(HOST_IN_FIX, shlex.quote(host))


def load_answer(data: bytes | str) -> Any:
    """JSON the box wrote, parsed, or ValueError: a document nested thousands deep makes the
    json module raise RecursionError, which is an answer to refuse, not a bug in gpuroom.

    NaN and Infinity (Python's json writes them; JSON has none) read as null, as the number
    rule reads them anyway: what gpuroom writes back (``status --json``, ``probe``, a
    recording) stays JSON that any parser reads."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("the answer is nested too deep to be the helper's JSON") from None


def _no_constant(name: str) -> None:
    """NaN, Infinity, -Infinity: no number (load_answer)."""
    return None
