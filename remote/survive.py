"""Does a job's checkpoint dir survive the platform's stop? (U46, SLURM5, principle 4)

``queue add --survives PATH`` (repeatable) names the profile's mounts that survive a stop, as
the jump host's profile has them (~ and $VAR expanded here, on the box). The answer of
``queue add`` carries a warning when the job's checkpoints will go anywhere else.

A Slurm job runs on a compute node, so "anywhere else" is no claim there (a site's shared
filesystem may be /project or /work, which no profile lists); what is known to die with the
allocation is: ``--node-local PATH`` (the profile's mounts a stop wipes: $TMPDIR) and
``NODE_LOCAL``.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from .queue_events import HOST_IN_FIX


def _real(path: str) -> str:
    return os.path.realpath(os.path.expandvars(os.path.expanduser(path)))


def under_any(path: str, roots: List[str]) -> bool:
    real = _real(path)
    for root in roots:
        r = _real(root)
        if real == r or real.startswith(r.rstrip("/") + "/"):
            return True
    return False


# Node-local on any compute node: wiped at the end of the allocation, or at least not on the
# node a requeued job lands on.
NODE_LOCAL = ("$TMPDIR", "/tmp", "/var/tmp", "/dev/shm")


def _under_root(path: str, root: str) -> bool:
    """``path`` under ``root``; a root that is a $VARIABLE is matched as written: the
    allocation sets it (Slurm's $TMPDIR) and the login node's value, if any, is another."""
    if root.startswith("$"):
        name = root[1:].split("/", 1)[0]
        return any(path == form or path.startswith(form + "/")
                   for form in (f"${name}", f"${{{name}}}"))
    if not os.path.isabs(os.path.expandvars(os.path.expanduser(path))):
        # An unset $VAR or a relative path: realpath would resolve it against the helper's
        # own cwd (under /tmp, say), which says nothing about the job's node.
        return False
    return under_any(path, [root])


def node_local_warning(ckpt_dir: str, node_local: List[str],
                       surviving: List[str]) -> Optional[str]:
    """One sentence when a Slurm job's ``ckpt_dir`` is on node-local storage (SLURM5)."""
    hit = next((r for r in dict.fromkeys([*node_local, *NODE_LOCAL])
                if _under_root(ckpt_dir, r)), None)
    if hit is None:
        return None
    where = " or ".join(surviving) if surviving else "the shared filesystem"
    return (f"checkpoints go to {ckpt_dir}, which is node-local ({hit}): wiped when the "
            "Slurm job ends or is requeued on another node (SLURM5). Fix: --durable-dir "
            f"under {where}, or stage them in $TMPDIR and copy them there before the job exits")


def ckpt_places(cwd: str, declared: List[str], ckpt_dir: str) -> List[Tuple[str, str]]:
    """(label, path) of each place gpuroom will look for the job's checkpoints: the
    ``--ckpt`` paths when given, else the cwd (found there by name) and $GPUROOM_CKPT_DIR."""
    if declared:
        return [(f"checkpoints (--ckpt {pat}) are at {os.path.join(cwd, pat)}",
                 os.path.join(cwd, pat)) for pat in declared]
    return [(f"checkpoints are looked for under the job's cwd {cwd}", cwd),
            (f"$GPUROOM_CKPT_DIR is {ckpt_dir}", ckpt_dir)]


def places_line(places: List[Tuple[str, str]]) -> str:
    """queue add's one line on where the job's checkpoints will be looked for."""
    return "; ".join(label for label, _ in places) + (
        "" if places and "--ckpt" in places[0][0] else
        " (*.pt, *.pth, *.ckpt, *.safetensors, checkpoint-N/ written since the job started; "
        "name them with --ckpt PATH)")


def destroy_note(ckpt_dir: str, stop_only: List[str],
                 label: Optional[str] = None) -> Optional[str]:
    """One sentence when ``ckpt_dir`` is on a mount that survives a stop but not a destroy
    (RunPod's volume disk): safe to stop, gone on a terminate unless pulled (principle 4)."""
    for root in stop_only:
        if under_any(ckpt_dir, [root]):
            said = label or f"checkpoints go to {ckpt_dir}"
            return (f"{said}, on {root}: it survives a stop but not a destroy"
                    f" (principle 4). Pull them (gpuroom pull {HOST_IN_FIX}) before you "
                    "terminate, or checkpoint to storage that survives both")
    return None


def ckpt_warning(ckpt_dir: str, surviving: List[str],
                 label: Optional[str] = None) -> Optional[str]:
    """One sentence when ``ckpt_dir`` is under none of ``surviving`` (none given: no claim)."""
    if not surviving or under_any(ckpt_dir, surviving):
        return None
    said = label or f"checkpoints go to {ckpt_dir}"
    return (f"{said}, which is not under {' or '.join(surviving)}: "
            f"the platform wipes it on stop (U46). Fix: --durable-dir {surviving[0]}/runs "
            "here, or queue config --durable-dir for every job")
