"""Build the scenario files the snapshot and Pilot tests load (run from the repo root, as root).

    sudo .venv/bin/python tests/data/build_scenarios.py

Every snapshot is ``gpuroom.remote.probe.ProbeSession().snapshot()`` on this machine: a real
queue running the jobs of tests/data/jobs, real disks (an inode-full tmpfs on /data, in a
private mount namespace), this machine's kernel log and cgroup, and the GPU boards of the
captures replayed at the NVML boundary (tests/data/realbox.py). This file sets only what the
jump host owns (host names, profiles, link state, last_ok, the fixed clock) and moves each box's
clock so its last poll reads the fixed clock. tests/data/README.md has each scenario's provenance.
"""

from __future__ import annotations

import json
import time
from typing import Any

import realbox
from realbox import NOW, T0, Box, Prober, dmon_boards, q_boards, shift, table_boards

H100 = "nvsmi_table/driver535-8xH100-with-processes.txt"
MORPHEUS = "dmon/morpheus-abp-nvsmi-default.txt"
A10 = "throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt"
RTX2080 = "throttle/rtx2080-driver535era-q-gpu-block-swpowercap.txt"


def host(name: str, polls: list[dict[str, Any]], *, profile: str, state: str = "up",
         last_ok: float | None = T0, error: str | None = None) -> dict[str, Any]:
    """One host of a scenario: its last poll is the snapshot, earlier ones its history, every
    box clock moved by one offset so the last poll reads T0."""
    by = T0 - polls[-1]["host"]["time"]
    moved = [shift(p, by) for p in polls]
    return {"name": name, "profile": profile, "state": state, "last_ok": last_ok,
            "error": error, "snapshot": moved[-1],
            "history": [{"at": p["host"]["time"], "snapshot": p} for p in moved[:-1]]}


def morpheus_polls() -> list[dict[str, Any]]:
    """rtx-b: one poll per dmon row, a second apart (dmon's default interval)."""
    prober = Prober()
    polls = []
    for row in dmon_boards(MORPHEUS):
        polls.append(prober.poll([row]))
        time.sleep(1.0)
    return polls


def queue_jobs(box: Box, start: bool = True) -> tuple[str, str, str]:
    """tokenize (succeeds), llama-1b (dies once, then trains), eval-sweep (waits behind it).
    Added before the runner starts, so their ids are j2..j4 on every build (j1 is the config)."""
    tokenize = box.add("python3", "prep.py", "--shards", "256",
                       opts=("--name", "tokenize", "--no-start"))
    llama = box.add("python3", "train.py", "--config", "llama1b.yaml",
                    opts=("--name", "llama-1b", "--retries", "2", "--retry-on-exit",
                          "--no-start"))
    sweep = box.add("python3", "eval.py", "--ckpt", "latest",
                    opts=("--name", "eval-sweep", "--no-start"))
    if start:
        box.json("start")
    return tokenize, llama, sweep


def main() -> None:
    realbox.private_mounts()
    out: dict[str, dict[str, Any]] = {}
    h100 = table_boards(H100)
    local = host("local", [Prober().poll(None)], profile="local")
    rtx_polls = morpheus_polls()
    throttle = host("a10-c", [Prober().poll(q_boards(A10) + q_boards(RTX2080))],
                    profile="runpod")

    box = Box("scenario")
    try:
        tokenize, llama, _ = queue_jobs(box)
        box.wait_state(tokenize, ("succeeded",))
        box.wait_log(llama, "step 4040")
        time.sleep(5.0)  # the room finds it a few seconds into its second attempt
        lambda_box = Prober(queue_root=box.root)
        healthy_h100 = host("h100-a", [lambda_box.poll(h100)], profile="lambda")
        with realbox.inode_full_tmpfs("/data"):
            inode = host("h100-a", [Prober(queue_root=box.root, mounts=("/data",))
                                    .poll(h100[:2])], profile="lambda")
    finally:
        box.stop()

    # The failed scenario: the same queue plus a finetune. The trainer is killed by hand, the
    # sweep runs, and the finetune dies by SIGKILL on each of its three attempts. The room
    # polls from the finetune's first attempt on (so it is the job the room shows, and its log
    # reaches the room through the history).
    box = Box("failed")
    try:
        _, llama, _ = queue_jobs(box, start=False)
        finetune = box.add("python3", "finetune.py", "--bs", "64",
                           opts=("--name", "finetune", "--retries", "2", "--no-start"))
        box.json("start")
        box.wait_log(llama, "step 4040")
        box.json("kill", llama)
        box.wait_state(finetune, ("running",))
        lambda_box = Prober(queue_root=box.root)
        polls = [lambda_box.poll(h100)]
        while box.job(finetune)["state"] not in ("failed", "succeeded"):
            time.sleep(0.5)
            polls.append(lambda_box.poll(h100))
        polls.append(lambda_box.poll(h100))
        failed = host("h100-a", polls, profile="lambda")
    finally:
        box.stop()

    rtx = host("rtx-b", rtx_polls, profile="vastai")
    stale = host("rtx-b", rtx_polls, profile="vastai", state="stale", last_ok=NOW - 180,
                 error="poll timed out after 10 s; reconnecting")
    out["healthy"] = {"now": NOW, "hosts": [healthy_h100, rtx, local]}
    out["stale"] = {"now": NOW, "hosts": [healthy_h100, stale, local]}
    out["throttle"] = {"now": NOW, "hosts": [throttle, local]}
    out["inode"] = {"now": NOW, "hosts": [inode, local]}
    out["failed"] = {"now": NOW, "hosts": [failed, local]}
    for name, data in out.items():
        path = realbox.HERE / f"scenario-{name}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
