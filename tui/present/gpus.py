"""The GPU pane's rows and the hosts table's GPU cells, from the parsed snapshot."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuroom.tui.present.box import BoxView
from gpuroom.tui.present.format import NA, fmt_text, fmt_whole
from gpuroom.tui.present.levels import Level
from gpuroom.tui.snapshot import Gpu, GpuProcess, Snapshot

# Clock-event reasons that say nothing is wrong (an idle GPU clocks down on purpose).
BENIGN_THROTTLE = frozenset({"idle", "gpu_idle", "applications_clocks_setting", "none"})

# nvidia-smi -q "Clocks Event Reasons" names, shortened for a narrow column.
THROTTLE_SHORT = {
    "sw_power_cap": "SwPwrCap",
    "hw_slowdown": "HwSlow",
    "hw_thermal_slowdown": "HwThermal",
    "hw_power_brake_slowdown": "PwrBrake",
    "sw_thermal_slowdown": "SwThermal",
    "sync_boost": "SyncBoost",
    "display_clock_setting": "Display",
    "board_limit": "BoardLim",
    "reliability": "Reliab",
}
MODEL_WIDTH = 9  # "H100 80GB": enough to tell cards apart in the hosts table


@dataclass(frozen=True)
class GpuRow:
    """One GPU, dmon-like. None = not reported."""

    index: int
    name: str
    sm_mhz: float | None
    sm_max_mhz: float | None
    mem_mhz: float | None
    mem_max_mhz: float | None
    power_w: float | None
    power_limit_w: float | None
    temp_c: float | None
    util_gpu: float | None
    util_mem: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    throttle: tuple[str, ...]  # active reasons that cost clocks (idle filtered out)

    @property
    def level(self) -> Level:
        return "warn" if self.throttle else "ok"

    @property
    def throttle_short(self) -> str:
        return ",".join(THROTTLE_SHORT.get(t, t) for t in self.throttle)


def _gpus(snapshot: Snapshot) -> list[tuple[str, Gpu]]:
    """The box's GPUs, then (on a Slurm login node) each running job's GPUs as its
    in-allocation probe saw them, named with the node and the job (issue 23)."""
    return [("", g) for g in snapshot.gpus] + [
        (f"{fmt_text(n.host.hostname or '?')} {job.id}: ", g)
        for job, n in snapshot.job_nodes for g in n.gpus]


def gpu_rows(snapshot: Snapshot | None) -> list[GpuRow]:
    """One row per GPU of the snapshot (a Slurm job's: one per GPU of each of its nodes)."""
    if snapshot is None:
        return []
    return [
        GpuRow(
            index=i if g.index is None else g.index,
            name=where + fmt_text(g.name),
            sm_mhz=g.clock_sm_mhz,
            sm_max_mhz=g.clock_sm_max_mhz,
            mem_mhz=g.clock_mem_mhz,
            mem_max_mhz=g.clock_mem_max_mhz,
            power_w=g.power_w,
            power_limit_w=g.power_limit_w,
            temp_c=g.temp_c,
            util_gpu=g.util_gpu_pct,
            util_mem=g.util_mem_pct,
            mem_used_mib=g.mem_used_mib,
            mem_total_mib=g.mem_total_mib,
            throttle=tuple(fmt_text(r) for r in g.clock_event_reasons if r not in BENIGN_THROTTLE),
        )
        for i, (where, g) in enumerate(_gpus(snapshot))
    ]


def gpu_absence(snapshot: Snapshot | None) -> str | None:
    """Why there are no GPU rows ("no GPU" is a normal state), None when there are some."""
    if snapshot is None:
        return "no snapshot yet"
    if snapshot.gpus or any(n.gpus for _, n in snapshot.job_nodes):
        return None
    reason = snapshot.gpu_error
    probe = next((j.telemetry for j in snapshot.jobs
                  if j.state == "running" and j.telemetry is not None and j.telemetry.error),
                 None)
    if probe is not None:  # say why the job's own GPUs are not shown (once: the pane's line)
        reason = f"{reason or 'none on the login node'}; in-job probe: {probe.error}"
    if reason is None:
        reason = snapshot.section_error("gpus")
    if reason is None:
        reason = "none found" if "gpus" in snapshot.sections else "not reported by the probe"
    return fmt_text(reason)


def gpu_summary(rows: Sequence[GpuRow]) -> tuple[str, str, str]:
    """(count+model, mean SM clock / max, total power / limit) for the hosts table."""
    if not rows:
        return "0", "-", "-"
    names = {r.name.replace("NVIDIA ", "").replace("GeForce ", "")[:MODEL_WIDTH] for r in rows}
    model = (names.pop() or "?") if len(names) == 1 else "mixed"
    count = f"{len(rows)}x {model}"

    def mean(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    def total(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) if got else None

    sm, sm_max = mean(r.sm_mhz for r in rows), mean(r.sm_max_mhz for r in rows)
    pw, pw_max = total(r.power_w for r in rows), total(r.power_limit_w for r in rows)
    sm_text = f"{fmt_whole(sm)}/{fmt_whole(sm_max, missing='?')}" if sm is not None else "-"
    pw_text = f"{fmt_whole(pw)}/{fmt_whole(pw_max, missing='?')}" if pw is not None else "-"
    return count, sm_text, pw_text


# What a process on a GPU is to gpuroom: one of the box's jobs (its pid or process group is a
# running attempt's), a desktop's display process (ignored by the free-GPU check, GEN7), any
# other process (foreign: it holds VRAM a job may need), or a holder of /dev/nvidia* that the
# GPU's process list does not show (zombie, U11).
Mark = Literal["job", "display", "foreign", "zombie"]
MARK_LEVEL: dict[Mark, Level] = {"job": "ok", "display": "ok", "foreign": "warn", "zombie": "crit"}


@dataclass(frozen=True)
class ProcRow:
    """One process on one GPU, nvitop-like; every cell already inert text."""

    gpu: str  # the GPU index, "?" for a zombie (its device nodes, not a listed GPU)
    pid: str
    user: str
    type: str  # C, G, C+G; "-" for a zombie
    command: str
    vram: str  # MiB
    mark: Mark
    job: str | None  # the gpuroom job's id when mark is "job"

    @property
    def level(self) -> Level:
        return MARK_LEVEL[self.mark]

    @property
    def mark_text(self) -> str:
        if self.mark == "job":
            return f"job {self.job}"
        return "zombie U11" if self.mark == "zombie" else self.mark


def _job_groups(snapshot: Snapshot) -> dict[int, str]:
    """pid -> job id for every attempt still running. The runner starts each attempt in its
    own session, so the attempt's pid is the process group of everything it spawns."""
    groups: dict[int, str] = {}
    for job in snapshot.jobs:
        last = job.last_attempt
        if last is not None and last.pid is not None and last.end is None:
            groups[last.pid] = job.id
    return groups


def _mark(p: GpuProcess, groups: dict[int, str]) -> tuple[Mark, str | None]:
    for pid in (p.pid, p.pgid):
        if pid is not None and pid in groups:
            return "job", fmt_text(groups[pid])
    return ("display", None) if p.display_only else ("foreign", None)


def gpu_processes(snapshot: Snapshot | None) -> list[ProcRow]:
    """Every process on every GPU, marked, then the unlisted /dev/nvidia* holders (U11)."""
    if snapshot is None:
        return []
    groups = _job_groups(snapshot)
    rows = []
    for i, g in enumerate(snapshot.gpus):
        for p in g.processes:
            mark, job = _mark(p, groups)
            rows.append(ProcRow(
                gpu=str(i if g.index is None else g.index),
                pid=NA if p.pid is None else str(p.pid),
                user=fmt_text(p.user) or NA,
                type=fmt_text(p.type) or NA,
                command=fmt_text(p.name or p.comm) or NA,
                vram=fmt_whole(p.used_mib),
                mark=mark, job=job))
    for h in snapshot.vram_holders:
        rows.append(ProcRow(
            gpu="?", pid=NA if h.pid is None else str(h.pid), user=fmt_text(h.user) or NA,
            type=NA, command=fmt_text(h.cmdline or h.comm) or NA, vram=NA,
            mark="zombie", job=None))
    return rows


HISTORY_LEN = 24  # points of SM clock / power history per GPU (one per poll)


@dataclass(frozen=True)
class GpuView:
    """Everything the GPU pane shows for one host."""

    host: str
    rows: tuple[GpuRow, ...]
    absence: str | None
    sm_history: tuple[tuple[float | None, ...], ...]  # per row, oldest first
    power_history: tuple[tuple[float | None, ...], ...]
    # A STALE or DOWN host: why it does not answer, with the fix (present/hosts.py
    # LinkProblem.lines), shown above whatever the last answer said.
    problem: tuple[str, ...] = ()
    processes: tuple[ProcRow, ...] = ()  # gpu_processes: listed under the GPU rows
    box: BoxView | None = None  # the box's CPU and memory, the pane's first line
