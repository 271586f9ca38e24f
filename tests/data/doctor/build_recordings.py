"""Snapshots and recordings for the doctor and danger-clock tests (run from the repo root).

    .venv/bin/python tests/data/doctor/build_recordings.py

Every snapshot starts from ``probe-vm.json``: the real ``gpuroom.remote probe`` of the dev VM
(no GPU). GPU, kernel, cgroup and disk values are taken from the captures under
/work/shared/fixtures named next to each helper. Recordings are JSON lines in the format
tui/fleet/live.py's Recorder writes. Deterministic: the same inputs write the same files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PROBE: dict[str, Any] = json.loads((HERE / "probe-vm.json").read_text())
T0 = float(PROBE["host"]["time"])
BOOT = PROBE["host"]["boot_id"]
# A second boot id for the rebooted box (the format of /proc/sys/kernel/random/boot_id).
BOOT2 = "3c1e9d2a-52b4-4d0e-9a57-0b8d8e1f6a11"
POLL_S = 5.0


def h100(index: int, power: float = 259.0, temp: float = 36.0, util: float = 25.0,
         used_mib: float = 18449.0) -> dict[str, Any]:
    """fixtures/nvsmi_table/driver535-8xH100-with-processes.txt, GPU 0 row (259 W / 700 W,
    36 C, 25 %, 18449 of 81559 MiB). Clocks are not in that capture: 1980 MHz is the H100 SXM5
    max SM clock, running at it under load with no clock-event reason."""
    return {
        "index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": None, "bus_id": None,
        "clock_sm_mhz": 1980, "clock_sm_max_mhz": 1980,
        "clock_mem_mhz": 2619, "clock_mem_max_mhz": 2619, "clock_gr_mhz": 1980,
        "power_w": power, "power_limit_w": 700.0, "temp_c": temp,
        "util_gpu_pct": util, "util_mem_pct": None,
        "mem_used_mib": used_mib, "mem_total_mib": 81559,
        "clock_event_reasons": [],
        "ecc_volatile_corrected": None, "ecc_volatile_uncorrected": None,
        "processes": [], "field_errors": {},
    }


def h100_idle(index: int = 0) -> dict[str, Any]:
    """The same board at rest: fixtures/nvsmi_table/driver535-8xH100-with-processes.txt sets
    the limit (700 W); the idle draw (69 W, 0 %, 1 MiB) is the H100's P0 idle floor."""
    gpu = h100(index, power=69.0, temp=31.0, util=0.0, used_mib=1.0)
    gpu["clock_sm_mhz"] = 345
    gpu["clock_event_reasons"] = ["idle"]
    return gpu


def a10_throttled() -> dict[str, Any]:
    """fixtures/throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt:
    HW Slowdown and HW Power Brake Slowdown active, SM 210 of 1695 MHz, 21.30 of 150 W, 33 C."""
    return {
        "index": 0, "name": "NVIDIA A10", "uuid": None, "bus_id": None,
        "clock_sm_mhz": 210, "clock_sm_max_mhz": 1695,
        "clock_mem_mhz": 405, "clock_mem_max_mhz": 6251, "clock_gr_mhz": 210,
        "power_w": 21.30, "power_limit_w": 150.0, "temp_c": 33,
        "util_gpu_pct": 0, "util_mem_pct": 0,
        "mem_used_mib": 1, "mem_total_mib": 23028,
        "clock_event_reasons": ["idle", "hw_slowdown", "hw_power_brake_slowdown"],
        "ecc_volatile_corrected": None, "ecc_volatile_uncorrected": None,
        "processes": [], "field_errors": {},
    }


def morpheus_underfed() -> dict[str, Any]:
    """fixtures/dmon/morpheus-abp-nvsmi-default.txt, row 1 (70 W, 48 C, pclk 1350, mclk 7000)
    with sm % raised to 99 (the same capture's peak): U21's 'busy util, idle board'. The 300 W
    limit and 1875 MHz max are that capture's README card and its highest pclk."""
    return {
        "index": 0, "name": "", "uuid": None, "bus_id": None,
        "clock_sm_mhz": 1000, "clock_sm_max_mhz": 1875,
        "clock_mem_mhz": 7000, "clock_mem_max_mhz": 7000, "clock_gr_mhz": 1000,
        "power_w": 70, "power_limit_w": 300.0, "temp_c": 48,
        "util_gpu_pct": 99, "util_mem_pct": 1,
        "mem_used_mib": 4000, "mem_total_mib": 24576,
        "clock_event_reasons": [],
        "ecc_volatile_corrected": None, "ecc_volatile_uncorrected": None,
        "processes": [], "field_errors": {},
    }


