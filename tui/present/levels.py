"""Levels: how urgent a row or cell is (ok / warn / crit), shared by every pane."""

from __future__ import annotations

from typing import Literal

Level = Literal["ok", "warn", "crit"]

_LEVEL_RANK = {"ok": 0, "warn": 1, "crit": 2}


def worst(*levels: Level) -> Level:
    """The more urgent of several levels."""
    return max(levels, key=lambda lv: _LEVEL_RANK[lv], default="ok")


def level_of(value: float | None, warn: float, crit: float) -> Level:
    """A percentage against its warn and crit thresholds; not reported is ok."""
    if value is None:
        return "ok"
    if value >= crit:
        return "crit"
    return "warn" if value >= warn else "ok"
