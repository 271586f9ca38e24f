"""A pynvml stand-in for the NVML path of remote/gpu.py: this machine has no GPU.

Its two GPUs answer with values read off two real ``nvidia-smi -q`` captures (the A10 and the
RTX 2080 below); tests/unit/remote/test_gpu_probe.py checks the reason bits against the
captures' own "Active" lines.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml

# The first GPU of FakeNvml replays this capture, the second the RTX 2080 one.
A10 = "throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt"
RTX2080 = "throttle/rtx2080-driver535era-q-gpu-block-swpowercap.txt"

NOT_SUPPORTED = object()


class FakeNvml:
    """pynvml-shaped answers for two GPUs, values taken from two real -q captures."""

    NVMLError = pynvml.NVMLError

    def __init__(self) -> None:
        self.shutdowns = 0
        self.gpus: list[dict[str, Any]] = [
            {  # NVIDIA A10 (A10 capture)
                "name": b"NVIDIA A10", "uuid": "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d",
                "bus": "00000000:06:00.0", "clock": {0: 210, 1: 210, 2: 405},
                "max": {1: 1695, 2: 6251}, "power_mw": 21300, "limit_mw": 150000, "temp": 33,
                "util": (0, 0), "mem": (1, 23028), "reasons": 0x1 | 0x8 | 0x80,
                "ecc": {0: 0, 1: 0}, "compute": [], "graphics": [],
            },
            {  # NVIDIA GeForce RTX 2080 (RTX 2080 capture): no ECC, one Xorg process
                "name": "NVIDIA GeForce RTX 2080",
                "uuid": "GPU-3965f0d5-5188-6a1a-0e3f-14666ad9ce20",
                "bus": "00000000:02:00.0", "clock": {0: 300, 1: 300, 2: 405},
                "max": {1: 2130, 2: 7000}, "power_mw": 18310, "limit_mw": 215000,
                "temp": 27, "util": (0, 0), "mem": (8, 8192), "reasons": 0x4,
                "ecc": NOT_SUPPORTED, "compute": [],
                "graphics": [SimpleNamespace(pid=1394, usedGpuMemory=4 * 1024 * 1024)],
            },
        ]

    def _get(self, handle: int, key: str) -> Any:
        value = self.gpus[handle][key]
        if value is NOT_SUPPORTED:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> Any:
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> Any:
        return self._get(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._get(h, "bus"))

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return int(self._get(h, "clock")[clock])

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return int(self._get(h, "max")[clock])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._get(h, "power_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(self._get(h, "limit_mw"))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._get(h, "temp"))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        g, m = self._get(h, "util")
        return SimpleNamespace(gpu=g, memory=m)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used, total = self._get(h, "mem")
        return SimpleNamespace(used=used * 1024 * 1024, total=total * 1024 * 1024)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._get(h, "reasons"))

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return int(self._get(h, "ecc")[kind])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return list(self._get(h, "compute"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return list(self._get(h, "graphics"))
