"""`gpuroom queue add --host any` (issue 20): which configured host has the asked GPUs and
VRAM free right now, and why. No scheduler beyond this one choice: the first poll decides.

Pure: the hosts' states and snapshots come in. A GPU is free when no compute process uses it
(a display process, type G, is no run to collide with: GEN7) and, when the job says how much
VRAM it needs per GPU, that much of its memory is unused (U10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuroom.tui.model import LinkState
from gpuroom.tui.present.format import fmt_bytes, fmt_number, fmt_text
from gpuroom.tui.rules.doctor import MIB
from gpuroom.tui.snapshot import Gpu, Snapshot


@dataclass(frozen=True)
class Candidate:
    """One configured host as the last poll saw it."""

    name: str
    state: LinkState
    snapshot: Snapshot | None
    error: str | None = None


@dataclass(frozen=True)
class Placement:
    """The host picked (None: none fits), the reason, and a line per host looked at."""

    host: str | None
    why: str
    seen: tuple[str, ...]
    # None found, every host answered, and none has as many GPUs as asked: the most any has
    # (0 on a CPU fleet). Waiting cannot help then; a smaller --gpus can.
    most_gpus: int | None = None


def _free_mib(gpu: Gpu) -> float | None:
    if gpu.mem_total_mib is None or gpu.mem_used_mib is None:
        return None
    return gpu.mem_total_mib - gpu.mem_used_mib


def _gpu_free(gpu: Gpu, vram_mib: float | None) -> bool:
    if any(not p.display_only for p in gpu.processes):
        return False
    if vram_mib is None:
        return True
    free = _free_mib(gpu)
    return free is not None and free >= vram_mib


def _fit(c: Candidate, gpus: int, vram_mib: float | None) -> tuple[int, str]:
    """How many GPUs of ``c`` are free (-1: it cannot take the job), and what was seen."""
    if c.state is not LinkState.UP or c.snapshot is None:
        return -1, f"{c.name}: {c.state.value}" + (f" ({fmt_text(c.error)})" if c.error else "")
    cards = c.snapshot.gpus
    free = [g for g in cards if _gpu_free(g, vram_mib)]
    # The ask in the unit of its flag (--vram-mib); what is free, as every byte count is shown.
    vram = f" with {fmt_number(vram_mib, ' MiB')}" if vram_mib is not None else ""
    said = f"{c.name}: {len(free)} of {len(cards)} GPU(s) free{vram}"
    if free and vram_mib is None:
        most = max((_free_mib(g) or 0.0) for g in free)
        said += f" (up to {fmt_bytes(most * MIB)} free)"
    if gpus == 0:
        return len(free), f"{c.name}: up (the job asks for no GPU)"
    return (len(free) if len(free) >= gpus else -1), said


def choose_host(candidates: Sequence[Candidate], gpus: int,
                vram_mib: float | None) -> Placement:
    """The host with the most free GPUs among those that fit (the first listed on a tie)."""
    best: tuple[int, Candidate, str] | None = None
    seen = []
    for c in candidates:
        free, said = _fit(c, gpus, vram_mib)
        seen.append(said)
        if free >= 0 and (best is None or free > best[0]):
            best = (free, c, said)
    ask = f"{gpus} GPU(s)" + (f" with {fmt_number(vram_mib, ' MiB')} each" if vram_mib else "")
    if best is None:
        answered = [c.snapshot for c in candidates
                    if c.state is LinkState.UP and c.snapshot is not None]
        most = max((len(snap.gpus) for snap in answered), default=0)
        if answered and len(answered) == len(candidates) and most < gpus:
            return Placement(None, f"no host has {ask}: the most any has is {most}",
                             tuple(seen), most_gpus=most)
        return Placement(None, f"no host has {ask} free right now", tuple(seen))
    return Placement(best[1].name, f"picked {best[1].name} for {ask}: {best[2]}", tuple(seen))