# fixtures/dmesg_oom/mini-container-constraint-memcg.txt, second line, verbatim.
OOM_LINE = ("[38505.055794] Memory cgroup out of memory: Killed process 184256 (sh) "
            "total-vm:155376kB, anon-rss:3504kB, file-rss:3216kB, shmem-rss:0kB, UID:0 "
            "pgtables:112kB oom_score_adj:0")
# The Xid 79 form fixtures/dmesg_xid/nvsentinel155-... quotes in its note, as the kernel
# parser (remote/kernel.py) reports it.
XID79_LINE = "[1234.5] NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, " \
             "GPU has fallen off the bus."


def xid79_event() -> dict[str, Any]:
    return {"kind": "xid", "code": 79, "pci": "0000:44:00", "pid": None, "process": None,
            "line": XID79_LINE, "ts": 1234.5}


def oom_event(pid: int = 184256) -> dict[str, Any]:
    return {"kind": "oom", "pid": pid, "process": "sh", "memcg": True, "line": OOM_LINE,
            "ts": 38505.055786}


def log_chunk(size: int) -> dict[str, Any]:
    """remote/queue.py read_log_chunk() shape after the cursor caught up."""
    return {"offset": size, "next_offset": size, "inode": 2621447, "size": size,
            "data_b64": "", "reset": False}


