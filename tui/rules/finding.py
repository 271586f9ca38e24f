"""A finding: one thing the doctor says is wrong, with its gotcha id, what was seen and the fix.

Its own module so that rule modules (stall.py, money.py) and the doctor that gathers them can
all build findings without importing one another in a circle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["info", "warn", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "critical": 2}


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    host: str
    title: str
    seen: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
