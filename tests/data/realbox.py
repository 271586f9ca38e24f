"""What the data builders share: the real helper, run on this machine, with the GPU boundary
replayed from the captures. No builder types a snapshot field; see tests/data/README.md.

- ``Box``: a queue in a fixed temp root driven through the real CLI (tests/harness/queuebox.py),
  probed by ``gpuroom.remote.probe.ProbeSession`` with the log cursors carried forward as
  tui/fleet/live.py does.
- ``CaptureNvml``: what NVML would answer on the captured boards. Every number is read out of a
  capture that the fake ``nvidia-smi`` (tests/fakes/nvidia-smi) prints, by the helper's own
  parsers (``parse_nvsmi_table``, ``parse_dmon``, ``parse_clock_reasons``, ``smi_value``); a
  value a capture does not hold is NVML's NotSupported, so the helper writes None. The helper's
  NVML path (``gpu.nvml_gpus``) turns the answers into the snapshot's GPU dicts.
- ``private_mounts``: the builders re-run themselves in a private mount namespace (root), so the
  inode-full tmpfs on /data and the rebooted box's boot id are seen by nothing else here.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS))

import pynvml  # noqa: E402
from fakes import NVIDIA_SMI  # noqa: E402
from harness.queuebox import Box as QueueBox  # noqa: E402
from harness.queuebox import wait_until  # noqa: E402

from gpuroom.remote import gpu, hostinfo, probe  # noqa: E402

# The fixed clock every test injects: the verbatim probe's own clock reading (README).
T0 = float(json.loads((HERE / "probe-vm.json").read_text())["host"]["time"])
NOW = T0 + 30.0
# Fixed paths, so the queue root, logs and checkpoints read the same on every rebuild.
WORK = Path("/tmp/gpuroom-data")
JOBS = HERE / "jobs"
FAKE_DMESG = TESTS / "fakes" / "dmesg"
_MIB = 1024 * 1024
_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


# ------------------------------------------------------------------ namespace, mounts


def private_mounts() -> None:
    """Re-exec this builder under ``unshare -m`` (once): mounts made here stay here."""
    if os.environ.get("GPUROOM_DATA_NS") == "1":
        return
    if os.geteuid() != 0:
        raise SystemExit("run as root: the builder mounts a tmpfs and a boot id (README)")
    env = dict(os.environ, GPUROOM_DATA_NS="1")
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv]
    code = subprocess.run(argv, env=env, check=False).returncode
    shutil.rmtree(WORK, ignore_errors=True)
    raise SystemExit(code)


@contextlib.contextmanager
def inode_full_tmpfs(path: str = "/data", inodes: int = 10_000, free: int = 60) -> Iterator[str]:
    """A real tmpfs at ``path`` with few inodes, filled with empty files until ``free`` remain:
    99 % of its inodes used while ``df -h`` shows it nearly empty (U7)."""
    made = not os.path.isdir(path)
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,nr_inodes={inodes}",
                    "gpuroom-data", path], check=True)
    try:
        shards = Path(path) / "shards"
        shards.mkdir()
        n = 0
        while os.statvfs(path).f_favail > free:
            (shards / f"{n:06d}.arrow").touch()
            n += 1
        yield path
    finally:
        subprocess.run(["umount", path], check=True)
        if made:
            os.rmdir(path)


@contextlib.contextmanager
def boot_id(new: str) -> Iterator[None]:
    """This namespace's /proc/sys/kernel/random/boot_id reads ``new``: the box after a reboot,
    as the helper (hostinfo, kernel) and the queue runner read it."""
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "boot_id"
    src.write_text(new + "\n")
    subprocess.run(["mount", "--bind", str(src), hostinfo.BOOT_ID_PATH], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", hostinfo.BOOT_ID_PATH], check=True)
        src.unlink()


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    """Set (or, for None, unset) environment variables; the whole environment is restored
    afterwards (unittest.mock.patch.dict does the saving and restoring)."""
    with mock.patch.dict(os.environ):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield


@contextlib.contextmanager
def dmesg_capture(rel: str | None) -> Iterator[None]:
    """The helper's kernel section reads this dmesg capture through tests/fakes/dmesg
    ($GPUROOM_DMESG); None: this machine's own dmesg."""
    if rel is None:
        with env(GPUROOM_DMESG=None, GPUROOM_FAKE_DMESG_CAPTURE=None):
            yield
        return
    with env(GPUROOM_DMESG=str(FAKE_DMESG), GPUROOM_FAKE_DMESG_CAPTURE=str(fixture(rel))):
        yield


@contextlib.contextmanager
def cgroup_capture(rel: str) -> Iterator[None]:
    """The helper's cgroup reader (hostinfo.cgroup_facts) pointed at a cgroup v2 root whose
    memory.events is the capture ``rel``."""
    root = WORK / "cgroup"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("")
    (root / "memory.events").write_text(capture(rel))
    saved = list(probe.COLLECTORS)
    probe.register("cgroup", lambda s, r: {"cgroup": hostinfo.cgroup_facts(str(root))})
    try:
        yield
    finally:
        probe.COLLECTORS[:] = saved
        shutil.rmtree(root)


