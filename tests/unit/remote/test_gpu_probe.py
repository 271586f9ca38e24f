"""The gpus and vram_holders sections: NVML, the nvidia-smi fallback, "none", and the U11 scan.

This machine has no GPU and no libnvidia-ml, so NVML failing to load here is the real state.
The GPU boundary alone is replayed: the fake ``nvidia-smi`` prints real captures, and the
NVML stand-in answers with values read off two real ``nvidia-smi -q`` captures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from fakes import FIXTURES, NVIDIA_SMI, capture
from fakes.nvml import A10, RTX2080, FakeNvml

from gpuroom.remote import gpu, vram
from gpuroom.remote.probe import ProbeSession

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"no fixtures at {FIXTURES}")



def _nvml_loads() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


NVML_HERE = _nvml_loads()


# ---------------------------------------------------------------- bitmask decode


def test_decode_matches_the_installed_nvml_binding_in_both_eras() -> None:
    expected = {
        "GpuIdle": "idle", "ApplicationsClocksSetting": "applications_clocks_setting",
        "SwPowerCap": "sw_power_cap", "HwSlowdown": "hw_slowdown", "SyncBoost": "sync_boost",
        "SwThermalSlowdown": "sw_thermal_slowdown", "HwThermalSlowdown": "hw_thermal_slowdown",
        "HwPowerBrakeSlowdown": "hw_power_brake_slowdown",
        "DisplayClockSetting": "display_clock_setting",
    }
    checked = 0
    for era in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        for suffix, name in expected.items():
            bit = getattr(pynvml, era + suffix, None)
            if bit is None:
                continue
            assert gpu.decode_clock_reasons(bit) == [name], era + suffix
            checked += 1
    assert checked >= len(expected)


def test_decode_combined_unknown_and_empty() -> None:
    assert gpu.decode_clock_reasons(0x1 | 0x8 | 0x80) == ["idle", "hw_slowdown",
                                                          "hw_power_brake_slowdown"]
    assert gpu.decode_clock_reasons(0) == []
    assert gpu.decode_clock_reasons(None) is None
    assert gpu.decode_clock_reasons(0x8000000000000000) == ["unknown"]
    assert gpu.decode_clock_reasons(0x4 | 0x800) == ["sw_power_cap", "unknown_0x800"]


@needs_fixtures
def test_decode_agrees_with_the_q_text_of_the_same_state() -> None:
    from gpuroom.remote.gpu import parse_clock_reasons

    (a10,) = parse_clock_reasons(capture(A10))
    assert gpu.decode_clock_reasons(0x1 | 0x8 | 0x80) == a10["active"]


def test_query_csv_hex_reasons_reach_the_gpu_dict() -> None:
    # The csv field clocks_throttle_reasons.active prints the same mask in hex.
    rows = gpu.parse_query_csv("index, clocks_throttle_reasons.active\n0, 0x0000000000000024\n")
    reasons = gpu.gpu_from_query_row(rows[0], 0)["clock_event_reasons"]
    assert reasons == ["sw_power_cap", "sw_thermal_slowdown"]


# ---------------------------------------------------------------- NVML not loadable (real)


@pytest.mark.skipif(NVML_HERE, reason="NVML loads on this machine")
def test_nvml_not_loadable_is_reported_and_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUROOM_NVIDIA_SMI", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    session = ProbeSession()
    first = gpu.collect(session, {})
    tried_at = session.state["_gpu_nvml"]["at"]
    second = gpu.collect(session, {})
    assert first == second
    assert first["gpus"] == []
    assert first["gpu_source"] == "none"
    assert "NVML" in first["gpu_error"]
    assert "nvidia-smi" in first["gpu_error"]
    assert "Library Not Found" in first["gpu_nvml_error"]
    # Not retried per request, and nothing to shut down.
    assert session.state["_gpu_nvml"]["at"] == tried_at
    assert session.state.get("_closers", []) == []
    assert "gpu_pids" not in session.state


def test_pynvml_not_importable_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what a zipapp without pynvml.py sees
    module, error = gpu._load_nvml()
    assert module is None
    assert error is not None
    assert error.startswith("pynvml not importable")


# ---------------------------------------------------------------- NVML path (replayed values)


def test_nvml_gpus_read_every_field_and_not_supported_is_none() -> None:
    a10, rtx = gpu.nvml_gpus(FakeNvml())
    assert (a10["name"], a10["bus_id"], a10["uuid"]) == (
        "NVIDIA A10", "00000000:06:00.0", "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d")
    assert (a10["clock_sm_mhz"], a10["clock_sm_max_mhz"]) == (210, 1695)
    assert (a10["clock_mem_mhz"], a10["clock_mem_max_mhz"], a10["clock_gr_mhz"]) == (405, 6251,
                                                                                      210)
    assert (a10["power_w"], a10["power_limit_w"], a10["temp_c"]) == (21.3, 150.0, 33)
    assert (a10["mem_used_mib"], a10["mem_total_mib"]) == (1, 23028)
    assert a10["clock_event_reasons"] == ["idle", "hw_slowdown", "hw_power_brake_slowdown"]
    assert (a10["ecc_volatile_corrected"], a10["ecc_volatile_uncorrected"]) == (0, 0)
    # NotSupported is a normal "no such sensor": None, and not an error.
    assert rtx["ecc_volatile_corrected"] is None
    assert rtx["field_errors"] == {}
    assert rtx["clock_event_reasons"] == ["sw_power_cap"]
    assert rtx["processes"] == [{"pid": 1394, "type": "G", "name": None, "used_mib": 4,
                                 "comm": gpu.proc_comm(1394),
                                 **vram.proc_owner(1394)}]


def test_nvml_other_errors_are_kept_per_field() -> None:
    nvml = FakeNvml()

    def lost(h: int) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    nvml.nvmlDeviceGetPowerUsage = lost  # type: ignore[method-assign]
    a10 = gpu.nvml_gpus(nvml)[0]
    assert a10["power_w"] is None
    assert a10["field_errors"] == {"power_w": "GPU is lost"}
    assert a10["temp_c"] == 33  # the rest of the GPU still reads


def test_nvml_initialised_once_per_session(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    loads: list[float] = []

    def load() -> tuple[Any, None]:
        loads.append(time.monotonic())
        return nvml, None

    monkeypatch.setattr(gpu, "_load_nvml", load)
    session = ProbeSession()
    for _ in range(3):
        doc = gpu.collect(session, {})
    assert len(loads) == 1
    assert doc["gpu_source"] == "nvml"
    assert doc["gpu_error"] is None
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    assert session.state["gpu_pids"] == {1394}
    session.close()
    assert nvml.shutdowns == 1


def test_nvml_gone_mid_session_reinitialises(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    loads: list[int] = []

    def load() -> tuple[Any, None]:
        loads.append(1)
        return nvml, None

    def uninitialised() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    monkeypatch.setattr(gpu, "_load_nvml", load)
    session = ProbeSession()
    gpu.collect(session, {})
    nvml.nvmlDeviceGetCount = uninitialised  # type: ignore[method-assign]
    broken = gpu.collect(session, {})
    assert broken["gpus"] == []
    assert broken["gpu_error"].startswith("NVML: ")
    assert "gpu_pids" not in session.state
    del nvml.nvmlDeviceGetCount
    again = gpu.collect(session, {})
    assert len(again["gpus"]) == 2
    assert len(loads) == 2


# ---------------------------------------------------------------- nvidia-smi fallback


def _probe(env: dict[str, str]) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("GPUROOM_NVIDIA_SMI", "GPUROOM_FAKE_NVSMI")}
    base.update(env)
    done = subprocess.run([sys.executable, "-m", "gpuroom.remote", "probe"], env=base,
                          capture_output=True, text=True, timeout=60, check=True)
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@needs_fixtures
def test_probe_fallback_reads_replayed_nvidia_smi() -> None:
    doc = _probe({
        "GPUROOM_NVIDIA_SMI": str(NVIDIA_SMI),
        "GPUROOM_FAKE_NVSMI": "query_gpu/2x-rtx3090-driver515-csv-header.txt:"
                              "nvsmi_table/driver460-gtx1080-with-processes.txt",
    })
    assert [e["section"] for e in doc["errors"]] == []
    if NVML_HERE:
        pytest.skip("NVML loads here, so the fallback is not taken")
    assert doc["gpu_source"] == "nvidia-smi"
    assert doc["gpu_error"] is None
    assert "NVML" in doc["gpu_nvml_error"]
    g0, g1 = doc["gpus"]
    assert (g0["index"], g0["name"], g0["temp_c"], g0["util_gpu_pct"], g0["util_mem_pct"]) == (
        0, "NVIDIA GeForce RTX 3090", 42, 1, 13)
    assert (g0["mem_used_mib"], g0["mem_total_mib"]) == (963, 24576)
    assert (g1["temp_c"], g1["mem_used_mib"]) == (37, 1)
    # Fields the capture's query did not ask for stay None rather than going missing.
    assert g0["clock_sm_mhz"] is None
    assert set(g0) == set(gpu._EMPTY_GPU)
    # --query-compute-apps has no capture, so the processes come from the plain table.
    assert [(p["pid"], p["type"], p["name"], p["used_mib"]) for p in g0["processes"]] == [
        (1335, "G", "/usr/libexec/Xorg", 56), (1476, "G", "/usr/bin/gnome-shell", 6)]
    assert g1["processes"] == []
    assert doc["vram_holders"] == []


@needs_fixtures
def test_fallback_without_a_process_list_leaves_gpu_pids_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_NVIDIA_SMI", str(NVIDIA_SMI))
    monkeypatch.setenv("GPUROOM_FAKE_NVSMI", "query_gpu/rtx2060-driver460-csv-header.txt")
    monkeypatch.setattr(gpu, "_load_nvml", lambda: (None, "NVML init failed: test"))
    session = ProbeSession()
    doc = gpu.collect(session, {})
    assert doc["gpu_source"] == "nvidia-smi"
    (only,) = doc["gpus"]
    assert (only["name"], only["bus_id"], only["clock_gr_mhz"]) == (
        "GeForce RTX 2060", "00000000:09:00.0", 300)
    assert doc["gpu_error"].startswith("no process list")
    assert "gpu_pids" not in session.state


def test_probe_none_without_nvml_or_nvidia_smi(tmp_path: Path) -> None:
    doc = _probe({"PATH": str(tmp_path)})
    if NVML_HERE:
        pytest.skip("NVML loads here")
    assert doc["gpus"] == []
    assert doc["gpu_source"] == "none"
    assert "no nvidia-smi" in doc["gpu_error"]
    assert doc["errors"] == []


def test_nvidia_smi_with_driver_gone_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_NVIDIA_SMI", str(NVIDIA_SMI))
    monkeypatch.delenv("GPUROOM_FAKE_NVSMI", raising=False)
    monkeypatch.setattr(gpu, "_load_nvml", lambda: (None, "NVML init failed: test"))
    doc = gpu.collect(ProbeSession(), {})
    assert doc["gpu_source"] == "none"
    assert "nvidia-smi exited 9" in doc["gpu_error"]
    assert "couldn't communicate with the NVIDIA driver" in doc["gpu_error"]


def test_hung_nvidia_smi_times_out(tmp_path: Path) -> None:
    hung = tmp_path / "nvidia-smi"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    started = time.monotonic()
    out, error = gpu.run_nvidia_smi(str(hung), ["-q"], timeout_s=0.3)
    assert out is None
    assert error is not None
    assert "timed out" in error
    assert time.monotonic() - started < 5


def test_gpuroom_nvidia_smi_pointing_nowhere(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("GPUROOM_NVIDIA_SMI", str(tmp_path / "missing"))
    assert gpu.find_nvidia_smi() is None


@needs_fixtures
def test_fake_replays_q_and_dmon_by_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_FAKE_NVSMI", "dmon/k40m-2gpu-microway-zh.txt:" + RTX2080)
    q, q_error = gpu.run_nvidia_smi(str(NVIDIA_SMI), ["-q", "-d", "PERFORMANCE"])
    assert q_error is None
    assert q is not None
    assert [g["active"] for g in gpu.parse_clock_reasons(q)] == [["sw_power_cap"]]
    dmon, _ = gpu.run_nvidia_smi(str(NVIDIA_SMI), ["dmon", "-c", "1"])
    assert dmon is not None
    assert [r["sm"] for r in gpu.parse_dmon(dmon)] == [0, 97]
    none, error = gpu.run_nvidia_smi(str(NVIDIA_SMI), ["--query-gpu=index", "--format=csv"])
    assert none is None
    assert error is not None
    assert "exited 2" in error


# ---------------------------------------------------------------- /dev/nvidia* holders (U11)


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 1:].split()[0]


@pytest.fixture
def holder(tmp_path: Path) -> Any:
    """A real child process holding a real file open, as a CUDA process holds /dev/nvidia0."""
    device = tmp_path / "nvidia0"
    device.write_text("")
    long_arg = "x" * 2000
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(60)",
         str(device), long_arg],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        # "ready" is printed just before time.sleep: wait until the kernel has it asleep.
        deadline = time.monotonic() + 5
        while _state(child.pid) != "S" and time.monotonic() < deadline:
            time.sleep(0.005)
        yield SimpleNamespace(pid=child.pid, device=str(device), prefix=str(tmp_path))
    finally:
        child.kill()
        child.wait()


def test_scan_finds_the_child_holding_the_node(holder: Any) -> None:
    found = [h for h in vram.scan_holders("/proc", holder.prefix) if h["pid"] == holder.pid]
    assert len(found) == 1
    entry = found[0]
    assert entry["devices"] == [holder.device]
    assert entry["comm"] == os.path.basename(sys.executable)[:15]
    assert entry["state"] == "S"
    assert entry["cmdline"].startswith(sys.executable + " -c import sys")
    assert len(entry["cmdline"]) == vram.CMDLINE_MAX_CHARS
    assert entry["cmdline"].endswith("...")


def test_scan_with_predicate_and_unlisted_filter(holder: Any) -> None:
    holders = vram.scan_holders("/proc", lambda target: target == holder.device)
    assert [h["pid"] for h in holders] == [holder.pid]
    assert vram.unlisted(holders, {holder.pid}, own_pid=os.getpid()) == []
    assert vram.unlisted(holders, None, own_pid=os.getpid()) == holders
    assert vram.unlisted(holders, {1}, own_pid=holder.pid) == []


def test_scan_of_a_missing_proc_root_is_empty(tmp_path: Path) -> None:
    assert vram.scan_holders(str(tmp_path / "no-proc")) == []


@pytest.mark.skipif(any(n.startswith("nvidia") for n in os.listdir("/dev")),
                    reason="this machine has NVIDIA device nodes")
def test_vram_collect_without_device_nodes_is_empty() -> None:
    session = ProbeSession()
    session.state["gpu_pids"] = set()
    assert vram.collect(session, {}) == {"vram_holders": []}


def test_proc_owner_names_the_user_and_the_process_group_of_a_gpu_process() -> None:
    # Issue 20 item 3: the runner starts each attempt in its own session, so a job's workers
    # carry the attempt's pid as their process group; the jump host matches jobs by it.
    import pwd

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        assert vram.proc_owner(child.pid) == {
            "user": pwd.getpwuid(os.getuid()).pw_name, "pgid": child.pid}
        assert vram.proc_owner(os.getpid())["pgid"] == os.getpgid(0)
    finally:
        child.kill()
        child.wait()
    # Gone (or outside this PID namespace, U11): nothing to say.
    assert vram.proc_owner(child.pid) == {"user": None, "pgid": None}
