"""Hostile input on issue 23's paths (issue 18's attack suite): what a compute node's probe
step, squeue or a user's --array says reaches a terminal only as inert text, and never a
shell. On the real recording tests/data/slurm/allocation.jsonl; no daemon is needed."""

from __future__ import annotations

import copy
import json

import pytest
from paths import DATA

from gpuroom.remote import queue_slurm, slurm_telemetry
from gpuroom.tui.model import LinkState
from gpuroom.tui.present.gpus import gpu_absence, gpu_rows
from gpuroom.tui.present.slurm import slurm_summary, task_summary
from gpuroom.tui.rules.clock import banner_lines
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.snapshot import Job, read_snapshot

LAST = json.loads((DATA / "slurm" / "allocation.jsonl").read_text().splitlines()[-1])["snapshot"]
EVIL = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[31m"


def jobs(snap: dict) -> dict[str, dict]:
    return {j["name"]: j for j in snap["queue"]["queues"]["default"]["jobs"]}


@pytest.mark.attack("hostile text", "a compute node's probe names its host and GPU with "
                    "terminal escapes (OSC 52 clipboard write, clear screen)")
def test_a_nodes_names_reach_the_gpu_pane_and_findings_inert() -> None:
    snap = copy.deepcopy(LAST)
    node = jobs(snap)["sleeper"]["telemetry"]["nodes"][0]
    node["host"]["hostname"] = f"n1{EVIL}"
    node["gpus"][0].update(name=f"H100{EVIL}", clock_event_reasons=["sw_thermal_slowdown"])
    view = read_snapshot(snap)
    text = " ".join(r.name for r in gpu_rows(view))
    found = diagnose(None, view, LinkState.UP, None, snap["host"]["time"], host="login")
    seen = " ".join(f.host for f in found)
    shown = " ".join(banner_lines(found, []))  # findings reach a terminal through the banner
    assert "\x1b" not in text and "\x07" not in text and "n1" in text and "H100" in text
    assert "login/n1" in seen and "\x1b" not in seen
    assert "login/n1" in shown and "\x1b" not in shown and "\x07" not in shown


@pytest.mark.attack("bad answers", "the probe step prints garbage, a half JSON line and a "
                    "JSON list instead of one document per node")
def test_a_probe_steps_garbage_is_no_node() -> None:
    out = 'srun: warning\n{"host": {"hostname": "n1"}}\n{"host": \n[1, 2]\n\x00\xff{}\n'
    assert slurm_telemetry.parse_nodes(out) == [{"host": {"hostname": "n1"}}]


@pytest.mark.attack("hostile text", "an in-job probe error and a refused --overlap carry "
                    "escapes and newlines into the GPU pane's line")
def test_a_probe_error_reaches_the_pane_as_one_inert_line() -> None:
    snap = copy.deepcopy(LAST)
    snap["gpus"] = []
    tele = jobs(snap)["sleeper"]["telemetry"]
    tele.update(nodes=[], error=f"srun exit 1: {EVIL}boom\nsecond line")
    line = gpu_absence(read_snapshot(snap))
    assert line is not None and "\x1b" not in line and "\n" not in line and "boom" in line


@pytest.mark.attack("hostile text", "squeue's reason and an array task's node carry escapes")
def test_a_reason_and_a_tasks_node_are_inert() -> None:
    sweep = copy.deepcopy(jobs(LAST)["sweep"])
    sweep["reason"] = f"Priority{EVIL}"
    sweep["tasks"][0].update(reason=f"JobArrayTaskLimit{EVIL}", node=f"n1{EVIL}",
                             state="running")
    job = Job.read(sweep)
    for text in (slurm_summary(job), task_summary(job.tasks[0])):
        assert "\x1b" not in text and "\x07" not in text


@pytest.mark.attack("injection", "--array carrying a second #SBATCH line or a shell command")
@pytest.mark.parametrize("spec", ["0-3\n#SBATCH --uid=0", "0-3; rm -rf ~", "$(reboot)",
                                  "0-3%2 --wrap=id", ""])
def test_an_array_spec_is_validated_before_it_reaches_the_script(spec: str) -> None:
    with pytest.raises(queue_slurm.SlurmError, match="--array"):
        queue_slurm.render_script(
            "j1", "default", argv=["true"], cwd="/tmp", env={}, log="/tmp/j1_%a.log",
            runs_dir="/tmp", ckpt_dir="/tmp/c", pythonpath="/tmp", name=None,
            time_limit=None, signal_lead_s=0, cpus_per_task=None, gpus=None, partition=None,
            array=spec or " ")