def fixture(rel: str) -> Path:
    from paths import FIXTURES

    return FIXTURES / rel


def capture(rel: str) -> str:
    from fakes import capture as body

    return body(rel)


# ------------------------------------------------------------------ GPU replay


def smi(rel: str, args: list[str]) -> str:
    """What the fake nvidia-smi prints for ``args`` with only ``rel`` named."""
    with env(GPUROOM_FAKE_NVSMI=rel):
        out, error = gpu.run_nvidia_smi(str(NVIDIA_SMI), args)
    if out is None:
        raise RuntimeError(f"fake nvidia-smi {args} on {rel}: {error}")
    return out


def _q_sections(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi -q`` -> per GPU block, ``{"Section/Key": value}`` (values by smi_value).

    The helper has no reader for these lines (it parses only the clock reasons out of -q), so
    this one keeps to the layout: ``Key : value`` lines, nested by indentation.
    """
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", line):
            gpus.append({})
            stack = []
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        if sep and value.strip():
            gpus[-1]["/".join([*(s for _, s in stack), key])] = gpu.smi_value(value)
        else:
            stack.append((indent, key))
    return gpus


def _reason_mask(active: list[str]) -> int:
    bits = {name: bit for bit, name in gpu.CLOCK_REASON_BITS}
    return sum(bits[name] for name in active)


def q_boards(rel: str) -> list[dict[str, Any]]:
    """NVML answers for each GPU of a ``-q`` capture."""
    text = smi(rel, ["-q"])
    reasons = gpu.parse_clock_reasons(text)
    boards = []
    for i, s in enumerate(_q_sections(text)):
        b: dict[str, Any] = {
            "name": s.get("Product Name"), "uuid": s.get("GPU UUID"),
            "bus": s.get("PCI/Bus Id"),
            "clock": {0: s.get("Clocks/Graphics"), 1: s.get("Clocks/SM"),
                      2: s.get("Clocks/Memory")},
            "max": {1: s.get("Max Clocks/SM"), 2: s.get("Max Clocks/Memory")},
            "power_w": s.get("GPU Power Readings/Power Draw"),
            "limit_w": s.get("GPU Power Readings/Current Power Limit"),
            "temp": s.get("Temperature/GPU Current Temp"),
            "util": (s.get("Utilization/Gpu"), s.get("Utilization/Memory")),
            "mem_mib": (s.get("FB Memory Usage/Used"), s.get("FB Memory Usage/Total")),
        }
        if i < len(reasons) and reasons[i]["active"] is not None:
            b["reasons"] = _reason_mask(reasons[i]["active"])
        boards.append(b)
    return boards


def table_boards(rel: str) -> list[dict[str, Any]]:
    """NVML answers for each GPU of a plain ``nvidia-smi`` table capture (no clocks in it)."""
    table = gpu.parse_nvsmi_table(smi(rel, []))
    boards = []
    for row in table["gpus"]:
        procs = [p for p in table["processes"] if p["gpu"] == row["index"]]
        boards.append({
            "name": row["name"], "bus": row["bus_id"], "temp": row["temp_c"],
            "power_w": row["power_w"], "limit_w": row["power_limit_w"],
            "util": (row["util_gpu_pct"], None),
            "mem_mib": (row["mem_used_mib"], row["mem_total_mib"]),
            "ecc_uncorrected": row["ecc_uncorrected"],
            "compute": [p for p in procs if "C" in p["type"]],
            "graphics": [p for p in procs if "G" in p["type"]],
        })
    return boards


def dmon_boards(rel: str) -> list[dict[str, Any]]:
    """NVML answers for each row of a ``dmon`` capture (one board, one row per second).

    dmon's pclk is the graphics clock; it is also answered as the SM clock, which is the same
    clock on the captured boards (the rtx2080 and a10 -q captures print Graphics = SM).
    """
    rows = gpu.parse_dmon(smi(rel, ["dmon"]))
    return [{"power_w": r["pwr"], "temp": r["gtemp"], "util": (r["sm"], r["mem"]),
             "clock": {0: r["pclk"], 1: r["pclk"], 2: r["mclk"]}} for r in rows]


# The boards of a box whose GPU fell off the bus: NVML answers GPU_IS_LOST.
LOST: list[dict[str, Any]] = []


class CaptureNvml:
    """pynvml as the helper calls it, answering from captured boards; no answer = NotSupported."""

    NVMLError = pynvml.NVMLError

    def __init__(self, boards: list[dict[str, Any]]) -> None:
        self.boards = boards
        self.lost = boards is LOST

    def _get(self, h: int, key: str, sub: Any = None) -> Any:
        value = self.boards[h].get(key)
        if sub is not None and isinstance(value, dict):
            value = value.get(sub)
        if value is None:
            raise pynvml.NVMLError(_NOT_SUPPORTED)
        return value

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        if self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return len(self.boards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._get(h, "name"))

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._get(h, "uuid"))

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._get(h, "bus"))

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return int(self._get(h, "clock", clock))

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return int(self._get(h, "max", clock))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return round(float(self._get(h, "power_w")) * 1000)  # NVML answers milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return round(float(self._get(h, "limit_w")) * 1000)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._get(h, "temp"))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        g, m = self._get(h, "util")
        if g is None and m is None:
            raise pynvml.NVMLError(_NOT_SUPPORTED)
        return SimpleNamespace(gpu=g, memory=m)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used, total = self._get(h, "mem_mib")
        if used is None or total is None:
            raise pynvml.NVMLError(_NOT_SUPPORTED)
        return SimpleNamespace(used=int(used) * _MIB, total=int(total) * _MIB)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._get(h, "reasons"))

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        if kind == 1:  # uncorrected: the table's "Volatile Uncorr. ECC" column
            return int(self._get(h, "ecc_uncorrected"))
        raise pynvml.NVMLError(_NOT_SUPPORTED)

    def _procs(self, h: int, key: str) -> list[Any]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=(
            p["used_mib"] * _MIB if isinstance(p["used_mib"], int) else None))
            for p in self.boards[h].get(key) or []]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self._procs(h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return self._procs(h, "graphics")


# ------------------------------------------------------------------ probing


class Prober:
    """One box as the jump host sees it: a ProbeSession kept across polls (as ``serve`` keeps
    one), log cursors carried forward, the box's GPUs replayed by ``boards``."""

    def __init__(self, *, queue_root: Path | None = None, mounts: tuple[str, ...] = ()) -> None:
        self.session = probe.ProbeSession()
        self.request: dict[str, Any] = {
            "queue_root": str(queue_root or (WORK / "no-queue")), "mounts": list(mounts)}

    def poll(self, boards: list[dict[str, Any]] | None) -> dict[str, Any]:
        """One snapshot; ``boards`` None: no replay (this machine's own NVML, which is absent)."""
        if boards is None:
            self.session.state.pop("_gpu_nvml", None)
        else:
            # How the helper keeps its initialised NVML for the session (gpu._session_nvml).
            self.session.state["_gpu_nvml"] = {"module": CaptureNvml(boards), "error": None,
                                               "at": time.monotonic()}
        # The helper runs in the login shell's directory (disks: "~" and the cwd).
        home = os.path.expanduser("~")
        old = os.getcwd()
        os.chdir(home)
        try:
            # No nvidia-smi on this machine; none is replayed for the helper's fallback.
            with env(GPUROOM_NVIDIA_SMI=None, GPUROOM_FAKE_NVSMI=None):
                snap = self.session.snapshot(self.request)
        finally:
            os.chdir(old)
        if snap["errors"]:
            raise RuntimeError(f"probe section failed: {snap['errors']}")
        logs = {}
        for name, view in (snap.get("queue") or {}).get("queues", {}).items():
            for job in view["jobs"]:
                chunk = job.get("log_chunk")
                if chunk and chunk.get("next_offset") is not None:
                    logs[f"{name}/{job['id']}"] = {"offset": chunk["next_offset"],
                                                   "inode": chunk.get("inode")}
        self.request["logs"] = logs
        return snap


def shift(snap: dict[str, Any], by: float) -> dict[str, Any]:
    """Move every wall-clock reading of the box by ``by`` seconds (the builders put the last
    poll at the fixed clock). Strict lookups: a renamed time field fails the build."""
    snap = copy.deepcopy(snap)
    snap["host"]["time"] += by
    for view in snap["queue"]["queues"].values():
        runner = view["runner"]
        for key in ("started", "heartbeat"):
            if runner.get(key) is not None:
                runner[key] += by
        for job in view["jobs"]:
            job["added"] += by
            for attempt in job["attempts"]:
                for key in ("start", "end"):
                    if attempt[key] is not None:
                        attempt[key] += by
            if job.get("checkpoint"):
                job["checkpoint"]["mtime"] += by
    return snap


class Box(QueueBox):
    """The queue of tests/harness/queuebox.py at a fixed root, its jobs in tests/data/jobs."""

    def __init__(self, name: str, slots: int | None = 1) -> None:
        base = WORK / name
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        super().__init__(base)
        for script in JOBS.iterdir():
            shutil.copy(script, self.work / script.name)
        if slots is not None:  # the config is the queue's first event: jobs start at j2
            self.json("config", "--slots", str(slots))

    def wait_log(self, job_id: str, text: str, timeout: float = 30.0) -> None:
        log = self.qdir / "logs" / f"{job_id}.log"
        wait_until(lambda: log.is_file() and text in log.read_text(errors="replace"),
                   timeout, f"{text!r} in {job_id}'s log")

    def stop(self) -> None:
        """Everything this box started, and its root."""
        self.cleanup()
        shutil.rmtree(self.root.parent, ignore_errors=True)
