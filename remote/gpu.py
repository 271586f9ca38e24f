"""GPU facts: NVML first, ``nvidia-smi`` where NVML will not load, "no GPU" as a normal state.

The parsers read what ``nvidia-smi`` prints (dmon, --query-gpu csv, -q clock reasons, the plain
table) across driver generations, so the fallback and the recorded captures share one reader.
Every GPU, whichever source it came from, is one dict with the same keys (``_EMPTY_GPU``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .vram import proc_owner

Row = Dict[str, Any]

# nvidia-smi hangs for tens of seconds on a wedged GPU; the probe must answer before that.
SMI_TIMEOUT_S = 5.0
# A box whose NVML failed to load is asked again this rarely (a driver installed mid-session).
NVML_RETRY_S = 60.0
_MIB = 1024 * 1024
_ERROR_CHARS = 300

# ---------------------------------------------------------------------------- values


_NUMBER = re.compile(
    r"^(-?\d+(?:\.\d+)?)\s*(?:MiB|KiB|GiB|MB|KB|GB|%|W|mW|MHz|C|mV|KB/s|MB/s|s|ms|us)?$"
)
_NONE_WORDS = {"", "-", "N/A", "n/a", "Not Supported", "Unknown Error"}


def _number(text: str) -> Any:
    m = _NUMBER.match(text)
    if m is None:
        return None
    num = m.group(1)
    return float(num) if "." in num else int(num)


def smi_value(text: str, numeric: bool = True) -> Any:
    """One printed value: ``[N/A]``, ``[Not Supported]``, ``N/A``, ``-`` -> None; units dropped.

    Every bracketed word nvidia-smi prints (``[Unknown Error]``, ``[GPU requires reset]``,
    ``[Insufficient Permissions]``) stands for a value it could not read.
    """
    text = text.strip()
    if text in _NONE_WORDS or (text.startswith("[") and text.endswith("]")):
        return None
    if numeric:
        num = _number(text)
        if num is not None:
            return num
    return text


# ---------------------------------------------------------------------------- dmon


def parse_dmon(text: str) -> List[Row]:
    """``nvidia-smi dmon`` -> one dict per data row, keys as the header names them.

    The header (``# gpu pwr gtemp ...``) may repeat mid-stream and may change generation (old
    ``temp``, new 6-wide ``gtemp mtemp ... jpg ofa``); each data row follows the last header seen.
    The second ``#`` line carries units and is skipped. ``-`` is None.
    """
    rows: List[Row] = []
    columns: Optional[List[str]] = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            names = stripped.lstrip("#").split()
            if "gpu" in names:
                columns = names
            continue
        if columns is None:
            continue
        cells = stripped.split()
        if len(cells) != len(columns):
            continue  # a row cut mid-line by a pager or an interrupt is not data
        row: Row = {}
        for i, name in enumerate(columns):
            cell = cells[i]
            if name == "gpu":
                row[name] = int(cell) if cell.isdigit() else smi_value(cell)
            elif name in ("Date", "Time"):
                row[name] = cell
            else:
                row[name] = smi_value(cell)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- query csv

# Values of these fields are words even when they look like numbers (driver 460.91, bus 0x02).
_TEXT_SUFFIXES = ("name", "uuid", "serial", "version", "bus_id", "timestamp", "pstate", "mode")
_HEADER_CELL = re.compile(r"^[a-z_][a-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def _is_text_field(key: str) -> bool:
    return key.startswith("pci") or key.endswith(_TEXT_SUFFIXES) or key.endswith(".active")


def _split_csv_line(line: str, columned: bool) -> List[str]:
    if columned:
        return [c.strip() for c in re.split(r"\s{2,}", line.strip())]
    return [c.strip() for c in line.split(",")]


def _field_name(cell: str) -> str:
    return _UNIT.sub("", cell.strip())


def parse_query_csv(text: str, fields: Optional[Sequence[str]] = None) -> List[Row]:
    """``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` -> one dict per GPU.

    Keys come from the header with units removed (``memory.used [MiB]`` -> ``memory.used``), or
    from ``fields`` for noheader output. Without either, keys are ``col0``, ``col1``... so a
    capture whose query is unknown still reads. Output piped through ``column -t`` (no commas,
    columns two or more spaces apart) is read too.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    columned = "," not in lines[0] and len(re.split(r"\s{2,}", lines[0].strip())) > 1
    first = _split_csv_line(lines[0], columned)
    looks_like_header = all(_HEADER_CELL.match(c) for c in first)
    if fields is not None:
        keys = [_field_name(f) for f in fields]
        if looks_like_header and [_field_name(c) for c in first] == keys:
            lines = lines[1:]
    elif looks_like_header:
        keys = [_field_name(c) for c in first]
        lines = lines[1:]
    else:
        keys = [f"col{i}" for i in range(len(first))]
    rows: List[Row] = []
    for line in lines:
        cells = _split_csv_line(line, columned)
        if len(cells) != len(keys):
            continue  # an error line ("Field ... is not a valid field") or a cut row
        rows.append({k: smi_value(cells[i], numeric=not _is_text_field(k))
                     for i, k in enumerate(keys)})
    return rows


# ---------------------------------------------------------------------------- clock reasons

# NVML's clocks-event (535+) and clocks-throttle (older) reason bits share one numbering.
CLOCK_REASON_BITS: Tuple[Tuple[int, str], ...] = (
    (0x0000000000000001, "idle"),
    (0x0000000000000002, "applications_clocks_setting"),
    (0x0000000000000004, "sw_power_cap"),
    (0x0000000000000008, "hw_slowdown"),
    (0x0000000000000010, "sync_boost"),
    (0x0000000000000020, "sw_thermal_slowdown"),
    (0x0000000000000040, "hw_thermal_slowdown"),
    (0x0000000000000080, "hw_power_brake_slowdown"),
    (0x0000000000000100, "display_clock_setting"),
    # Defined only under the throttle names in nvidia-ml-py.
    (0x0000000000000200, "board_limit"),
    (0x0000000000000400, "reliability"),
    # nvmlClocksThrottleReasonUnknown of the pre-535 headers.
    (0x8000000000000000, "unknown"),
)

# Older -q output spells one reason differently; both mean the same bit.
_REASON_ALIASES = {"user_defined_clocks": "applications_clocks_setting"}
_REASON_TITLES = {"Clocks Throttle Reasons": "throttle", "Clocks Event Reasons": "event"}
_GPU_BLOCK = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def decode_clock_reasons(mask: Optional[int]) -> Optional[List[str]]:
    """NVML bitmask (or the csv ``0x...`` value as int) -> reason names, lowest bit first."""
    if mask is None:
        return None
    names = []
    rest = mask
    for bit, name in CLOCK_REASON_BITS:
        if mask & bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(f"unknown_0x{rest:x}")
    return names


def reason_name(label: str) -> str:
    """``HW Power Brake Slowdown`` -> ``hw_power_brake_slowdown``."""
    name = re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")
    return _REASON_ALIASES.get(name, name)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse_clock_reasons(text: str) -> List[Row]:
    """``nvidia-smi -q`` (whole or ``-d PERFORMANCE``) -> one dict per GPU.

    Each dict: ``bus_id`` (None for an excerpt without the GPU line), ``era`` ("throttle" before
    driver 535, "event" after), ``reasons`` (every listed reason -> Active?) and ``active``.
    """
    gpus: List[Row] = []
    current: Optional[Row] = None
    block_indent: Optional[int] = None
    for line in text.splitlines():
        m = _GPU_BLOCK.match(line)
        if m:
            current = {"bus_id": m.group(1), "era": None, "reasons": {}, "active": []}
            gpus.append(current)
            block_indent = None
            continue
        stripped = line.strip()
        title, _, rest = stripped.partition(":")
        era = _REASON_TITLES.get(title.strip())
        if era is not None:
            if current is None or current["era"] is not None:
                current = {"bus_id": None, "era": None, "reasons": {}, "active": []}
                gpus.append(current)
            current["era"] = era
            # "Clocks Throttle Reasons : N/A" on boards that cannot tell.
            block_indent = None if rest.strip() else _indent(line)
            if rest.strip():
                current["reasons"] = None
                current["active"] = None
            continue
        if block_indent is None or current is None:
            continue
        if not stripped or _indent(line) <= block_indent or ":" not in stripped:
            block_indent = None
            continue
        label, _, state = stripped.partition(":")
        name = reason_name(label)
        active = state.strip() == "Active"
        current["reasons"][name] = active
        if active:
            current["active"].append(name)
    return [g for g in gpus if g["era"] is not None]


# ---------------------------------------------------------------------------- plain table

_TABLE_GPU = re.compile(r"^\s*(\d+)\s+(.*?)\s+(On|Off)\s*$")
_TABLE_BUS = re.compile(r"^\s*(\S+)\s+(On|Off)\s*$")
_TABLE_STATS = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_TABLE_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_UTIL = re.compile(r"^\s*(\S+)\s+(.*?)\s*$")
_TABLE_PROC = re.compile(
    r"^\|\s*(\d+|N/A)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(\S+)\s+(.*?)\s+(\d+MiB|N/A)\s*\|?\s*$"
)


def _cells(line: str) -> List[str]:
    return line.strip().strip("|").split("|")


def parse_nvsmi_table(text: str) -> Row:
    """The plain ``nvidia-smi`` table: per-GPU summary and the Processes box.

    The box is the process list of last resort. ``processes_state`` tells its cases apart:
    "listed", "none_found" ("No running processes found"), "empty" (a box with no rows at all:
    processes exist but this PID namespace cannot resolve them), "cut" (the box ends before its
    header does: the output was truncated) and "missing" (no box).
    """
    driver = re.search(r"Driver Version:\s*(\S+)", text)
    cuda = re.search(r"CUDA Version:\s*(\S+)", text)
    gpus: List[Row] = []
    processes: List[Row] = []
    state = "missing"
    in_processes = False
    expect: Optional[str] = None
    for line in text.splitlines():
        if "Processes:" in line:
            in_processes = True
            state = "cut"
            continue
        if in_processes:
            if line.startswith("|==="):
                state = "empty"
                continue
            if "No running processes found" in line:
                state = "none_found"
                continue
            m = _TABLE_PROC.match(line.rstrip())
            if m:
                gpu, gi, ci, pid, kind, name, mem = m.groups()
                processes.append({
                    "gpu": int(gpu) if gpu.isdigit() else None,
                    "gi": smi_value(gi) if gi else None,
                    "ci": smi_value(ci) if ci else None,
                    "pid": int(pid),
                    "type": kind,
                    "name": name,
                    "used_mib": _number(mem),
                })
                state = "listed"
            continue
        if not line.startswith("|"):
            expect = None
            continue
        cells = _cells(line)
        if len(cells) != 3:
            continue
        m = _TABLE_GPU.match(cells[0])
        if m and expect is None:
            bus = _TABLE_BUS.match(cells[1])
            gpus.append({
                "index": int(m.group(1)),
                "name": m.group(2),
                "persistence": m.group(3),
                "bus_id": bus.group(1) if bus else None,
                "display_active": bus.group(2) if bus else None,
                "ecc_uncorrected": smi_value(cells[2]),
            })
            expect = "stats"
            continue
        if expect == "stats":
            gpu = gpus[-1]
            stats = _TABLE_STATS.match(cells[0])
            if stats:
                fan, temp, perf, power, cap = stats.groups()
                gpu.update({"fan_pct": smi_value(fan), "temp_c": smi_value(temp),
                            "perf": perf, "power_w": smi_value(power),
                            "power_limit_w": smi_value(cap)})
            mem = _TABLE_MEM.search(cells[1])
            gpu["mem_used_mib"] = int(mem.group(1)) if mem else None
            gpu["mem_total_mib"] = int(mem.group(2)) if mem else None
            util = _TABLE_UTIL.match(cells[2])
            gpu["util_gpu_pct"] = smi_value(util.group(1)) if util else None
            gpu["compute_mode"] = util.group(2) if util else None
            expect = "mig"
            continue
        if expect == "mig" and not cells[0].strip() and not cells[1].strip():
            gpus[-1]["mig_mode"] = smi_value(cells[2], numeric=False)
        expect = None
    return {
        "driver_version": driver.group(1) if driver else None,
        "cuda_version": cuda.group(1) if cuda else None,
        "gpus": gpus,
        "processes": processes,
        "processes_state": state,
    }


# ---------------------------------------------------------------------------- one GPU dict

_EMPTY_GPU: Row = {
    "index": None, "name": None, "uuid": None, "bus_id": None,
    "clock_sm_mhz": None, "clock_sm_max_mhz": None,
    "clock_mem_mhz": None, "clock_mem_max_mhz": None, "clock_gr_mhz": None,
    "power_w": None, "power_limit_w": None, "temp_c": None,
    "util_gpu_pct": None, "util_mem_pct": None,
    "mem_used_mib": None, "mem_total_mib": None,
    "clock_event_reasons": None,
    "ecc_volatile_corrected": None, "ecc_volatile_uncorrected": None,
    "processes": [],
    "field_errors": {},
}


def _new_gpu() -> Row:
    gpu = dict(_EMPTY_GPU)
    gpu["processes"] = []
    gpu["field_errors"] = {}
    return gpu


def proc_comm(pid: int, proc_root: str = "/proc") -> Optional[str]:
    """The kernel's short command name; None for a pid outside this PID namespace."""
    try:
        with open(f"{proc_root}/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


# ---------------------------------------------------------------------------- NVML

_NVML_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
# nvmlClockType_t and friends, numbered as in nvml.h.
_CLOCK_GRAPHICS, _CLOCK_SM, _CLOCK_MEM = 0, 1, 2
_TEMPERATURE_GPU = 0
_ERROR_CORRECTED, _ERROR_UNCORRECTED = 0, 1
_VOLATILE_ECC = 0


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_gpu(nvml: Any, index: int) -> Row:
    """One GPU through NVML. A field NVML cannot read is None; only errors other than
    NotSupported are kept in ``field_errors``, since "this board has no such sensor" is normal."""
    gpu = _new_gpu()
    gpu["index"] = index
    errors: Dict[str, str] = gpu["field_errors"]

    def ask(field: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != _NVML_NOT_SUPPORTED:
                errors[field] = str(exc)
            return None

    handle = ask("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return gpu
    gpu["name"] = _text(ask("name", "nvmlDeviceGetName", handle))
    gpu["uuid"] = _text(ask("uuid", "nvmlDeviceGetUUID", handle))
    pci = ask("bus_id", "nvmlDeviceGetPciInfo", handle)
    gpu["bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
    gpu["clock_sm_mhz"] = ask("clock_sm_mhz", "nvmlDeviceGetClockInfo", handle, _CLOCK_SM)
    gpu["clock_sm_max_mhz"] = ask("clock_sm_max_mhz", "nvmlDeviceGetMaxClockInfo", handle,
                                  _CLOCK_SM)
    gpu["clock_mem_mhz"] = ask("clock_mem_mhz", "nvmlDeviceGetClockInfo", handle, _CLOCK_MEM)
    gpu["clock_mem_max_mhz"] = ask("clock_mem_max_mhz", "nvmlDeviceGetMaxClockInfo", handle,
                                   _CLOCK_MEM)
    gpu["clock_gr_mhz"] = ask("clock_gr_mhz", "nvmlDeviceGetClockInfo", handle, _CLOCK_GRAPHICS)
    power_mw = ask("power_w", "nvmlDeviceGetPowerUsage", handle)
    gpu["power_w"] = round(power_mw / 1000.0, 2) if power_mw is not None else None
    limit_mw = ask("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    gpu["power_limit_w"] = round(limit_mw / 1000.0, 2) if limit_mw is not None else None
    gpu["temp_c"] = ask("temp_c", "nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)
    util = ask("util", "nvmlDeviceGetUtilizationRates", handle)
    if util is not None:
        gpu["util_gpu_pct"] = util.gpu
        gpu["util_mem_pct"] = util.memory
    mem = ask("mem", "nvmlDeviceGetMemoryInfo", handle)
    if mem is not None:
        gpu["mem_used_mib"] = mem.used // _MIB
        gpu["mem_total_mib"] = mem.total // _MIB
    # Renamed in the 535 API; whichever this pynvml has reads the same bits.
    reasons_fn = ("nvmlDeviceGetCurrentClocksEventReasons"
                  if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
                  else "nvmlDeviceGetCurrentClocksThrottleReasons")
    mask = ask("clock_event_reasons", reasons_fn, handle)
    gpu["clock_event_reasons"] = decode_clock_reasons(mask)
    gpu["ecc_volatile_corrected"] = ask("ecc_volatile_corrected", "nvmlDeviceGetTotalEccErrors",
                                        handle, _ERROR_CORRECTED, _VOLATILE_ECC)
    gpu["ecc_volatile_uncorrected"] = ask("ecc_volatile_uncorrected",
                                          "nvmlDeviceGetTotalEccErrors",
                                          handle, _ERROR_UNCORRECTED, _VOLATILE_ECC)
    by_pid: Dict[int, Row] = {}
    for kind, fn_name in (("C", "nvmlDeviceGetComputeRunningProcesses"),
                          ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
        for p in ask("processes", fn_name, handle) or []:
            used = getattr(p, "usedGpuMemory", None)
            seen = by_pid.get(p.pid)
            if seen is not None:
                seen["type"] = "C+G"
                continue
            by_pid[p.pid] = {"pid": p.pid, "type": kind, "name": None,
                             "used_mib": used // _MIB if used is not None else None,
                             "comm": proc_comm(p.pid), **proc_owner(p.pid)}
    gpu["processes"] = list(by_pid.values())
    return gpu


def nvml_gpus(nvml: Any) -> List[Row]:
    """Every GPU NVML sees, through an initialised ``pynvml`` module (or one shaped like it)."""
    count = nvml.nvmlDeviceGetCount()
    return [_nvml_gpu(nvml, i) for i in range(count)]


def _load_nvml() -> Tuple[Any, Optional[str]]:
    try:
        import pynvml  # shipped next to gpuroom/ in the zipapp; absent in some source trees
    except ImportError as exc:
        return None, f"pynvml not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML init failed: {exc}"
    except OSError as exc:  # a libnvidia-ml.so of the wrong architecture or a broken symlink
        return None, f"NVML init failed: {exc}"
    return pynvml, None


def _session_nvml(state: Dict[str, Any]) -> Tuple[Any, Optional[str]]:
    """NVML initialised once per ProbeSession; a failure is remembered for NVML_RETRY_S."""
    cached = state.get("_gpu_nvml")
    now = time.monotonic()
    if cached is not None and (cached["module"] is not None or now - cached["at"] < NVML_RETRY_S):
        return cached["module"], cached["error"]
    module, error = _load_nvml()
    state["_gpu_nvml"] = {"module": module, "error": error, "at": now}
    if module is not None:
        state.setdefault("_closers", []).append(module.nvmlShutdown)
    return module, error


# ---------------------------------------------------------------------------- nvidia-smi

QUERY_FIELDS = [
    "index", "name", "uuid", "pci.bus_id",
    "clocks.current.sm", "clocks.max.sm", "clocks.current.memory", "clocks.max.memory",
    "clocks.current.graphics", "power.draw", "power.limit", "temperature.gpu",
    "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
    "clocks_throttle_reasons.active",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
]
# Asked again with only these when a driver rejects a field ("... is not a valid field").
CORE_QUERY_FIELDS = QUERY_FIELDS[:16]
COMPUTE_APPS_FIELDS = ["gpu_uuid", "pid", "used_memory", "process_name"]

# csv header name (aliases of both eras included) -> key of the GPU dict
_QUERY_KEYS = {
    "index": "index", "name": "name", "uuid": "uuid", "pci.bus_id": "bus_id",
    "clocks.current.sm": "clock_sm_mhz", "clocks.sm": "clock_sm_mhz",
    "clocks.max.sm": "clock_sm_max_mhz", "clocks.max.memory": "clock_mem_max_mhz",
    "clocks.current.memory": "clock_mem_mhz", "clocks.mem": "clock_mem_mhz",
    "clocks.current.graphics": "clock_gr_mhz", "clocks.gr": "clock_gr_mhz",
    "power.draw": "power_w", "power.limit": "power_limit_w", "temperature.gpu": "temp_c",
    "utilization.gpu": "util_gpu_pct", "utilization.memory": "util_mem_pct",
    "memory.used": "mem_used_mib", "memory.total": "mem_total_mib",
    "ecc.errors.corrected.volatile.total": "ecc_volatile_corrected",
    "ecc.errors.uncorrected.volatile.total": "ecc_volatile_uncorrected",
}
_REASON_KEYS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")


def find_nvidia_smi() -> Optional[str]:
    """``$GPUROOM_NVIDIA_SMI`` when set (a box with it off PATH), else ``nvidia-smi`` on PATH."""
    override = os.environ.get("GPUROOM_NVIDIA_SMI")
    if override:
        return override if os.access(override, os.X_OK) else None
    return shutil.which("nvidia-smi")


def run_nvidia_smi(binary: str, args: Sequence[str],
                   timeout_s: float = SMI_TIMEOUT_S) -> Tuple[Optional[str], Optional[str]]:
    """(stdout, None) on success, (None, reason) otherwise; never raises."""
    try:
        done = subprocess.run([binary, *args], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi {' '.join(args)[:60]} timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return None, f"nvidia-smi not runnable: {exc}"
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        # nvidia-smi prints its own errors on stdout ("NVIDIA-SMI has failed because ...").
        said = (out.strip() or done.stderr.decode("utf-8", "replace").strip())
        return None, f"nvidia-smi exited {done.returncode}: {said[:_ERROR_CHARS]}"
    return out, None


def _hex_mask(value: Any) -> Optional[int]:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 16) if value.lower().startswith("0x") else int(value)
        except ValueError:
            return None
    return None


def gpu_from_query_row(row: Row, position: int) -> Row:
    """A ``parse_query_csv`` row -> the common GPU dict; fields not queried stay None."""
    gpu = _new_gpu()
    for field, value in row.items():
        key = _QUERY_KEYS.get(field)
        if key is not None:
            gpu[key] = value
    if gpu["index"] is None:
        gpu["index"] = position
    for field in _REASON_KEYS:
        if field in row:
            gpu["clock_event_reasons"] = decode_clock_reasons(_hex_mask(row[field]))
    return gpu


def _owner(gpus: List[Row], found: Optional[Row], identified: bool) -> Optional[Row]:
    """The GPU a process row belongs to; a row naming no GPU belongs to a lone GPU."""
    if found is not None:
        return found
    return gpus[0] if not identified and len(gpus) == 1 else None


def _smi_processes(binary: str, gpus: List[Row]) -> Tuple[Optional[Set[int]], Optional[str]]:
    """Fill each GPU's processes from --query-compute-apps, else from the plain table.

    Returns every pid listed (rows whose GPU is not in ``gpus`` included: they are still listed,
    so not zombies) or None with the reason no list could be read.
    """
    pids: Set[int] = set()
    out, error = run_nvidia_smi(binary, ["--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS),
                                         "--format=csv"])
    if out is not None:
        by_uuid = {g["uuid"]: g for g in gpus if g["uuid"]}
        for row in parse_query_csv(out):
            pid = row.get("pid")
            if not isinstance(pid, int):
                continue
            pids.add(pid)
            uuid = row.get("gpu_uuid")
            owner = _owner(gpus, by_uuid.get(uuid), uuid is not None)
            if owner is not None:
                owner["processes"].append({
                    "pid": pid, "type": "C", "name": row.get("process_name"),
                    "used_mib": row.get("used_gpu_memory", row.get("used_memory")),
                    "comm": proc_comm(pid), **proc_owner(pid)})
        return pids, None
    table_out, table_error = run_nvidia_smi(binary, [])
    if table_out is None:
        return None, f"no process list: {error}; {table_error}"
    by_index = {g["index"]: g for g in gpus}
    for proc in parse_nvsmi_table(table_out)["processes"]:
        pids.add(proc["pid"])
        owner = _owner(gpus, by_index.get(proc["gpu"]), proc["gpu"] is not None)
        if owner is not None:
            owner["processes"].append({
                "pid": proc["pid"], "type": proc["type"], "name": proc["name"],
                "used_mib": proc["used_mib"], "comm": proc_comm(proc["pid"]),
                **proc_owner(proc["pid"])})
    return pids, None


def smi_gpus(binary: str) -> Tuple[List[Row], Optional[str], Optional[Set[int]]]:
    """(gpus, error, pids listed or None when unknown) through the nvidia-smi binary."""
    out, error = run_nvidia_smi(binary, ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv"])
    if out is None and error is not None and "is not a valid field" in error:
        out, error = run_nvidia_smi(binary, ["--query-gpu=" + ",".join(CORE_QUERY_FIELDS),
                                             "--format=csv"])
    if out is None:
        return [], error, None
    gpus = [gpu_from_query_row(row, i) for i, row in enumerate(parse_query_csv(out))]
    if not gpus:
        return [], f"nvidia-smi listed no GPU: {out.strip()[:_ERROR_CHARS]}", None
    pids, proc_error = _smi_processes(binary, gpus)
    return gpus, proc_error, pids


# ---------------------------------------------------------------------------- the section


def _gpu_pids(gpus: List[Row]) -> Set[int]:
    return {p["pid"] for g in gpus for p in g["processes"]}


def collect(session: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    """The ``gpus`` section: NVML, else nvidia-smi, else none. Never raises for a missing GPU.

    Leaves the pids the GPU process list shows in ``session.state["gpu_pids"]`` (absent when no
    list could be read) for the /dev/nvidia* holder scan (U11).
    """
    state = session.state
    state.pop("gpu_pids", None)
    nvml, nvml_error = _session_nvml(state)
    if nvml is not None:
        try:
            gpus = nvml_gpus(nvml)
        except nvml.NVMLError as exc:
            # The driver went away under a live session: init again on a later request.
            state.pop("_gpu_nvml", None)
            return {"gpus": [], "gpu_source": "nvml", "gpu_error": f"NVML: {exc}",
                    "gpu_nvml_error": str(exc)}
        state["gpu_pids"] = _gpu_pids(gpus)
        return {"gpus": gpus, "gpu_source": "nvml", "gpu_error": None, "gpu_nvml_error": None}
    binary = find_nvidia_smi()
    if binary is None:
        return {"gpus": [], "gpu_source": "none",
                "gpu_error": f"{nvml_error}; no nvidia-smi on PATH or in $GPUROOM_NVIDIA_SMI",
                "gpu_nvml_error": nvml_error}
    gpus, error, pids = smi_gpus(binary)
    if not gpus:
        return {"gpus": [], "gpu_source": "none", "gpu_error": f"{nvml_error}; {error}",
                "gpu_nvml_error": nvml_error}
    if pids is not None:
        state["gpu_pids"] = pids
    return {"gpus": gpus, "gpu_source": "nvidia-smi", "gpu_error": error,
            "gpu_nvml_error": nvml_error}


__all__ = [
    "CLOCK_REASON_BITS", "collect", "decode_clock_reasons", "find_nvidia_smi", "nvml_gpus",
    "parse_clock_reasons", "parse_dmon", "parse_nvsmi_table", "parse_query_csv",
    "run_nvidia_smi", "smi_value",
]
