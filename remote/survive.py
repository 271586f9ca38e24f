"""Does a job's checkpoint dir survive the platform's stop? (U46, principle 4)

``queue add --survives PATH`` (repeatable) names the profile's mounts that survive a stop, as
the jump host's profile has them (~ and $VAR expanded here, on the box). The answer of
``queue add`` carries a warning when the job's checkpoints will go anywhere else.
"""

from __future__ import annotations

import os
from typing import List, Optional


def _real(path: str) -> str:
    return os.path.realpath(os.path.expandvars(os.path.expanduser(path)))


def under_any(path: str, roots: List[str]) -> bool:
    real = _real(path)
    for root in roots:
        r = _real(root)
        if real == r or real.startswith(r.rstrip("/") + "/"):
            return True
    return False


def destroy_note(ckpt_dir: str, stop_only: List[str]) -> Optional[str]:
    """One sentence when ``ckpt_dir`` is on a mount that survives a stop but not a destroy
    (RunPod's volume disk): safe to stop, gone on a terminate unless pulled (principle 4)."""
    for root in stop_only:
        if under_any(ckpt_dir, [root]):
            return (f"checkpoints go to {ckpt_dir}, on {root}: it survives a stop but not a "
                    "destroy (principle 4). Pull them (gpuroom pull HOST) before you "
                    "terminate, or checkpoint to storage that survives both")
    return None


def ckpt_warning(ckpt_dir: str, surviving: List[str]) -> Optional[str]:
    """One sentence when ``ckpt_dir`` is under none of ``surviving`` (none given: no claim)."""
    if not surviving or under_any(ckpt_dir, surviving):
        return None
    return (f"checkpoints go to {ckpt_dir}, which is not under {' or '.join(surviving)}: "
            f"the platform wipes it on stop (U46). Fix: --durable-dir {surviving[0]}/runs "
            "here, or queue config --durable-dir for every job")
