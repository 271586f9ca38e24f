"""Build the scenario files the snapshot and Pilot tests load (run from the repo root).

    .venv/bin/python tests/data/build_scenarios.py

Everything starts from ``probe-vm.json`` (real probe output of the dev VM); GPU, disk and
queue sections are assembled from the captures named in tests/data/README.md. Deterministic:
the same inputs write the same files.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PROBE = json.loads((HERE / "probe-vm.json").read_text())
T0 = float(PROBE["host"]["time"])  # the probe's own clock reading
NOW = T0 + 30.0  # the fixed clock every test injects
EMPTY_QUEUE: dict[str, Any] = {"root": "/root/.gpuroom", "queues": {}}


def h100(index: int, power: float, temp: float, util: float, used_mib: float) -> dict[str, Any]:
    """One GPU row of fixtures/nvsmi_table/driver535-8xH100-with-processes.txt.

    Clocks are not in that capture: SM/mem max are the H100 SXM5 spec (1980/2619 MHz) and the
    current SM clock is set to 1980 (P0 under load, no clock-event reason active).
    """
    return {
        "index": index, "name": "NVIDIA H100 80GB HBM3",
        "clock_sm_mhz": 1980, "clock_sm_max_mhz": 1980,
        "clock_mem_mhz": 2619, "clock_mem_max_mhz": 2619,
        "power_w": power, "power_limit_w": 700.0, "temp_c": temp,
        "util_gpu_pct": util, "util_mem_pct": None,
        "mem_used_mib": used_mib, "mem_total_mib": 81559,
        "clock_reasons": [],
    }


H100_ROWS = [  # (power W, temp C, util %, used MiB) per GPU, verbatim from the capture
    (259, 36, 25, 18449), (264, 36, 25, 16273), (266, 36, 27, 16273), (268, 35, 27, 16273),
    (246, 36, 26, 16273), (249, 36, 24, 16273), (263, 35, 28, 16273), (245, 34, 24, 16273),
]

# fixtures/dmon/morpheus-abp-nvsmi-default.txt: (pwr W, gtemp C, sm %, mem %, mclk, pclk)
MORPHEUS_DMON = [
    (70, 48, 5, 1, 7000, 1350), (68, 48, 11, 1, 7000, 1350), (69, 48, 3, 1, 7000, 1350),
    (270, 53, 10, 1, 7000, 1875), (274, 55, 75, 46, 7000, 1740), (278, 55, 86, 56, 7000, 1755),
    (279, 56, 99, 63, 7000, 1755), (277, 57, 86, 55, 7000, 1755), (281, 57, 85, 54, 7000, 1740),
]


def morpheus_gpu(row: tuple[int, ...]) -> dict[str, Any]:
    pwr, temp, sm, mem, mclk, pclk = row
    # Max clocks and the power limit are not in a dmon capture: the max is the highest
    # pclk/mclk seen in the series, the limit an RTX-class 300 W (stated in the README).
    return {
        "index": 0, "name": "",  # not stated in the capture
        "clock_sm_mhz": pclk, "clock_sm_max_mhz": 1875,
        "clock_mem_mhz": mclk, "clock_mem_max_mhz": 7000,
        "power_w": pwr, "power_limit_w": 300.0, "temp_c": temp,
        "util_gpu_pct": sm, "util_mem_pct": mem, "clock_reasons": [],
    }


def a10_throttled() -> dict[str, Any]:
    """fixtures/throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt."""
    return {
        "index": 0, "name": "NVIDIA A10",
        "clock_sm_mhz": 210, "clock_sm_max_mhz": 1695,
        "clock_mem_mhz": 405, "clock_mem_max_mhz": 6251,
        "power_w": 21.30, "power_limit_w": 150.0, "temp_c": 33,
        "util_gpu_pct": 0, "util_mem_pct": 0,
        "mem_used_mib": 1, "mem_total_mib": 23028,
        "clock_reasons": ["idle", "hw_slowdown", "hw_power_brake_slowdown"],
    }


def rtx2080_power_cap() -> dict[str, Any]:
    """fixtures/throttle/rtx2080-driver535era-q-gpu-block-swpowercap.txt."""
    return {
        "index": 1, "name": "NVIDIA GeForce RTX 2080",
        "clock_sm_mhz": 300, "clock_sm_max_mhz": 2130,
        "clock_mem_mhz": 405, "clock_mem_max_mhz": 7000,
        "power_w": 18.31, "power_limit_w": 215.0, "temp_c": 27,
        "util_gpu_pct": None, "util_mem_pct": None,
        "clock_reasons": ["sw_power_cap"],
    }


LOG_TEXT = (
    "loading config llama1b.yaml\n"
    "\x1b[32mINFO\x1b[0m world_size=8 micro_batch=4 grad_accum=8\n"
    "resumed from /data/ckpt/step_4000.pt (step 4000)\n"
    "step 4010 loss 2.3412 lr 3.0e-04 tok/s 412k\n"
    "step 4020 loss 2.3377 lr 3.0e-04 tok/s 409k\n"
    "eval  12%|#2        | 6/50\reval  54%|#####4    | 27/50\reval 100%|##########| 50/50\n"
    "\x1b]52;c;cm0gLXJmIH4=\x07step 4030 loss 2.3301 lr 3.0e-04 tok/s 411k\n"
    "step 4040 loss 2.3290 lr 3.0e-04 tok/s 410k\n"
)


def log_chunk(text: str, inode: int = 2621447) -> dict[str, Any]:
    """remote/queue.py read_log_chunk() shape, from offset 0."""
    data = text.encode()
    return {"offset": 0, "next_offset": len(data), "inode": inode, "size": len(data),
            "data_b64": base64.b64encode(data).decode(), "reset": False}


def job(job_id: str, name: str, state: str, argv: list[str], attempts: list[dict[str, Any]],
        **extra: Any) -> dict[str, Any]:
    """A job as remote/queue_events.py fold() + queue.job_view() report it."""
    out: dict[str, Any] = {
        "id": job_id, "name": name, "argv": argv, "state": state, "reason": None,
        "retries": 2, "retries_used": max(0, len(attempts) - 1), "gpus": None,
        "attempts": [{"attempt": i + 1, "exit_code": None, "end": None, **a}
                     for i, a in enumerate(attempts)],
        "log": f"/root/.gpuroom/queues/default/logs/{job_id}.log", "kill_pending": False,
    }
    out.update(extra)
    return out


def queue(extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    jobs = [
        job("j2", "tokenize", "succeeded", ["python", "prep.py", "--shards", "256"],
            [{"start": T0 - 5 * 3600, "end": T0 - 4 * 3600, "exit_code": 0}]),
        job("j3", "llama-1b", "running",
            ["torchrun", "--nproc-per-node=8", "train.py", "--config", "llama1b.yaml"],
            [{"start": T0 - 4 * 3600 + 60, "end": T0 - 3 * 3600 - 500, "exit_code": 1},
             {"start": T0 - 3 * 3600 - 420}],
            checkpoint={"path": "/data/ckpt/step_4000.pt", "size": 2_147_483_648,
                        "mtime": T0 - 540},
            log_chunk=log_chunk(LOG_TEXT)),
        job("j4", "eval-sweep", "queued", ["python", "eval.py", "--ckpt", "latest"], []),
    ]
    return {"root": "/root/.gpuroom",
            "queues": {"default": {"queue": "default", "jobs": jobs + (extra or [])}}}


def vm_snapshot(**sections: Any) -> dict[str, Any]:
    snap = copy.deepcopy(PROBE)
    snap.update(sections)
    return snap


def host(name: str, snapshot: dict[str, Any] | None, *, profile: str = "generic-ssh",
         state: str = "up", last_ok: float | None = T0, error: str | None = None,
         history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": name, "profile": profile, "state": state, "last_ok": last_ok,
            "error": error, "snapshot": snapshot, "history": history or []}


def h100_host(name: str = "h100-a") -> dict[str, Any]:
    gpus = [h100(i, *row) for i, row in enumerate(H100_ROWS)]
    return host(name, vm_snapshot(gpus=gpus, queue=queue()), profile="lambda")


def morpheus_host(name: str = "rtx-b") -> dict[str, Any]:
    # The dmon series arrives one poll per row (5 s apart), so the sparklines are real.
    history = []
    for i, row in enumerate(MORPHEUS_DMON[:-1]):
        snap = vm_snapshot(gpus=[morpheus_gpu(row)], queue=EMPTY_QUEUE)
        snap["host"]["time"] = T0 - 5 * (len(MORPHEUS_DMON) - 1 - i)
        history.append({"at": snap["host"]["time"], "snapshot": snap})
    final = vm_snapshot(gpus=[morpheus_gpu(MORPHEUS_DMON[-1])], queue=EMPTY_QUEUE)
    return host(name, final, profile="vastai", history=history)


def local_host() -> dict[str, Any]:
    return host("local", vm_snapshot(), profile="local")  # the probe verbatim: no GPU section


def scenario(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"now": NOW, "hosts": hosts}


def main() -> None:
    out: dict[str, dict[str, Any]] = {}
    out["healthy"] = scenario([h100_host(), morpheus_host(), local_host()])

    stale = morpheus_host()
    stale.update(state="stale", last_ok=NOW - 180,
                 error="poll timed out after 10 s; reconnecting")
    out["stale"] = scenario([h100_host(), stale, local_host()])

    throttled = vm_snapshot(gpus=[a10_throttled(), rtx2080_power_cap()], queue=EMPTY_QUEUE)
    out["throttle"] = scenario([host("a10-c", throttled, profile="runpod"), local_host()])

    # U7: bytes look fine, inodes are gone. Inode numbers: fixtures/df/moby-37077 root line.
    inode_snap = vm_snapshot(queue=queue())
    inode_snap["disks"] = [*copy.deepcopy(PROBE["disks"][:1]), {
        "path": "/data", "real_path": "/data", "device": 64769,
        "total_bytes": 470 * (1 << 30), "free_bytes": int(470 * (1 << 30) * 0.66),
        "total_inodes": 30736384, "free_inodes": 251743,
    }]
    inode_snap["gpus"] = [h100(i, *row) for i, row in enumerate(H100_ROWS[:2])]
    out["inode"] = scenario([host("h100-a", inode_snap, profile="lambda"), local_host()])

    failed_q = queue([job(
        "j5", "finetune", "failed", ["python", "finetune.py", "--bs", "64"],
        [{"start": T0 - 1800, "end": T0 - 1200, "exit_code": 137},
         {"start": T0 - 1100, "end": T0 - 600, "exit_code": 137},
         {"start": T0 - 500, "end": T0 - 240, "exit_code": 137}],
        checkpoint={"path": "/data/ckpt/ft_step_200.pt", "size": 1 << 30, "mtime": T0 - 900},
        log_chunk=log_chunk("epoch 1 step 200 loss 1.92\nKilled\n", inode=2621501),
    )])
    jobs = failed_q["queues"]["default"]["jobs"]
    # Nothing running: the failed job stands out.
    failed_q["queues"]["default"]["jobs"] = [j for j in jobs if j["id"] != "j3"]
    gpus = [h100(i, *row) for i, row in enumerate(H100_ROWS)]
    out["failed"] = scenario([host("h100-a", vm_snapshot(gpus=gpus, queue=failed_q),
                                   profile="lambda"), local_host()])

    for name, data in out.items():
        (HERE / f"scenario-{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True)
                                                    + "\n")


if __name__ == "__main__":
    main()
