"""SLURM3: since Slurm 22.05 an ``srun`` inside ``sbatch`` no longer reads ``--cpus-per-task``;
the script gpuroom submits hands the allocation's CPUs to every nested ``srun`` through
``SRUN_CPUS_PER_TASK``. The rendered script is run by the real bash, as sbatch would on the
node, with the variables Slurm sets; no Slurm is needed to see what the job inherits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuroom.remote import queue_slurm


def _run_script(tmp_path: Path, slurm_env: dict[str, str]) -> str:
    seen = tmp_path / "seen"
    script = queue_slurm.render_script(
        "j1", "default", argv=["sh", "-c", f'printf %s "${{SRUN_CPUS_PER_TASK-unset}}" > {seen}'],
        cwd=str(tmp_path), env={}, log=str(tmp_path / "j1.log"), runs_dir=str(tmp_path),
        ckpt_dir=str(tmp_path / "c"), pythonpath=str(tmp_path), name=None, time_limit=None,
        signal_lead_s=0, cpus_per_task=4, gpus=None, partition=None)
    assert "#SBATCH --cpus-per-task=4" in script
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SRUN_"))} | {"SLURM_JOB_ID": "77"} | slurm_env
    done = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, timeout=30, check=False,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return seen.read_text()


def test_the_job_sees_the_allocations_cpus_as_srun_cpus_per_task(tmp_path: Path) -> None:
    assert _run_script(tmp_path, {"SLURM_CPUS_PER_TASK": "4"}) == "4"


@pytest.mark.parametrize("slurm_env", [{}, {"SLURM_CPUS_PER_TASK": ""}])
def test_without_a_cpu_count_from_slurm_nothing_is_invented(
        tmp_path: Path, slurm_env: dict[str, str]) -> None:
    assert _run_script(tmp_path, slurm_env) == "unset"
