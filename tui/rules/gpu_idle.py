"""Is a GPU doing no work? Shared by the idle clock (tui/rules/clock.py) and the teardown
gate's "GPU work not explained by gpuroom" item (tui/rules/gate_risk.py)."""

from __future__ import annotations

from gpuroom.tui.snapshot import Gpu

# A GPU drawing at most this share of its power limit is doing no training (an idle H100 draws
# ~70 of 700 W; the idle A10 of fixtures/throttle/a10-... 21.3 of 150 W).
IDLE_POWER_FRAC = 0.2


def gpu_idle(gpu: Gpu) -> bool:
    power, limit = gpu.power_w, gpu.power_limit_w
    if power is not None and limit:
        return power <= IDLE_POWER_FRAC * limit
    util = gpu.util_gpu_pct
    return util is not None and util <= 1.0