def job(job_id: str = "j1", state: str = "running", *, attempt: int = 1, pid: int = 184256,
        start: float = T0 - 3600, boot_id: str = BOOT, log_size: int | None = 4096,
        ckpt: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A job as remote/queue_events.py fold() + queue.job_view() report it."""
    attempts = [{"attempt": attempt, "boot_id": boot_id, "start": start, "end": None,
                 "exit_code": None, "signal": None, "duration": None, "end_reason": None,
                 "pid": pid, "pgid": pid, "slot": 0, "gpus": None, "starttime": None}]
    out: dict[str, Any] = {
        "id": job_id, "name": "train", "argv": ["python", "train.py"], "cwd": "/root",
        "env": {}, "gpus": 1, "retries": 0, "state": state, "reason": None,
        "retries_used": 0, "attempts": attempts, "log": f"/root/.gpuroom/logs/{job_id}.log",
        "sync": None, "kill_pending": False, "ckpt_dir": "/root/ckpt",
    }
    if log_size is not None and state in ("launching", "running"):
        out["log_chunk"] = log_chunk(log_size)
    if ckpt is not None:
        out["checkpoint"] = ckpt
    out.update(extra)
    return out


def ended(j: dict[str, Any], state: str, t: float, **attempt: Any) -> dict[str, Any]:
    j = copy.deepcopy(j)
    j["state"] = state
    j["attempts"][-1].update({"end": t, **attempt})
    j.pop("log_chunk", None)
    j.pop("checkpoint", None)
    return j


def queue(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"root": "/root/.gpuroom",
            "queues": {"default": {"queue": "default", "jobs": list(jobs)}} if jobs else {}}


def snapshot(t: float = T0, *, gpus: list[dict[str, Any]] | None = None,
             jobs: list[dict[str, Any]] | None = None, boot_id: str = BOOT,
             uptime_s: float | None = None, oom_kill: int = 0,
             events: list[dict[str, Any]] | None = None,
             disks: list[dict[str, Any]] | None = None,
             holders: list[dict[str, Any]] | None = None,
             vcpus: float | None = None) -> dict[str, Any]:
    snap = copy.deepcopy(PROBE)
    snap["host"]["time"] = t
    snap["host"]["boot_id"] = boot_id
    snap["host"]["uptime_s"] = (uptime_s if uptime_s is not None
                                else PROBE["host"]["uptime_s"] + (t - T0))
    snap["cgroup"]["oom_kill"] = oom_kill
    snap["cgroup"]["cpu_quota_vcpus"] = vcpus
    if gpus is not None:
        snap["gpus"] = gpus
        snap["gpu_source"], snap["gpu_error"], snap["gpu_nvml_error"] = "nvml", None, None
    snap["kernel"]["events"] = events or []
    snap["kernel"]["cursor"]["boot_id"] = boot_id
    if disks is not None:
        snap["disks"] = disks
    snap["vram_holders"] = holders or []
    snap["queue"] = queue(*(jobs or []))
    return snap


def inode_full_disk() -> dict[str, Any]:
    """fixtures/df/moby-37077-df-i-root-100pct-efi-dash.txt root line: 30736384 inodes,
    251743 free (99 %); bytes 66 % free as the issue reports df -h fine."""
    return {"path": "/data", "real_path": "/data", "device": 64769,
            "total_bytes": 470 * (1 << 30), "free_bytes": int(470 * (1 << 30) * 0.66),
            "total_inodes": 30736384, "free_inodes": 251743}


def line(t: float, host: str, snap: dict[str, Any] | None, *, state: str = "up",
         error: str | None = None, profile: str = "generic-ssh") -> dict[str, Any]:
    return {"t": t, "host": host, "profile": profile, "state": state, "error": error,
            "snapshot": snap if state == "up" else None}


def _training(t: float, n: int) -> dict[str, Any]:
    """The H100 box of the capture, one job training, its log growing each poll."""
    return snapshot(t, gpus=[h100(0)], jobs=[job(log_size=4096 + 512 * n)])


def recordings() -> dict[str, list[dict[str, Any]]]:
    host = "h100-a"
    out: dict[str, list[dict[str, Any]]] = {}
    t1, t2, t3 = T0, T0 + POLL_S, T0 + 2 * POLL_S

    running = [line(t1, host, _training(t1, 0)), line(t2, host, _training(t2, 1))]

    # Reboot: a poll fails while the box is down, then it answers with a new boot id, a low
    # uptime, no job running (the runner marked it orphaned) and an idle GPU.
    j_dead = ended(_training(t2, 1)["queue"]["queues"]["default"]["jobs"][0], "failed", t3,
                   end_reason="orphaned_by_reboot")
    rebooted = snapshot(T0 + 120, gpus=[h100_idle()], jobs=[j_dead], boot_id=BOOT2,
                        uptime_s=41.0)
    out["reboot"] = [*running, line(T0 + 120, host, rebooted)]

    # GEN8: the link drops for two polls and comes back with the job still training.
    out["link_drop"] = [*running,
        line(t3, host, None, state="stale", error="ssh: connect to host h100-a port 22: "
             "Connection timed out"),
        line(T0 + 3 * POLL_S, host, None, state="stale", error="ssh: connect to host h100-a "
             "port 22: Connection timed out"),
        line(T0 + 4 * POLL_S, host, _training(T0 + 4 * POLL_S, 5))]

    # cgroup OOM: the oom_kill counter rises 0 -> 1 (the value of
    # fixtures/cgroup/memory.events-docker-lab-box-oom_kill1.txt) and the job ends by SIGKILL.
    j_oom = ended(running[-1]["snapshot"]["queue"]["queues"]["default"]["jobs"][0], "failed",
                  t3, exit_code=None, signal=9, end_reason="exited")
    out["cgroup_oom"] = [*running,
        line(t3, host, snapshot(t3, gpus=[h100_idle()], jobs=[j_oom], oom_kill=1))]

    # Xid 79: the GPU falls off the bus, the job dies with it.
    j_xid = ended(running[-1]["snapshot"]["queue"]["queues"]["default"]["jobs"][0], "failed",
                  t3, exit_code=1, end_reason="exited")
    out["xid79"] = [*running,
        line(t3, host, snapshot(t3, gpus=[], jobs=[j_xid], events=[xid79_event()]))]

    # Throttling: the A10 capture, nothing running.
    a10 = "a10-c"
    out["throttle"] = [line(T0 + i * POLL_S, a10, snapshot(T0 + i * POLL_S,
                                                           gpus=[a10_throttled()]),
                            profile="runpod") for i in range(3)]

    # Inode-full /data beside the VM's real disks, a job training happily.
    out["inode_full"] = [
        line(T0 + i * POLL_S, host,
             snapshot(T0 + i * POLL_S, gpus=[h100(0)], jobs=[job(log_size=4096 + 512 * i)],
                      disks=[*copy.deepcopy(PROBE["disks"]), inode_full_disk()]))
        for i in range(3)]

    # An idle box billing for three hours: polled every 10 min, nothing running, GPU at rest.
    out["idle_3h"] = [
        line(T0 + i * 600, "idle-box",
             snapshot(T0 + i * 600, gpus=[h100_idle()], uptime_s=3600.0 + i * 600),
             profile="lambda")
        for i in range(19)]
    return out


def main() -> None:
    for name, lines in recordings().items():
        path = HERE / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x, separators=(",", ":"), sort_keys=True) + "\n"
                                for x in lines))
        print(f"wrote {path} ({len(lines)} polls)")


if __name__ == "__main__":
    main()
