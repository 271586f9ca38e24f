"""Text renderings of profiles for the CLI and the room: pure functions, no printing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from .loader import DangerClock, Mount, Profile

_CLOCK_LABELS = {
    "auto_release_after_stop": "auto-release after stop",
    "session_cap": "session cap",
    "idle_timeout": "idle timeout",
    "walltime": "walltime",
    "billing_while_stopped": "bills while stopped",
    "billing_while_running": "bills until torn down",
    "quota": "quota",
}


def format_duration(seconds: int) -> str:
    """Seconds in the unit a person would say: 30 s, 90 min, 12 h, 15 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def format_clock_value(clock: DangerClock) -> str:
    if isinstance(clock.seconds, int):
        return ("~" if clock.approximate else "") + format_duration(clock.seconds)
    return {"none": "no timer", "per-job": "set per job"}.get(clock.seconds, clock.seconds)


def _fact(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def _survival(value: object) -> str:
    if value is True:
        return "survives"
    if value is False:
        return "LOST"
    return "?" if value == "unknown" else str(value)


def _columns(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def _clock_summary(profile: Profile) -> str:
    if not profile.danger_clocks:
        return "-"
    # "bills while stopped" needs no value; a timer does.
    return "; ".join(_CLOCK_LABELS[c.kind] if c.seconds == "none"
                     else f"{_CLOCK_LABELS[c.kind]} {format_clock_value(c)}"
                     for c in profile.danger_clocks)


def format_profile_list(profiles: Iterable[Profile]) -> str:
    """One line per profile: name, kind, how the meter stops, its danger clocks."""
    rows = [["NAME", "KIND", "METER STOP", "DANGER CLOCKS", "FROM"]]
    for p in profiles:
        stop = p.meter_stop_verb
        if p.meter_stop_irreversible is True:
            stop += " (irreversible)"
        rows.append([p.name, p.kind, stop, _clock_summary(p), p.origin])
    if len(rows) == 1:
        return "no profiles"
    return "\n".join(_columns(rows, indent=""))


def format_survival_matrix(profile: Profile) -> list[str]:
    """mount x {stop, destroy}, with what stop and destroy mean on this platform."""
    lines = [f"  stop    = {profile.stop_means}", f"  destroy = {profile.destroy_means}"]
    if not profile.mounts:
        lines.append("  (no mounts known for this platform: measure df -h and df -i "
                     "on the box before trusting any path)")
        return lines
    rows = [["MOUNT", "ROLE", "STOP", "DESTROY", "NOTE"]]
    mount: Mount
    for mount in profile.mounts:
        path = "(path unknown)" if mount.path == "unknown" else mount.path
        rows.append([path, mount.role, _survival(mount.survives_stop),
                     _survival(mount.survives_destroy), mount.note])
    return lines + _columns(rows)


def format_profile(profile: Profile) -> str:
    """Everything a user should know about a platform: facts, survival matrix, clocks, surface."""
    title = profile.title or profile.name
    out = [f"{title} ({profile.name}): kind {profile.kind}, {profile.origin} profile "
           f"{profile.path}"]
    if profile.summary:
        out.append(profile.summary)
    stop = profile.meter_stop_verb
    if profile.meter_stop_irreversible is True:
        stop += " (irreversible: deletes the disk)"
    elif profile.meter_stop_irreversible is not False:
        stop += f" (irreversible: {profile.meter_stop_irreversible})"
    detach = profile.detach_primitive + (f": {profile.detach_how}" if profile.detach_how else "")
    facts = [
        ["meter stop", stop],
        ["detach", detach],
        ["spot", f"{_fact(profile.spot_available)}, grace "
                 + (format_duration(profile.spot_grace_s) if isinstance(profile.spot_grace_s, int)
                    else profile.spot_grace_s)],
        ["shared fs", profile.shared_fs],
        ["inode cap", f"{profile.inode_cap:,}" if isinstance(profile.inode_cap, int)
                      else profile.inode_cap],
        ["free egress", _fact(profile.free_egress)],
        ["china mirror", _fact(profile.china_mirror_needed)],
        ["host driver CUDA max", profile.host_driver_cuda_max],
        ["local NVMe", profile.local_nvme],
        ["durable dir", profile.durable_dir],
        ["data dir", profile.data_dir],
    ]
    out += ["", "Facts", *_columns(facts)]
    out += ["", "Survival matrix", *format_survival_matrix(profile)]
    out += ["", "Danger clocks"]
    if profile.danger_clocks:
        out += _columns([[_CLOCK_LABELS[c.kind], format_clock_value(c), c.text]
                          for c in profile.danger_clocks])
    else:
        out.append("  (none known for this platform)")
    surface = profile.surface
    if surface.dangers or surface.conveniences or surface.notes:
        out += ["", "Surface to the user"]
        out += [f"  ! {line}" for line in surface.dangers]
        out += [f"  + {line}" for line in surface.conveniences]
        out += [f"  - {line}" for line in surface.notes]
    sourced = {**{f"mounts[{i}]": m.source for i, m in enumerate(profile.mounts) if m.source},
               **{f"danger_clocks[{i}]": c.source
                  for i, c in enumerate(profile.danger_clocks) if c.source},
               **profile.sources}
    if sourced:
        # Sources cite gotcha ids and principles, which docs/GOTCHAS.md explains.
        out += ["", "Sources (ids: docs/GOTCHAS.md)",
                *_columns([[k, v] for k, v in sourced.items()])]
    return "\n".join(out)


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """A JSON-ready dict of the profile (for --json)."""
    data = dataclasses.asdict(profile)
    data["path"] = str(profile.path)
    data["sources"] = dict(profile.sources)
    data["watch_paths"] = profile.watch_paths()
    return data
